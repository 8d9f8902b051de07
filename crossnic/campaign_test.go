package crossnic_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

const atomicWRID = 1 << 40

var (
	campaignRuns = flag.Int("crossnic.runs", 1000, "fault schedules in TestCrossNICCampaign (100000 for a long local run)")
	campaignSeed = flag.Uint64("crossnic.seed", 0, "run only this schedule")
)

// tally sums what the schedules exercised.
type tally struct{ faults, failovers, delivered, replayed, recvsMoved, switchBacks int }

// schedule runs one seeded fault schedule and returns what it did.
func schedule(t testing.TB, seed uint64, tl *tally) (string, error) {
	rng := rand.New(rand.NewPCG(seed, 7))
	w := newWorld(t, seed)
	var dirs []int
	switch rng.IntN(3) {
	case 0:
		dirs = []int{0}
	case 1:
		dirs = []int{1}
	default:
		dirs = []int{0, 1}
	}
	w.sendRx = [2]bool{rng.IntN(2) == 0, rng.IntN(2) == 0}
	if rng.IntN(2) == 0 {
		loss := rng.Float64() * 0.02
		must(t, w.f.SetLoss(w.n[0].hca.Port(1), loss, loss))
	}
	w.run(time.Duration(50+rng.IntN(400))*time.Microsecond, dirs...)
	victim := rng.IntN(2)
	fault := rng.IntN(6)
	desc := fmt.Sprintf("dirs %v sendRx %v fault %d victim %d", dirs, w.sendRx, fault, victim)
	if rng.IntN(2) == 0 { // lose the ACKs of the next few PSNs first
		psn := uint32(2 * w.sent[victim])
		for k := uint32(0); k < 4; k++ {
			must(t, w.f.DropResponse(w.n[victim].def.qp, psn+k))
		}
		w.run(time.Duration(rng.IntN(10))*time.Microsecond, dirs...)
		desc += " ack-lost"
	}
	atomic := rng.IntN(5) == 0
	if atomic { // an atomic in flight at the fault: it must never run twice
		n, peer := w.n[victim], w.n[1-victim]
		_, err := n.conn.PostSend([]verbs.SendWR{{WRID: atomicWRID, Opcode: verbs.WRAtomicFetchAdd, SendFlags: verbs.SendSignaled,
			CompareAdd: 1, SGList: []verbs.SGE{{Addr: n.def.mr.Addr() + uint64(len(n.buf)-8), Length: 8, LKey: n.def.mr.LKey()}},
			RemoteAddr: peer.def.mr.Addr() + uint64(len(peer.buf)-8), RKey: peer.def.mr.RKey()}})
		must(t, err)
		w.f.RunFor(time.Duration(rng.IntN(4)) * time.Microsecond)
		desc += " atomic"
	}
	switch fault {
	case 0, 1:
		must(t, w.f.KillHCA(w.n[victim].hca))
	case 2:
		must(t, w.f.KillHCA(w.n[0].hca))
		must(t, w.f.KillHCA(w.n[1].hca))
	case 3:
		must(t, w.f.SetLink(w.n[victim].hca.Port(1), false))
	case 4, 5: // a flap: the link comes back and traffic must go home
		must(t, w.f.SetLink(w.n[victim].hca.Port(1), false))
		w.run(time.Duration(1+rng.IntN(20))*time.Millisecond, dirs...)
		must(t, w.f.SetLink(w.n[victim].hca.Port(1), true))
	}
	w.run(time.Duration(200+rng.IntN(800))*time.Microsecond, dirs...)
	if fault >= 4 {
		w.run(60*time.Millisecond, dirs...) // probes succeed, fences drain
	}
	w.run(30 * time.Millisecond) // drain
	surfaced := false
	for _, n := range w.n {
		if sq, _ := n.conn.State(); sq == fsm.SQSurfaced {
			surfaced = true
		}
	}
	if surfaced && !atomic {
		return desc, fmt.Errorf("a connection surfaced without an atomic in flight: %s / %s", w.n[0].conn.Reason(), w.n[1].conn.Reason())
	}
	if fault >= 4 && !surfaced {
		for _, n := range w.n {
			if sq, rq := n.conn.State(); sq != fsm.SQDefault || rq != fsm.RQDefault {
				return desc, fmt.Errorf("%s did not switch back after the flap: %v/%v (%s) %+v", n.name, sq, rq, n.conn.Reason(), n.conn.Stats())
			}
		}
	}
	for _, n := range w.n {
		st := n.conn.Stats()
		tl.faults += st.Faults
		tl.delivered += st.Delivered
		tl.replayed += st.Replayed
		tl.recvsMoved += st.RecvsMoved
		tl.switchBacks += st.SwitchBacks
		if st.Faults > 0 || st.RecvsMoved > 0 {
			tl.failovers++
		}
	}
	if err := w.check(dirs...); err != nil {
		return desc, err
	}
	if atomic {
		peer := w.n[1-victim]
		if c := binary.LittleEndian.Uint64(peer.buf[len(peer.buf)-8:]); c > 1 {
			return desc, fmt.Errorf("the atomic executed %d times: replayed", c)
		}
		seen := 0
		for _, id := range w.done[victim] {
			if id == atomicWRID {
				seen++
			}
		}
		for _, e := range w.errs[victim] {
			if e.WRID == atomicWRID {
				seen++
			}
		}
		if seen != 1 {
			return desc, fmt.Errorf("the atomic completed %d times, want exactly once", seen)
		}
	}
	for _, i := range dirs {
		if sq, _ := w.n[i].conn.State(); sq == fsm.SQSurfaced {
			if err := w.exactlyOnce(i); err != nil {
				return desc, err
			}
			continue
		}
		if err := w.delivered(i); err != nil {
			return desc, err
		}
	}
	return desc, nil
}

// TestCrossNICCampaign runs seeded random fault schedules and checks after
// each: every signaled WR completes exactly once and in order, every
// notification arrives exactly once, in order, with its data intact, and
// nothing is lost.
func TestCrossNICCampaign(t *testing.T) {
	runs := *campaignRuns
	if testing.Short() {
		runs = 100
	}
	var tl tally
	for s := uint64(1); s <= uint64(runs); s++ {
		if *campaignSeed != 0 && s != *campaignSeed {
			continue
		}
		desc, err := schedule(t, s, &tl)
		if err != nil {
			t.Fatalf("schedule %d (%s): %v\nreproduce: go test ./crossnic -run TestCrossNICCampaign -crossnic.seed %d -v", s, desc, err, s)
		}
	}
	t.Logf("%d schedules: %+v", runs, tl)
	if *campaignSeed == 0 && (tl.failovers < runs || tl.delivered == 0 || tl.replayed == 0 || tl.recvsMoved == 0 || tl.switchBacks == 0) {
		t.Fatalf("the campaign did not exercise failover fully: %+v", tl)
	}
}
