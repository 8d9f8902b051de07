package crossnic_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/verbs"
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
	w.run(until-w.f.Now()-2*time.Millisecond, 0)
	if a.conn.Stats().ProbeFailures != 1 {
		t.Fatalf("node0's probe has not failed 2 ms before the held copy arrives: %+v", a.conn.Stats())
	}
	w.run(3*time.Millisecond, 0)
	if st := w.f.Stats(); st.StaleExecuted != 0 {
		t.Fatalf("stale requests executed: %v", w.f.StaleExecutions())
	}
	for i, n := range w.n {
		if st := n.conn.Stats(); st.ResetsPaired != 1 || st.ResetsCarried != 0 {
			t.Fatalf("node%d: %d paired resets, %d carried, want one paired", i, st.ResetsPaired, st.ResetsCarried)
		}
	}
	bothHome(t, w, 0)
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
	deadline := w.f.Now() + 100*time.Millisecond
	for a.conn.Stats().ResetsPaired == 0 {
		if w.f.Now() > deadline {
			t.Fatalf("node0 never asked for a paired reset: %+v", a.conn.Stats())
		}
		w.run(10*time.Microsecond, 0)
	}
	w.stopped[0] = true
	for b.conn.Stats().ResetsPaired < 2 { // its answer, then its own request
		if w.f.Now() > deadline+100*time.Millisecond {
			t.Fatalf("node1 did not ask anew: %+v", b.conn.Stats())
		}
		w.run(10*time.Microsecond, 0)
	}
	w.stopped[0] = false
	bothHome(t, w, 0)
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
	w.run(until-w.f.Now()-2*time.Millisecond, 0, 1)
	if st := a.conn.Stats(); st.ProbeFailures != 1 {
		t.Fatalf("node0's probe has not failed 2 ms before the held copy arrives: %+v", st)
	}
	w.run(3*time.Millisecond, 0, 1)
	if st := w.f.Stats(); st.StaleExecuted != 0 {
		t.Fatalf("stale requests executed: %v", w.f.StaleExecutions())
	}
	if st := a.conn.Stats(); st.ResetsPaired != 1 || st.ResetsCarried != 0 || st.ResetFailures != 0 {
		t.Fatalf("node0: %d paired resets, %d carried, %d failed, want one paired", st.ResetsPaired, st.ResetsCarried, st.ResetFailures)
	}
	if st := b.conn.Stats(); st.MailboxHandshakes == 0 || st.ResetsCarried != 0 {
		t.Fatalf("node1 did not fail over through the mailbox, or carried its PSNs on: %+v", st)
	}
	bothHome(t, w, 0, 1)
}
