package crossnic_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// probeLost builds a world in which both ends failed over (node0's
// cable pulled for 5 ms, then back) under traffic in dirs, node lead
// leads (switches back first, the other following), and node0's first
// probe after the repair is held in the fabric until hold after the
// cable's return, every retransmission of it lost: it fails with
// RETRY_EXC_ERR, while both ends' traffic runs on the backup if node0
// leads, or after node1's sends came home onto the QP if node1 does. It
// returns once node0 sent the probe, with the time the held copy
// arrives.
func probeLost(t *testing.T, seed uint64, hold time.Duration, lead int, dirs ...int) (w *world, a, b *node, until time.Duration) {
	t.Helper()
	w = newWorld(t, seed)
	a, b = w.n[0], w.n[1]
	rng := rand.New(rand.NewPCG(seed, 2))
	w.n[lead].conn.SetPSNSource(func() uint32 { return rng.Uint32() & 0x7fffff })            // the leader
	w.n[1-lead].conn.SetPSNSource(func() uint32 { return 0x800000 | rng.Uint32()&0x7fffff }) // the follower
	for _, n := range w.n {
		must(t, n.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 10 * time.Millisecond, PathUp: portUp(n)}))
	}
	port := a.hca.Port(1)
	w.run(300*time.Microsecond, dirs...)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, dirs...)
	must(t, w.f.SetLink(port, true))
	until = w.f.Now() + hold
	must(t, w.f.HoldNext(a.def.qp, until))
	deadline := w.f.Now() + 100*time.Millisecond
	for a.conn.Stats().Probes == 0 {
		if w.f.Now() > deadline {
			t.Fatalf("node0 never probed: %+v", a.conn.Stats())
		}
		w.run(10*time.Microsecond, dirs...)
	}
	qa, _, err := a.def.qp.Query(verbs.QPAttrSQPSN)
	must(t, err)
	for range 3 { // retry_cnt 3: the three retransmissions
		must(t, w.f.DropRequest(a.def.qp, (qa.SQPSN-1)&0xffffff))
	}
	return w, a, b, until
}

// bothHome runs the world until both ends should be home and checks
// that they are, with every message in dirs delivered once, in order.
func bothHome(t *testing.T, w *world, dirs ...int) {
	t.Helper()
	w.run(100*time.Millisecond, dirs...)
	w.run(20 * time.Millisecond)
	for _, n := range w.n {
		if !n.conn.Home() {
			sq, rq := n.conn.State()
			t.Fatalf("%s %v/%v not home: %s (%+v)", n.name, sq, rq, n.conn.AwayReason(), n.conn.Stats())
		}
	}
	if err := w.delivered(dirs...); err != nil {
		t.Fatal(err)
	}
}

// TestPairedResetRejectsStale: after a failover both ends probe their
// default QPs. Node0's first probe is held in the fabric and every
// retransmission of it lost, so it fails (RETRY_EXC_ERR) while node1,
// the follower, waits for node0 to switch back first: both ends' traffic
// is on the backup, and node0's reset of its default QP is paired through
// the mailbox. Node1 resets its own, both connect with PSNs drawn for the
// reset, and the held probe, arriving after that at node1's new
// incarnation, is not taken. Carrying the streams on (node1's QP not
// reset, still expecting the probe's PSN) took it: a packet of node0's
// earlier incarnation. Then both switch back, and every message arrives
// once, in order.
func TestPairedResetRejectsStale(t *testing.T) {
	// The held copy arrives 3 ms after the probe failed (below), before
	// node0's next probe would go out on a QP that carried on (one
	// ProbeInterval after the reset).
	w, a, _, until := probeLost(t, 71, 35*time.Millisecond, 0, 0)
	base := pairedResets(w) // (node0's connect after the repair, put off while its port was down)
	w.run(until-w.f.Now()-2*time.Millisecond, 0)
	if a.conn.Stats().ProbeFailures != 1 {
		t.Fatalf("node0's probe has not failed 2 ms before the held copy arrives: %+v", a.conn.Stats())
	}
	w.run(3*time.Millisecond, 0)
	if st := w.f.Stats(); st.StaleExecuted != 0 {
		t.Fatalf("stale requests executed: %v", w.f.StaleExecutions())
	}
	for i, n := range w.n {
		if st := n.conn.Stats(); st.ResetsPaired != base[i]+1 {
			t.Fatalf("node%d: %d paired resets (%d before the probe failed), want one more",
				i, st.ResetsPaired, base[i])
		}
	}
	bothHome(t, w, 0)
}

// pairedResets is each node's ConnStats.ResetsPaired.
func pairedResets(w *world) [2]int {
	return [2]int{w.n[0].conn.Stats().ResetsPaired, w.n[1].conn.Stats().ResetsPaired}
}

// TestPairedResetAskedAnew: node0's probe fails and node0 asks for a
// paired reset, then stops polling (a process descheduled). Node1
// answers, connects, and probes node0's QP, still in INIT for want of the
// answer node0 has not read: the probe fails, and node1 asks anew, its
// request overwriting its answer in the mailbox's slot. Node0, back,
// finds a request that follows its own (the request's seen is node0's
// request): not a crossing, where each request answers the other, but a
// new one, which node0 answers. Taken for a crossing, it went unanswered
// and node1 waited in INIT for ever. Both come home.
func TestPairedResetAskedAnew(t *testing.T) {
	w, a, b, _ := probeLost(t, 73, time.Second, 0, 0) // (the held copy arrives after the test)
	// (node0's connect after the repair, put off while its port was
	// down, was paired already)
	base := pairedResets(w)
	deadline := w.f.Now() + 100*time.Millisecond
	for a.conn.Stats().ResetsPaired == base[0] {
		if w.f.Now() > deadline {
			t.Fatalf("node0 never asked for a paired reset: %+v", a.conn.Stats())
		}
		w.run(10*time.Microsecond, 0)
	}
	w.stopped[0] = true
	for b.conn.Stats().ResetsPaired < base[1]+2 { // its answer, then its own request
		if w.f.Now() > deadline+100*time.Millisecond {
			t.Fatalf("node1 did not ask anew: %+v", b.conn.Stats())
		}
		w.run(10*time.Microsecond, 0)
	}
	w.stopped[0] = false
	failed := a.conn.Stats().ProbeFailures
	bothHome(t, w, 0)
	if st := a.conn.Stats(); st.ResetsPaired != base[0]+2 || st.ProbeFailures != failed {
		// Taken for a crossing, the request went unanswered: node1
		// waited in INIT until node0's probe of it failed and node0
		// asked again.
		t.Fatalf("node0: %d paired resets (%d before), %d probe failures (%d before), want its request and its answer, and no probe failed",
			st.ResetsPaired, base[0], st.ProbeFailures, failed)
	}
}

// TestPairedResetUnderPeerSends: node1 leads the switch back, and its
// sends come home onto node0's default QP while node0's first probe,
// held in the fabric and every retransmission of it lost, is out; the
// probe then fails, under node1's live stream. Node0's reset is paired
// all the same: its request says it took node1's switch-back
// notification, and node1, whose sends lost their QP, fails over
// through the mailbox instead of answering; the handshake's
// announcements connect both QPs with fresh PSNs, and the held probe,
// arriving after that at node1's new incarnation, is not taken.
// Carrying the two streams on (node1's QP not reset, still expecting the
// probe's PSN) took it: a packet of node0's earlier incarnation. Then
// both switch back, and every message of both directions arrives once,
// in order.
func TestPairedResetUnderPeerSends(t *testing.T) {
	w, a, b, until := probeLost(t, 71, 35*time.Millisecond, 1, 0, 1)
	base := pairedResets(w)
	w.run(until-w.f.Now()-2*time.Millisecond, 0, 1)
	if st := a.conn.Stats(); st.ProbeFailures != 1 {
		t.Fatalf("node0's probe has not failed 2 ms before the held copy arrives: %+v", st)
	}
	w.run(3*time.Millisecond, 0, 1)
	if st := w.f.Stats(); st.StaleExecuted != 0 {
		t.Fatalf("stale requests executed: %v", w.f.StaleExecutions())
	}
	if st := a.conn.Stats(); st.ResetsPaired != base[0]+1 || st.ResetFailures != 0 {
		t.Fatalf("node0: %d paired resets (%d before the probe failed), %d failed, want one more paired",
			st.ResetsPaired, base[0], st.ResetFailures)
	}
	if st := b.conn.Stats(); st.MailboxHandshakes == 0 {
		t.Fatalf("node1 did not fail over through the mailbox: %+v", st)
	}
	bothHome(t, w, 0, 1)
}

// TestProbeTimeoutPairedReset: at local ACK timeout 14 (67 ms), node0's
// cable is pulled until both ends failed over, and repaired; node0's
// first probe after the repair is held in the fabric for a second. The
// HCA would send it again only one local ACK timeout later. Unanswered
// past ProbeTimeout (5 ms), it is failed, and node0's reset is paired
// with node1's: the next probe goes out at once, and node0 switches back
// well before the HCA's retransmission would have been answered. The
// held copy, arriving at node1's new incarnation, is not taken; both
// come home with every message delivered once, in order.
func TestProbeTimeoutPairedReset(t *testing.T) {
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 75}, retry: 3, timeout: 14})
	a := w.n[0]
	followerOf(w, 1) // node0 switches back first
	for _, n := range w.n {
		must(t, n.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond,
			ProbeTimeout: 5 * time.Millisecond, PathUp: portUp(n)}))
	}
	port := a.hca.Port(1)
	w.run(300*time.Microsecond, 0)
	must(t, w.f.SetLink(port, false))
	w.run(400*time.Millisecond, 0) // (retry_cnt+1) local ACK timeouts: both fail over
	for _, n := range w.n {
		if sq, _ := n.conn.State(); sq != fsm.SQFallback {
			t.Fatalf("%s: %v, want failed over (%s)", n.name, sq, w.states())
		}
	}
	must(t, w.f.SetLink(port, true))
	repaired := w.f.Now()
	base := pairedResets(w)
	must(t, w.f.HoldNext(a.def.qp, repaired+time.Second))
	deadline := repaired + 60*time.Millisecond
	for a.conn.Stats().SwitchBacks == 0 {
		if w.f.Now() > deadline {
			t.Fatalf("node0 not switched back 60 ms after the repair, before the HCA's retransmission (67 ms): %+v", a.conn.Stats())
		}
		w.run(10*time.Microsecond, 0)
	}
	t.Logf("node0 switched back %v after the repair", w.f.Now()-repaired)
	if n := pairedResets(w); n[0] < base[0]+2 {
		t.Fatalf("paired resets %v (%v at the repair), want node0's late connect and its timed-out probe each paired", n, base)
	}
	w.run(time.Second, 0) // the held copy arrives
	if st := w.f.Stats(); st.StaleExecuted != 0 {
		t.Fatalf("stale requests executed: %v", w.f.StaleExecutions())
	}
	bothHome(t, w, 0)
}

// TestPeerPortDownDefersReset: node1's cable is pulled and stays out
// for 150 ms on a provider that retransmits without end. Both fail over;
// node0's port is up, so it probes, and its probes go unanswered. The
// first that times out asks node1 for a paired reset, which node1, its
// port down, puts off: node0 waits in INIT, and asks nothing more while
// the port stays down. Answered at once instead, node0 connected, probed
// into the dead path and asked again at every timeout (backing off).
// Once the cable is back node1 answers, and both come home.
func TestPeerPortDownDefersReset(t *testing.T) {
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 77, EndlessRetry7: true}, retry: 7})
	a, b := w.n[0], w.n[1]
	for _, n := range w.n {
		must(t, n.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond,
			ProbeTimeout: time.Millisecond, PathUp: portUp(n)}))
	}
	port := b.hca.Port(1)
	w.run(300*time.Microsecond, 0)
	must(t, w.f.SetLink(port, false))
	w.run(20*time.Millisecond, 0)
	for _, n := range w.n {
		if sq, _ := n.conn.State(); sq != fsm.SQFallback {
			t.Fatalf("%s: %v, want failed over (%s)", n.name, sq, w.states())
		}
	}
	start := a.conn.Stats().ResetsPaired
	w.run(130*time.Millisecond, 0)
	if st := a.conn.Stats(); st.ResetsPaired > start+1 {
		t.Fatalf("node0 asked for %d paired resets while node1's port was down, want at most one: %+v",
			st.ResetsPaired-start, st)
	}
	must(t, w.f.SetLink(port, true))
	bothHome(t, w, 0)
}

// TestProbeTimeoutResetsBackOff: node0's default link loses every
// packet while both ports stay up (a broken switch between them), on a
// provider that retransmits without end. Both fail over; every probe
// of either end times out, and the paired resets back off: node0 makes
// a few in 200 ms at ProbeTimeout 1 ms (its own and its answers to
// node1's), not one per millisecond. Once the link carries packets
// again, both come home.
func TestProbeTimeoutResetsBackOff(t *testing.T) {
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 79, EndlessRetry7: true}, retry: 7})
	a := w.n[0]
	for _, n := range w.n {
		must(t, n.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond,
			ProbeTimeout: time.Millisecond, HandshakeTimeout: 5 * time.Millisecond, PathUp: portUp(n)}))
	}
	port := a.hca.Port(1)
	w.run(300*time.Microsecond, 0)
	must(t, w.f.SetLink(port, false)) // the failover
	w.run(10*time.Millisecond, 0)
	must(t, w.f.SetLoss(port, 1, 1))
	must(t, w.f.SetLink(port, true))
	start := a.conn.Stats().ResetsPaired
	w.run(200*time.Millisecond, 0)
	if sq, _ := a.conn.State(); sq != fsm.SQFallback {
		t.Fatalf("node0: %v, want on the backup, probing (%s)", sq, w.states())
	}
	n := a.conn.Stats().ResetsPaired - start
	// (each end asks at 1, 3, 7, 15, ... ms, and answers the other's)
	if n < 2 || n > 30 {
		t.Fatalf("node0 made %d paired resets in 200 ms of lost probes, want a few, backing off: %+v", n, a.conn.Stats())
	}
	t.Logf("%d paired resets in 200 ms", n)
	must(t, w.f.SetLoss(port, 0, 0))
	bothHome(t, w, 0)
}

// TestResetRequestAfterTakenNotify: node1 leads the switch back; node0's
// default QP takes its switch-back notification, but every ACK of it is
// lost, so node1 waits in wait-notify; node0's own probe, held in the
// fabric and every retransmission of it lost, fails, and node0's
// request for a paired reset says it took node1's notification. Node1,
// its switch back lost after the notification, asks through the
// mailbox what became of it (a handshake), and both come home, every
// message of both directions delivered once, in order. Answered as a
// request from a side that never took the notification, node1's held
// WRs went to the backup, where node0 no longer read, and node0's error
// surfaced. (Switch-back schedule 985 reached this first; it no longer
// does since timed-out probes reset the QP.)
func TestResetRequestAfterTakenNotify(t *testing.T) {
	w, a, b, _ := probeLost(t, 71, time.Second, 1, 0, 1)
	deadline := w.f.Now() + 50*time.Millisecond
	for sq, _ := b.conn.State(); sq != fsm.SQWaitDrained; sq, _ = b.conn.State() {
		if w.f.Now() > deadline {
			t.Fatalf("node1 never in wait-drained: %s", w.states())
		}
		w.run(time.Microsecond, 0, 1)
	}
	q, _, err := b.def.qp.Query(verbs.QPAttrSQPSN)
	must(t, err)
	for range 4 { // the notification's ACKs, at every try
		must(t, w.f.DropResponse(b.def.qp, q.SQPSN))
	}
	for sq, _ := b.conn.State(); sq != fsm.SQWaitNotify; sq, _ = b.conn.State() {
		if w.f.Now() > deadline {
			t.Fatalf("node1 never in wait-notify: %s", w.states())
		}
		w.run(time.Microsecond, 0, 1)
	}
	for a.conn.Stats().ProbeFailures == 0 {
		if w.f.Now() > deadline+50*time.Millisecond {
			t.Fatalf("node0's probe never failed: %s", w.states())
		}
		if sq, _ := b.conn.State(); sq != fsm.SQWaitNotify {
			t.Fatalf("node1 left wait-notify (%v) before node0's probe failed: the test no longer reaches its case (%s)", sq, w.states())
		}
		w.run(10*time.Microsecond, 0, 1)
	}
	if _, rq := a.conn.State(); rq != fsm.RQDefault {
		t.Fatalf("node0's receives are not home (%v): it did not take node1's notification", rq)
	}
	bothHome(t, w, 0, 1)
	if st := b.conn.Stats(); st.MailboxHandshakes == 0 {
		t.Fatalf("node1 did not ask through the mailbox: %+v", st)
	}
}
