package shim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// checkFailedOver: q was diverted for reason and runs on the backup; its
// runtime logged the failover and the first good completion on the
// backup.
func checkFailedOver(t *testing.T, q *appQP, reason string) {
	t.Helper()
	x := q.x
	if !q.diverted() || len(q.errs) != 0 {
		t.Fatalf("%s: diverted %v, errors %v", x.name, q.diverted(), q.errs)
	}
	s := q.status()
	if s.Layer != status.LayerCrossNIC || (s.Home.Port == 0 || s.Home.Device == s.Backup.Device) || s.CrossNIC != "fallback" || s.Failovers != 1 || strings.HasPrefix(s.Reason, "layer 2") {
		t.Fatalf("%s: status %+v", x.name, s)
	}
	if l := x.logLine("layer 2 failover", "qpn="+strconv.FormatUint(uint64(q.qp.QPN()), 10), reason, "replayed=", "delivered="); l == "" {
		t.Fatalf("%s: no failover line with reason %q in the log:\n%s", x.name, reason, x.log)
	}
	if l := x.logLine("first good completion on the backup", "since_fault=", "at_unix_ns="); l == "" {
		t.Fatalf("%s: no first-good-completion line in the log:\n%s", x.name, x.log)
	}
}

// TestFailoverOnPortErr (a): both applications exchange messages; A's
// QP has separate send and receive CQs and sends some messages inline.
// The link of A's default port is cut with sends in flight and receives
// posted: A's runtime sees PORT_ERR and fails over at once; B follows on
// A's notification. The exchange finishes on the backup, every WR
// completing once, in order, on its own CQ, every message intact.
func TestFailoverOnPortErr(t *testing.T) {
	f := railFabric(t, 31)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{}), newL2Host(t, f, "node1", 1, c, l2opts{})
	qa, qb := a.addQP(t, qpOpts{split: true}), b.addQP(t, qpOpts{})
	qa.inline = true
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	if s := qa.status(); s.Layer != status.LayerCrossNIC || s.CrossNIC != "default" {
		t.Fatalf("armed QP's status %+v", s)
	}
	hosts := []*l2host{a, b}
	qa.total, qb.total = 60, 60
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 15 && len(qb.sendDone) >= 15 })
	if qa.diverted() || qb.diverted() {
		t.Fatal("diverted before any fault")
	}
	// (an error completion would come only after the retries time out)
	portErrFailover(t, f, a, b, qa, qb)
	if _, n, _ := a.hp.Counts(); n != 0 {
		t.Fatalf("A intercepted %d error completions; PORT_ERR came first", n)
	}
	events := c.State().Events
	kinds, tooks := map[uint32]string{}, map[uint32]time.Duration{}
	for _, e := range events {
		kinds[e.QPN] = e.Kind + " " + e.From + " -> " + e.To
		tooks[e.QPN] = e.Took
	}
	for _, q := range []*appQP{qa, qb} {
		if k := kinds[q.qp.QPN()]; !strings.HasPrefix(k, status.EvFailover+" mlx5_0 qpn ") || !strings.Contains(k, "-> mlx5_1 qpn ") {
			t.Fatalf("event of QP %#x: %q (events %+v)", q.qp.QPN(), k, events)
		}
		if took := tooks[q.qp.QPN()]; took <= 0 || took > 10*time.Second {
			t.Fatalf("the failover event of QP %#x says it took %v", q.qp.QPN(), took)
		}
	}
}

// TestFailoverOnErrorCompletion (b): no port event reaches either runtime.
// A sends, B only receives; A's link is cut. A's in-flight WRs fail with
// an error completion, which A's hot path hands to the runtime
// (Intercept): A fails over, B follows on the notification, and every
// message arrives once, in order.
func TestFailoverOnErrorCompletion(t *testing.T) {
	f := railFabric(t, 32)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{noWatch: true}), newL2Host(t, f, "node1", 1, c, l2opts{noWatch: true})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total = 50
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 12 })
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 10*time.Microsecond, finished(qa))
	checkFailedOver(t, qa, `reason="completion error`)
	checkFailedOver(t, qb, `reason="the peer's fallback notification on the backup QP"`)
	if _, n, _ := a.hp.Counts(); n == 0 {
		t.Fatal("A's hot path intercepted nothing")
	}
	if ps := a.rt.Ports(); len(ps) != 0 {
		t.Fatalf("A's runtime saw port events %+v", ps)
	}
}

// atomicRun: A's link is cut with a FETCH_ADD outstanding between two
// messages; it returns what A's application saw after the cut.
func atomicRun(t *testing.T, hotpath bool, first ...func(*appQP)) ([]verbs.WC, *appQP, *appQP) {
	f := railFabric(t, 33)
	c := shimtest.NewCluster()
	o := l2opts{noWatch: true, noHotpath: !hotpath}
	a, b := newL2Host(t, f, "node0", 0, c, o), newL2Host(t, f, "node1", 1, c, o)
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	if hotpath {
		waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	}
	for _, fn := range first {
		fn(qa)
	}
	hosts := []*l2host{a, b}
	qa.total = 5
	drive(t, f, hosts, 5*time.Microsecond, finished(qa))
	before := len(qa.all)
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	sendAtomicBetween(t, qa)
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) >= 5 })
	f.RunFor(time.Millisecond)
	a.poll(t)
	if _, ctr := b.counter(); ctr[0] != 0 {
		t.Fatalf("the atomic executed %d times", ctr[0])
	}
	return qa.all[before:], qa, qb
}

// sendAtomicBetween posts q's next message, a FETCH_ADD of 1 on the
// peer's counter (wr_id 7777), and the message after.
func sendAtomicBetween(t *testing.T, q *appQP) {
	t.Helper()
	q.sendNext(t)
	laddr, _ := q.x.counter()
	raddr, _ := q.peer.x.counter()
	if _, err := q.x.hp.PostSend(q.fq, []verbs.SendWR{{WRID: 7777, Opcode: verbs.WRAtomicFetchAdd, SendFlags: verbs.SendSignaled,
		CompareAdd: 1, SGList: []verbs.SGE{{Addr: laddr, Length: 8, LKey: q.x.mr.LKey()}}, RemoteAddr: raddr, RKey: q.peer.x.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	q.sendNext(t)
}

// TestFailoverAtomicSurfaces (c): with an atomic outstanding no replay
// happens: A's application sees exactly the completions plain verbs give
// (the same run without layer 2): the retry error of the oldest WR, then
// every other WR and receive flushed.
func TestFailoverAtomicSurfaces(t *testing.T) {
	plain, _, _ := atomicRun(t, false)
	got, qa, _ := atomicRun(t, true)
	if len(got) != len(plain) || len(got) != 5+l2Recvs { // the five WRs, then A's receives flushed
		t.Fatalf("with layer 2 %v\nplain verbs %v", got, plain)
	}
	for i := range got {
		g, p := got[i], plain[i]
		if g.WRID != p.WRID || g.Status != p.Status || g.QPNum != qa.qp.QPN() {
			t.Fatalf("completion %d: %+v with layer 2, %+v with plain verbs", i, g, p)
		}
	}
	if got[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("first completion %+v, want the retry error", got[0])
	}
	if !qa.diverted() {
		t.Fatal("A's QP was not diverted: the error did not go through layer 2")
	}
	if s := qa.status(); s.Layer != status.LayerNone || !strings.Contains(s.Reason, "atomic") {
		t.Fatalf("status %+v, want layer none with the atomic as reason", s)
	}
	if qa.x.logLine("layer 2 failover failed", "atomic") == "" {
		t.Fatalf("no surfacing line in the log:\n%s", qa.x.log)
	}
}

// TestFailoverSharedCQ (d, f): A's two QPs share one CQ; only the first
// is mirrored by layer 2. The first fails on its own (a QP error, the
// link stays up): it fails over, and from then on the shared CQ is polled
// by the runtime. The second QP's completions still reach the application
// exactly once, in order, each retired in the hot path's rings. When the
// diverted QP is destroyed, the CQ goes back to the hot path.
func TestFailoverSharedCQ(t *testing.T) {
	f := railFabric(t, 34)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{noWatch: true}), newL2Host(t, f, "node1", 1, c, l2opts{noWatch: true})
	shared := a.createCQ(t, 256)
	qa1, qa2 := a.addQP(t, qpOpts{cq: shared}), a.addQP(t, qpOpts{cq: shared, noShadow: true})
	qb1, qb2 := b.addQP(t, qpOpts{}), b.addQP(t, qpOpts{noShadow: true})
	connectPair(t, qa1, qb1)
	connectPair(t, qa2, qb2)
	waitFor(t, "the mirrored QPs armed", func() bool { return qa1.armed() && qb1.armed() })
	hosts := []*l2host{a, b}
	qa1.total, qa2.total, qb2.total = 40, 80, 30
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa1.sendDone) >= 10 && len(qa2.sendDone) >= 10 })
	if qa2.armed() {
		t.Fatal("a QP layer 2 does not mirror was armed")
	}
	total := qa2.total
	qa2.total = qa2.sent // the second QP waits while the first one's retries run out
	qa1.failNext(t, f)
	drive(t, f, hosts, 5*time.Microsecond, qa1.diverted)
	qa2.total = total
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return finished(qa1, qb2)() && len(qa2.sendDone) >= 40 })
	checkFailedOver(t, qa1, `reason="completion error`)
	checkFailedOver(t, qb1, `reason="the peer's fallback notification on the backup QP"`)
	if qa2.diverted() || len(qa2.errs) != 0 {
		t.Fatalf("the undiverted QP: diverted %v, errors %v", qa2.diverted(), qa2.errs)
	}
	goPolls, _, _ := a.hp.Counts()
	if n := a.hp.RetiredOf(qa2.qp.QPN()); goPolls == 0 || n == 0 {
		t.Fatalf("%d polls of the shared CQ by the runtime, %d completions of the undiverted QP retired through it", goPolls, n)
	}
	// The diverted QP is destroyed: the CQ goes back to the hot path.
	qa1.destroy(t)
	drive(t, f, hosts, 5*time.Microsecond, func() bool {
		_, _, rel := a.hp.Counts()
		return len(rel) == 1 && rel[0] == shared
	})
	before, _, _ := a.hp.Counts()
	drive(t, f, hosts, 5*time.Microsecond, finished(qa2))
	settled(t, f, a, b)
	after, _, _ := a.hp.Counts()
	if after != before {
		t.Fatalf("the runtime still polled the shared CQ %d times after giving it back", after-before)
	}
	if _, _, sends, _ := a.hp.State(qa2.fq); sends != 0 {
		t.Fatalf("%d of the undiverted QP's sends never retired in the hot path's rings", sends)
	}
	if _, _, ok := a.rt.shadows[a.id].sh.BackupOf(qa1.qp); ok {
		t.Fatal("the destroyed QP's backup is still there")
	}
}

// TestFailoverDivertDuringPoll: the application's poll has taken an error
// completion of its armed QP from the provider when the runtime, on
// PORT_ERR read on another thread, diverts the QP: the divert sets the
// QP's flag, then waits for the poll to leave (lip_divert). The error is
// layer 2's: it never reaches the application, the failover is the
// PORT_ERR's, and the exchange finishes on the backup. (The soft-RoCE
// lab's pingpong-wr.on.ipdown-g2 met this: rdma_rxe completes the send
// in flight with LOC_QP_OP_ERR as it raises PORT_ERR.)
func TestFailoverDivertDuringPoll(t *testing.T) {
	f := railFabric(t, 41)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{noWatch: true}), newL2Host(t, f, "node1", 1, c, l2opts{noWatch: true})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total = 50
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 12 })
	fired := false
	a.hp.DuringPoll(func() {
		fired = true
		go a.rt.deviceFault("mlx5_0", verbs.AsyncEvent{Type: verbs.EventPortErr, Port: a.port.Num()})
		waitFor(t, "the divert's flag set", qa.diverted)
	})
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 10*time.Microsecond, finished(qa))
	if !fired {
		t.Fatal("no poll took an error completion")
	}
	if len(qa.errs) != 0 {
		t.Fatalf("the application saw %d error completions, the first %+v", len(qa.errs), qa.errs[0])
	}
	checkFailedOver(t, qa, `reason="PORT_ERR on mlx5_0 port 1"`)
	checkFailedOver(t, qb, `reason="the peer's fallback notification on the backup QP"`)
	if _, n, _ := a.hp.Counts(); n != 1 {
		t.Fatalf("A intercepted %d error completions, want the one the divert met", n)
	}
}

// TestFailoverNotArmedWithoutPeerBackup (e): without ibpathd the peer's
// backup is never known, so the QP is not armed: a cut link's PORT_ERR
// changes nothing and the error completion reaches the application
// through the hot path unchanged. The log says the fault came before
// the QP's backup was connected, naming it; the peer's QP, on a port
// that did not fail, is not named.
func TestFailoverNotArmedWithoutPeerBackup(t *testing.T) {
	f := railFabric(t, 35)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{noPublish: true}), newL2Host(t, f, "node1", 1, c, l2opts{noPublish: true})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	hosts := []*l2host{a, b}
	qa.total = 40
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 })
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) > 0 })
	settled(t, f, a, b)
	waitFor(t, "PORT_ERR seen", func() bool { return len(a.rt.Ports()) == 1 })
	if qa.errs[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("first error %+v, want the retry error", qa.errs[0])
	}
	eachSignaledOnce(t, qa)
	goPolls, intercepts, _ := a.hp.Counts()
	if qa.armed() || qa.diverted() || goPolls != 0 || intercepts != 0 {
		t.Fatalf("armed %v diverted %v, %d polls and %d intercepts by the runtime", qa.armed(), qa.diverted(), goPolls, intercepts)
	}
	if s := qa.status(); !strings.HasSuffix(s.Backup.String(), "(connecting)") || s.Layer == status.LayerCrossNIC {
		t.Fatalf("status %+v", s)
	}
	want := fmt.Sprintf("qpns=%#x", qa.qp.QPN())
	if a.logLine("before layer 2 could protect", "PORT_ERR", "qps=1", want) == "" {
		t.Fatalf("no line for the fault before the backup was connected, naming %s; log:\n%s", want, a.log.String())
	}
	if l := b.logLine("before layer 2 could protect"); l != "" {
		t.Fatalf("the peer, whose port did not fail, says %q", l)
	}
}

// TestFailoverDestroyReleasesCQs (f): a diverted QP with separate send and
// receive CQs is destroyed after its failover: both CQs go back to the hot
// path, the backup is released, and the runtime refuses posts to it.
func TestFailoverDestroyReleasesCQs(t *testing.T) {
	f := railFabric(t, 36)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{noWatch: true}), newL2Host(t, f, "node1", 1, c, l2opts{noWatch: true})
	qa, qb := a.addQP(t, qpOpts{split: true}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total = 20
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 8 })
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 10*time.Microsecond, finished(qa))
	checkFailedOver(t, qa, `reason="completion error`)
	qpn := qa.qp.QPN()
	qa.destroy(t)
	_, _, rel := a.hp.Counts()
	if len(rel) != 2 || !(rel[0] == qa.scq && rel[1] == qa.rcq || rel[0] == qa.rcq && rel[1] == qa.scq) {
		t.Fatalf("released %v, want the QP's two CQs", rel)
	}
	if _, _, ok := a.rt.shadows[a.id].sh.BackupOf(qa.qp); ok {
		t.Fatal("the destroyed QP's backup is still there")
	}
	if _, err := a.rt.PostSend(a.id, qpn, qa.round(99)); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("post to a destroyed QP: %v", err)
	}
	if n, err := a.rt.PollCQ(qa.scq, make([]verbs.WC, 4)); n != 0 || err != nil {
		t.Fatalf("poll of a given-back CQ: %d %v", n, err)
	}
	a.rt.Destroyed(a.id, qpn) // again: nothing left to do
}

// TestFailoverUnreplayableSurfaces: an outstanding WR the hot path could
// not record whole (more SGEs than a ring entry keeps) makes a replay
// unsafe: the error completion reaches A's application as plain verbs
// report it. B, whose sends to A fail too, fails over on its own; A
// refuses its notification, so B's error surfaces as well instead of B
// waiting for an answer.
func TestFailoverUnreplayableSurfaces(t *testing.T) {
	f := railFabric(t, 37)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{noWatch: true}), newL2Host(t, f, "node1", 1, c, l2opts{noWatch: true})
	qa, qb := a.addQP(t, qpOpts{sge: shimtest.MaxSGE + 1}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total, qb.total = 4, 4
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	addr, _ := qa.slot(0, 0)
	paddr, _ := qb.slot(2, 0)
	sges := make([]verbs.SGE, shimtest.MaxSGE+1)
	for i := range sges {
		sges[i] = verbs.SGE{Addr: addr + uint64(8*i), Length: 8, LKey: a.mr.LKey()}
	}
	if _, err := a.hp.PostSend(qa.fq, []verbs.SendWR{{WRID: 5555, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: sges, RemoteAddr: paddr, RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	qa.sendNext(t)
	qb.total = 6
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) >= 3 && len(qb.errs) > 0 })
	settled(t, f, a, b)
	if e := qa.errs[0]; e.WRID != 5555 || e.Status != verbs.WCRetryExcErr {
		t.Fatalf("first error %+v, want the retry error of the WR with %d SGEs", e, shimtest.MaxSGE+1)
	}
	if s := qa.status(); !qa.diverted() || s.Layer != status.LayerNone || !strings.Contains(s.Reason, "cannot be replayed") {
		t.Fatalf("diverted %v, status %+v", qa.diverted(), s)
	}
	eachSignaledOnce(t, qb)
	if s := qb.status(); !qb.diverted() || s.Layer != status.LayerNone || !strings.Contains(s.Reason, "peer cannot fail over") {
		t.Fatalf("B: diverted %v, status %+v", qb.diverted(), s)
	}
}

// TestFailoverDivertFailure: a hot path that cannot divert the QP leaves
// it as it was, disarmed: its error completions reach the application as
// plain verbs report them, whether the fault came as an error completion
// (the hot path then hands the whole batch to the application) or as
// PORT_ERR.
func TestFailoverDivertFailure(t *testing.T) {
	for _, watch := range []bool{false, true} {
		name := "error completion"
		if watch {
			name = "PORT_ERR"
		}
		t.Run(name, func(t *testing.T) {
			f := railFabric(t, 38)
			c := shimtest.NewCluster()
			a, b := newL2Host(t, f, "node0", 0, c, l2opts{noWatch: !watch}), newL2Host(t, f, "node1", 1, c, l2opts{noWatch: !watch})
			qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
			connectPair(t, qa, qb)
			waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
			a.hp.FailDivert(errors.New("injected: no room for the CQ"))
			hosts := []*l2host{a, b}
			qa.total = 30
			drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 })
			if err := f.SetLink(a.port, false); err != nil {
				t.Fatal(err)
			}
			if watch {
				waitFor(t, "PORT_ERR handled", func() bool { return !qa.armed() })
			}
			drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) > 0 })
			settled(t, f, a, b)
			if qa.errs[0].Status != verbs.WCRetryExcErr {
				t.Fatalf("first error %+v, want the retry error", qa.errs[0])
			}
			eachSignaledOnce(t, qa)
			_, intercepts, _ := a.hp.Counts()
			if qa.armed() || qa.diverted() || (intercepts == 0) != watch {
				t.Fatalf("armed %v diverted %v after a failed divert; %d intercepts", qa.armed(), qa.diverted(), intercepts)
			}
			if a.logLine("could not take the QP from the hot path", "injected") == "" {
				t.Fatalf("no error line in the log:\n%s", a.log)
			}
			if s := qa.status(); s.Layer != status.LayerNone || !strings.Contains(s.Reason, "could not divert") {
				t.Fatalf("status %+v", s)
			}
		})
	}
}

// TestFailoverAdoptRefused: rings that contradict themselves (an inline
// copy for a WR that is not inline) are refused by Shadow.Adopt: the QP
// stays diverted without a Conn, as plain verbs, and the error completion
// reaches the application unchanged.
func TestFailoverAdoptRefused(t *testing.T) {
	f := railFabric(t, 39)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{noWatch: true}), newL2Host(t, f, "node1", 1, c, l2opts{noWatch: true})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	a.hp.CorruptRings(func(r *Rings) {
		r.Inline = make([][]byte, len(r.Sends))
		r.Inline[0] = []byte("not inline")
	})
	hosts := []*l2host{a, b}
	qa.total = 30
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 })
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) > 0 })
	settled(t, f, a, b)
	if qa.errs[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("first error %+v, want the retry error", qa.errs[0])
	}
	eachSignaledOnce(t, qa)
	if s := qa.status(); !qa.diverted() || s.Layer != status.LayerNone || !strings.Contains(s.Reason, "Adopt") {
		t.Fatalf("diverted %v, status %+v", qa.diverted(), s)
	}
}

// TestFailoverOnDeviceFatal: A's default HCA dies (DEVICE_FATAL, every QP
// flushed, every later verb failing). A's runtime fails over on the event
// before the application polls the flushes; the exchange finishes on the
// backup.
func TestFailoverOnDeviceFatal(t *testing.T) {
	f := railFabric(t, 40)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{}), newL2Host(t, f, "node1", 1, c, l2opts{})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total, qb.total = 40, 40
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 && len(qb.sendDone) >= 10 })
	if err := f.KillHCA(a.port.HCA()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A diverted on DEVICE_FATAL", qa.diverted)
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	checkFailedOver(t, qa, `reason="DEVICE_FATAL on mlx5_0"`)
	if !qb.diverted() || len(qb.errs) != 0 {
		t.Fatalf("B: diverted %v, errors %v", qb.diverted(), qb.errs)
	}
}
