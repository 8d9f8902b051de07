package shim

import (
	"strconv"
	"strings"
	"testing"
	"time"

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
	if s.Layer != status.LayerCrossNIC || s.Home != "mlx5_1 (backup)" || s.CrossNIC != "fallback" || s.Failovers != 1 || s.Reason != "" && strings.HasPrefix(s.Reason, "layer 2") {
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
	c := newCluster()
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
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	checkFailedOver(t, qa, `reason="PORT_ERR on mlx5_0 port 1"`)
	checkFailedOver(t, qb, `reason="the peer's fallback notification on the backup QP"`)
	if _, n, _ := a.hp.counts(); n != 0 {
		t.Fatalf("A intercepted %d error completions; PORT_ERR came first", n)
	}
	c.mu.Lock()
	events := append([]status.Event(nil), c.events...)
	c.mu.Unlock()
	kinds := map[uint32]string{}
	for _, e := range events {
		kinds[e.QPN] = e.Kind + " " + e.From + " -> " + e.To
	}
	for _, q := range []*appQP{qa, qb} {
		if k := kinds[q.qp.QPN()]; !strings.HasPrefix(k, status.EvFailover+" mlx5_0 qpn ") || !strings.Contains(k, "-> mlx5_1 qpn ") {
			t.Fatalf("event of QP %#x: %q (events %+v)", q.qp.QPN(), k, events)
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
	c := newCluster()
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
	if _, n, _ := a.hp.counts(); n == 0 {
		t.Fatal("A's hot path intercepted nothing")
	}
	if ps := a.rt.Ports(); len(ps) != 0 {
		t.Fatalf("A's runtime saw port events %+v", ps)
	}
}

// atomicRun: A's link is cut with a FETCH_ADD outstanding between two
// messages; it returns what A's application saw after the cut.
func atomicRun(t *testing.T, hotpath bool) ([]verbs.WC, *appQP, *appQP) {
	f := railFabric(t, 33)
	c := newCluster()
	o := l2opts{noWatch: true, noHotpath: !hotpath}
	a, b := newL2Host(t, f, "node0", 0, c, o), newL2Host(t, f, "node1", 1, c, o)
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	if hotpath {
		waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	}
	hosts := []*l2host{a, b}
	qa.total = 5
	drive(t, f, hosts, 5*time.Microsecond, finished(qa))
	before := len(qa.all)
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	qa.sendNext(t)
	laddr, _ := a.counter()
	raddr, _ := b.counter()
	if _, err := a.hp.postSend(qa.fq, []verbs.SendWR{{WRID: 7777, Opcode: verbs.WRAtomicFetchAdd, SendFlags: verbs.SendSignaled,
		CompareAdd: 1, SGList: []verbs.SGE{{Addr: laddr, Length: 8, LKey: a.mr.LKey()}}, RemoteAddr: raddr, RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	qa.sendNext(t)
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) >= 5 })
	f.RunFor(time.Millisecond)
	a.poll(t)
	if _, ctr := b.counter(); ctr[0] != 0 {
		t.Fatalf("the atomic executed %d times", ctr[0])
	}
	return qa.all[before:], qa, qb
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
