package shim

import (
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/verbs"
)

// appClose is the application's move of q to ERR (as rdma_disconnect
// makes it) through the interposed ibv_modify_qp.
func appClose(t *testing.T, q *appQP) {
	t.Helper()
	appMove(t, q, verbs.QPSErr)
}

// appMove is the application's move of q to state through the
// interposed ibv_modify_qp.
func appMove(t *testing.T, q *appQP, state verbs.QPState) {
	t.Helper()
	at := verbs.QPAttr{QPState: state}
	if err := q.qp.Modify(&at, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	q.x.rt.Modified(q.x.id, Modify{QPN: q.qp.QPN(), Mask: verbs.QPAttrState, State: state, Attr: at})
}

// eachRecvFlushedOnce checks that after index from q's application saw
// each receive it had outstanding flushed once, in posting order, and no
// send completion it did not post.
func eachRecvFlushedOnce(t *testing.T, q *appQP, from int) {
	t.Helper()
	want := uint64(1000 + len(q.recvd))
	for _, wc := range q.all[from:] {
		if wc.WRID >= 1000 {
			if wc.Status != verbs.WCWRFlushErr || wc.WRID != want {
				var ids []uint64
				for _, w := range q.all[from:] {
					ids = append(ids, w.WRID)
				}
				t.Fatalf("%s: receive completion %+v, want the flush of receive %d (each once, in order); all: %v", q.x.name, wc, want, ids)
			}
			want++
		}
	}
	if got := int(want) - 1000 - len(q.recvd); got != l2Recvs {
		t.Fatalf("%s: %d receives flushed after the close, want the %d outstanding", q.x.name, got, l2Recvs)
	}
}

// TestAppCloseBeforeFailover: with no fault, both applications end their
// connection (their QPs to ERR, as rdma_disconnect does). Layer 2 leaves
// the QPs to them: nothing is diverted, every outstanding receive
// flushes to the application once, the status says why, and a later scan
// does not arm them again.
func TestAppCloseBeforeFailover(t *testing.T) {
	f, hosts, qa, qb, from := exchangeWorld(t, 36, l2opts{}, false)
	appClose(t, qa)
	appClose(t, qb)
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) >= l2Recvs && len(qb.errs) >= l2Recvs })
	for i, q := range []*appQP{qa, qb} {
		eachRecvFlushedOnce(t, q, from[i])
		if q.diverted() || q.armed() {
			t.Fatalf("%s: diverted %v, armed %v after the application closed its QP", q.x.name, q.diverted(), q.armed())
		}
		if s := q.status(); s.Layer != "none" || !strings.Contains(s.Reason, "the application moved the QP to ERR") {
			t.Fatalf("%s: status %+v", q.x.name, s)
		}
		q.x.rt.armConnected()
		if q.armed() {
			t.Fatalf("%s: a scan armed the QP the application closed", q.x.name)
		}
	}
}

// TestAppCloseAfterFailover: both QPs failed over (A's link cut); then
// both applications end their connection. Their receives are on the
// backup QPs, where the move to ERR did not reach: each Conn surfaces and
// the backup flushes them, every one to the application once, in order,
// on the Go data path and on the express lane alike. (Before, none
// flushed: a program waiting for them hung.)
func TestAppCloseAfterFailover(t *testing.T) {
	for _, o := range []struct {
		name string
		o    l2opts
	}{{"go", l2opts{}}, {"express", l2opts{express: true}}} {
		t.Run(o.name, func(t *testing.T) {
			f, hosts, qa, qb, from := exchangeWorld(t, 37, o.o, true)
			appClose(t, qa)
			appClose(t, qb)
			drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) >= l2Recvs && len(qb.errs) >= l2Recvs })
			for i, q := range []*appQP{qa, qb} {
				eachRecvFlushedOnce(t, q, from[i])
				if sq := q.connState(); sq != fsm.SQSurfaced {
					t.Fatalf("%s: Conn in %v after the close, want surfaced", q.x.name, sq)
				}
				if s := q.status(); !strings.Contains(s.Reason, "the application moved the QP to ERR after its failover") {
					t.Fatalf("%s: status %+v", q.x.name, s)
				}
			}
		})
	}
}

// TestAppCloseRefusesPeer: A's application closes its QP while B's goes
// on sending. B's WRs get no answer and B fails over; its notification
// reaches A's backup, and A refuses it (nothing to fail over): B's error
// surfaces at once, not after its handshake bound (5 s).
func TestAppCloseRefusesPeer(t *testing.T) {
	f, hosts, qa, qb, _ := exchangeWorld(t, 38, l2opts{}, false)
	appClose(t, qa)
	start := f.Now()
	qb.total = 20
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return qb.diverted() && qb.connState() == fsm.SQSurfaced })
	if took := f.Now() - start; took > time.Second {
		t.Fatalf("B surfaced %v after A closed its QP: it waited for its handshake bound", took)
	}
	if l := qb.x.logLine("the peer cannot fail over"); l == "" {
		t.Fatalf("B's log has no refusal:\n%s", qb.x.log)
	}
	if len(qa.errs) > l2Recvs {
		t.Fatalf("A's application saw %d errors, more than its %d receives' flushes: %+v", len(qa.errs), l2Recvs, qa.errs)
	}
}

// TestStartPollLeavesQPs: the application polls A's CQ with
// ibv_start_poll (the C side reports its first call): layer 2 disarms
// the QP for good with that reason, never arms another QP created on the
// CQ, and when A's link is cut nothing is diverted: the errors reach the
// application as plain verbs give them (nothing polls its CQ but it).
// After the CQ is destroyed, a CQ at the same address starts afresh.
func TestStartPollLeavesQPs(t *testing.T) {
	f, hosts, qa, _, _ := exchangeWorld(t, 39, l2opts{}, false)
	a := qa.x
	a.rt.CQStartPoll(a.id, qa.scq)
	if qa.armed() {
		t.Fatal("the QP of a CQ polled with ibv_start_poll is still armed")
	}
	if s := qa.status(); s.Layer != "none" || !strings.Contains(s.Reason, "ibv_start_poll") {
		t.Fatalf("status %+v", s)
	}
	q2 := a.addQP(t, qpOpts{cq: qa.scq})
	a.rt.armConnected()
	if qa.armed() || q2.armed() {
		t.Fatalf("armed again: %v, the QP created on the CQ since: %v", qa.armed(), q2.armed())
	}
	if s := q2.status(); !strings.Contains(s.Reason, "ibv_start_poll") {
		t.Fatalf("status of the QP created on the CQ since: %+v", s)
	}
	q2.destroy(t)
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	qa.total = qa.sent + 1
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) > 0 })
	if qa.diverted() {
		t.Fatal("layer 2 diverted a QP whose CQ it does not follow")
	}
	if qa.errs[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("first error %+v, want the transport's retry error as plain verbs give it", qa.errs[0])
	}
	a.rt.CQStartPollGone(qa.scq)
	a.rt.fo.mu.Lock()
	left := a.rt.startPolledCQ(&l2qp{app: AppQP{SendCQ: qa.scq, RecvCQ: qa.scq}})
	a.rt.fo.mu.Unlock()
	if left {
		t.Fatal("a destroyed CQ is still taken for one polled with ibv_start_poll")
	}
}

// TestExtendedCQArmsAtFirstPoll: a QP of an extended CQ (ibv_create_cq_ex)
// is not armed by layer 2 until the CQ's first ibv_poll_cq shows that the
// shim sees its completions (the status says why it waits); a cut before
// then reaches the application as plain verbs report it, nothing
// diverted. After the first poll it is armed, and a cut fails it over.
// One polled first with ibv_start_poll is left for good.
func TestExtendedCQArmsAtFirstPoll(t *testing.T) {
	f := railFabric(t, 44)
	c := shimtest.NewCluster()
	o := l2opts{}
	a, b := newL2Host(t, f, "node0", 0, c, o), newL2Host(t, f, "node1", 1, c, o)
	ext := a.createCQ(t, 256)
	a.rt.CQExtended(ext)
	qa, qb := a.addQP(t, qpOpts{cq: ext}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "B's QP armed", qb.armed)
	waitFor(t, "A's backup connected", func() bool { return qa.status().Backup.Connected })
	a.rt.armConnected()
	if qa.armed() {
		t.Fatal("a QP of an extended CQ never polled was armed")
	}
	if s := qa.status(); s.Reason != extWaitReason {
		t.Fatalf("status %+v, want the wait for the first ibv_poll_cq", s)
	}
	a.rt.CQPolled(ext)
	waitFor(t, "A's QP armed after the first poll", qa.armed)
	if s := qa.status(); s.Reason == extWaitReason || s.CrossNIC == "" {
		t.Fatalf("status after the first poll %+v", s)
	}
	hosts := []*l2host{a, b}
	qa.total, qb.total = 10, 10
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	qa.total, qb.total = 30, 30
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	if !qa.diverted() || len(qa.errs) != 0 {
		t.Fatalf("after the first poll the cut did not fail over cleanly: diverted %v, errors %v", qa.diverted(), qa.errs)
	}

	// polled first with ibv_start_poll: never armed
	ext2 := a.createCQ(t, 256)
	a.rt.CQExtended(ext2)
	q2 := a.addQP(t, qpOpts{cq: ext2})
	a.rt.CQStartPoll(a.id, ext2)
	a.rt.CQPolled(ext2) // (a later ibv_poll_cq changes nothing)
	a.rt.armConnected()
	if q2.armed() || !strings.Contains(q2.status().Reason, "ibv_start_poll") {
		t.Fatalf("a QP of a CQ polled with ibv_start_poll: armed %v, status %+v", q2.armed(), q2.status())
	}
}

// appReset is the application's move of q to RESET (a teardown before a
// reconnect) through the interposed ibv_modify_qp; the application posts
// nothing more on this view of the QP (a RESET QP refuses receives).
func appReset(t *testing.T, q *appQP) {
	t.Helper()
	appMove(t, q, verbs.QPSReset)
	q.idle = true
}

// TestAppReconnectAfterFailover: after a failover (A's link cut, the
// traffic on the backups) and the link's repair, A's application resets
// its QP and connects it to a new QP of B (B's application closed the old
// one): a reconnect. What A's QP held completes nothing (a reset QP's WRs
// vanish, as without the shim), and the reconnected QP then carries the new connection's
// traffic both ways, every message once and intact, on A's own device,
// not on the backup it left; layer 2 says it left the QP to the
// application.
func TestAppReconnectAfterFailover(t *testing.T) {
	for _, o := range []struct {
		name string
		o    l2opts
	}{{"go", l2opts{}}, {"express", l2opts{express: true}}} {
		t.Run(o.name, func(t *testing.T) { appReconnect(t, o.o) })
	}
}

func appReconnect(t *testing.T, o l2opts) {
	f, hosts, qa, qb, from := exchangeWorld(t, 45, o, true)
	a, b := qa.x, qb.x
	if err := f.SetLink(a.port, true); err != nil {
		t.Fatal(err)
	}
	f.RunFor(5 * time.Millisecond) // the port comes back ACTIVE
	appReset(t, qa)
	appClose(t, qb)
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qb.errs) >= l2Recvs })
	f.RunFor(time.Millisecond)
	a.poll(t)
	if len(qa.all) != from[0] {
		t.Fatalf("A's application got completions of WRs its QP held when it was reset: %+v", qa.all[from[0]:])
	}
	if s := qa.status(); !strings.Contains(s.Reason, "the application moved the QP to RESET") {
		t.Fatalf("status after the reset %+v", s)
	}
	// the same QP, a new connection: a fresh application view of it
	na := &appQP{x: a, idx: len(a.qps), qp: qa.qp, fq: qa.fq, scq: qa.scq, rcq: qa.rcq}
	a.qps = append(a.qps, na)
	qc := b.addQP(t, qpOpts{})
	connectPair(t, na, qc)
	na.total, qc.total = 20, 20
	drive(t, f, hosts, 5*time.Microsecond, finished(na, qc))
	if len(na.errs) != 0 || len(qc.errs) != 0 {
		t.Fatalf("errors on the new connection: A %v, B %v", na.errs, qc.errs)
	}
	if na.diverted() && na.connState() != fsm.SQSurfaced {
		t.Fatalf("the reconnected QP runs through a live Conn (%v)", na.connState())
	}
	if s := qa.status(); s.Layer != "none" {
		t.Fatalf("status of the reconnected QP %+v", s)
	}
}
