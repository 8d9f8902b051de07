package crossnic_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// postCall is one PostSend or PostRecv a Conn made on a backup QP.
type postCall struct {
	qpn  uint32
	recv bool
	n    int    // WRs in the call
	ctrl bool   // its first WR is one of the Conn's own (a control message)
	id   uint64 // its first WR's wr_id
}

// ownWR reports whether id is one of the wr_ids a Conn keeps for its own
// WRs (the five highest).
func ownWR(id uint64) bool { return id >= ^uint64(0)-4 }

// logRecvs records a PostRecv of wrs on qpn (0: an SRQ) in log.
func logRecvs(log *[]postCall, qpn uint32, wrs []verbs.RecvWR) {
	if len(wrs) > 0 {
		*log = append(*log, postCall{qpn: qpn, recv: true, n: len(wrs), ctrl: ownWR(wrs[0].WRID), id: wrs[0].WRID})
	}
}

// countingQP records every post made on the QP it wraps.
type countingQP struct {
	verbs.QP
	log *[]postCall
}

func (q countingQP) PostSend(wrs []verbs.SendWR) (int, error) {
	if len(wrs) > 0 {
		*q.log = append(*q.log, postCall{qpn: q.QPN(), n: len(wrs), ctrl: ownWR(wrs[0].WRID), id: wrs[0].WRID})
	}
	return q.QP.PostSend(wrs)
}

func (q countingQP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	logRecvs(q.log, q.QPN(), wrs)
	return q.QP.PostRecv(wrs)
}

// TestFailoverPostsInChains: a failover posts the replayed WRs on the
// backup QP in one ibv_post_send, the receives it moves there in one
// ibv_post_recv, and the acknowledgement with its announcement in one
// more: a provider rings the doorbell once per call (rdma_rxe makes a
// system call each time), so posting them one by one multiplied a
// failover's cost by the depth of the queues.
func TestFailoverPostsInChains(t *testing.T) {
	var logs [2][]postCall // each node's backup QP's, in node order
	k := 0
	dir := crossnic.NewMemDirectory()
	// (the handshake through the control receives: its answer and
	// announcement go in one post)
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 5}, retry: 3, noMailbox: true, noRecovery: true,
		wrapBak: func(q verbs.QP) verbs.QP {
			k++
			return countingQP{q, &logs[k-1]}
		}})
	w.run(300*time.Microsecond, 0)
	for w.postRounds([]int{0}) { // a full window, none of it on the wire yet
	}
	must(t, w.f.KillHCA(w.n[1].hca)) // the receiver's: node0 replays what it did not take
	w.run(2 * time.Millisecond)      // no new rounds: the failover's posts, and receives reposted
	a, b := w.n[0].conn, w.n[1].conn
	if sq, _ := a.State(); sq != fsm.SQFallback {
		t.Fatalf("node0 %v, want fallback", sq)
	}
	replayed, moved := a.Stats().Replayed, b.Stats().RecvsMoved
	if replayed < 2 || moved < 2 {
		t.Fatalf("replayed %d, moved %d: the trace needs several of each", replayed, moved)
	}
	// calls counts the first posts of node i's log that pass keep and
	// carry total WRs between them.
	calls := func(i, total int, keep func(postCall) bool) (n int, seen []postCall) {
		for _, c := range logs[i] {
			if total <= 0 {
				break
			}
			if keep(c) {
				total -= c.n
				seen = append(seen, c)
			}
		}
		return len(seen), seen
	}
	chains := func(total int) int { return (total + 63) / 64 }
	if n, seen := calls(0, replayed, func(c postCall) bool { return !c.recv && !c.ctrl }); n != chains(replayed) {
		t.Errorf("node0 replayed %d WRs in %d posts %+v, want %d", replayed, n, seen, chains(replayed))
	}
	if n, seen := calls(1, moved, func(c postCall) bool { return c.recv && !c.ctrl }); n != chains(moved) {
		t.Errorf("node1 moved %d receives in %d posts %+v, want %d", moved, n, seen, chains(moved))
	}
	// node1 saw its HCA die and notified; node0's answer is its first
	// control post
	if _, seen := calls(0, 1, func(c postCall) bool { return !c.recv && c.ctrl }); len(seen) != 1 || seen[0].n != 2 {
		t.Errorf("node0's acknowledgement and announcement went in %+v, want one post of two WRs", seen)
	}
	w.run(20*time.Millisecond, 0)
	if err := w.check(0); err != nil {
		t.Fatal(err)
	}
}

// halfChain posts only the first half of a chain of several of the
// application's send WRs and
// refuses the next one (as a provider whose send queue filled would, with
// bad_wr pointing at it), while refuse is set.
type halfChain struct {
	verbs.QP
	refuse *bool
	cut    *int // WRs of the chain it posted
}

func (q halfChain) PostSend(wrs []verbs.SendWR) (int, error) {
	if !*q.refuse || len(wrs) < 2 || ownWR(wrs[0].WRID) { // not a control message's
		return q.QP.PostSend(wrs)
	}
	*q.refuse = false
	h := len(wrs) / 2
	n, err := q.QP.PostSend(wrs[:h])
	if err != nil {
		return n, err
	}
	*q.cut = h
	return h, verbs.Errorf("ibv_post_send", verbs.ENOMEM, "injected: send queue full at WR %d", h)
}

// TestReplayRefusedMidChain: the backup QP takes the first half of the
// replay's chain and refuses the rest. The error surfaces on node0, and
// every signaled WR still completes exactly once: those the backup took
// from the backup, the others from the ring, as flushes.
func TestReplayRefusedMidChain(t *testing.T) {
	refuse, cut, k := false, 0, 0
	dir := crossnic.NewMemDirectory()
	w := newWorldWrap(t, 5, [2]crossnic.Directory{dir, dir}, func(q verbs.QP) verbs.QP {
		if k++; k == 1 {
			return halfChain{q, &refuse, &cut} // node0's backup
		}
		return q
	})
	w.run(300*time.Microsecond, 0)
	for w.postRounds([]int{0}) {
	}
	refuse = true
	must(t, w.f.KillHCA(w.n[1].hca))
	w.run(20 * time.Millisecond)
	a := w.n[0].conn
	if cut < 2 {
		t.Fatalf("the backup took %d WRs of the replay's chain: the trace needs a chain cut in two", cut)
	}
	if sq, _ := a.State(); sq != fsm.SQSurfaced {
		t.Fatalf("node0 %v after its replay was refused, want surfaced", sq)
	}
	if got := a.Stats().Replayed; got != cut {
		t.Fatalf("node0 counts %d WRs replayed, the backup took %d", got, cut)
	}
	if err := w.checkSafe(0); err != nil {
		t.Fatal(err)
	}
	if err := w.exactlyOnce(0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a.Reason(), "replay WR") || !strings.Contains(a.Reason(), "injected") {
		t.Fatalf("reason %q does not name the replay's refused WR", a.Reason())
	}
}

// countingSRQ records every post made on the SRQ it wraps.
type countingSRQ struct {
	verbs.SRQ
	log *[]postCall
}

func (s countingSRQ) PostRecv(wrs []verbs.RecvWR) (int, error) {
	logRecvs(s.log, 0, wrs)
	return s.SRQ.PostRecv(wrs)
}

// TestSRQMovePostsInChains: the receives an SRQ group moves to the
// backup SRQ go there in chains, not one ibv_post_srq_recv each.
func TestSRQMovePostsInChains(t *testing.T) {
	var log []postCall
	srqBakHook = func(s verbs.SRQ) verbs.SRQ { return countingSRQ{s, &log} }
	defer func() { srqBakHook = nil }()
	w := newSRQWorld(t, 2, sim.ProfileStrict)
	w.run(500 * time.Microsecond)
	log = log[:0] // the control receive
	must(t, w.f.KillHCA(w.hca[1]))
	w.run(3 * time.Millisecond)
	if err := w.check(true); err != nil {
		t.Fatal(err)
	}
	moved, n, left := w.group.Stats().Moved, 0, w.group.Stats().Moved
	for _, c := range log {
		if left <= 0 {
			break
		}
		left -= c.n
		n++
	}
	if moved < 2 || n != (moved+63)/64 {
		t.Fatalf("%d receives moved in %d posts %+v, want %d", moved, n, log[:min(len(log), 4)], (moved+63)/64)
	}
}

// TestHoldReplay: a Conn whose replay is held answers the peer's
// notification (the peer goes on to the backup) but posts none of its
// WRs there until ReleaseReplay, which posts them all, in order; nothing
// is lost or doubled.
func TestHoldReplay(t *testing.T) {
	var logs [2][]postCall
	k := 0
	dir := crossnic.NewMemDirectory()
	w := newWorldWrap(t, 5, [2]crossnic.Directory{dir, dir}, func(q verbs.QP) verbs.QP {
		k++
		return countingQP{q, &logs[k-1]}
	})
	w.run(300*time.Microsecond, 0)
	for w.postRounds([]int{0}) {
	}
	a := w.n[0].conn
	a.HoldReplay()
	must(t, w.f.KillHCA(w.n[1].hca))
	w.run(2 * time.Millisecond)
	sends := func() (n int) {
		for _, c := range logs[0] {
			if !c.recv && !c.ctrl {
				n += c.n
			}
		}
		return n
	}
	if sq, _ := a.State(); sq != fsm.SQFallback || !a.ReplayHeld() || a.Settled() {
		t.Fatalf("node0 %v, held %v, settled %v: want fallback, held, not settled", sq, a.ReplayHeld(), a.Settled())
	}
	if sq, _ := w.n[1].conn.State(); sq != fsm.SQFallback {
		t.Fatalf("node1 %v: node0's answer did not reach it", sq)
	}
	if n := sends(); n != 0 || a.Stats().Replayed != 0 {
		t.Fatalf("%d WRs posted on node0's backup (%d counted) while its replay was held", n, a.Stats().Replayed)
	}
	a.ReleaseReplay()
	if a.ReplayHeld() || sends() < 2 || sends() != a.Stats().Replayed {
		t.Fatalf("released: held %v, %d WRs posted, %d counted", a.ReplayHeld(), sends(), a.Stats().Replayed)
	}
	w.run(20*time.Millisecond, 0)
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
}
