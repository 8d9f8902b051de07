package crossnic_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

const atomicWRID = 1 << 40

var (
	campaignRuns = flag.Int("crossnic.runs", 1000, "fault schedules in TestCrossNICCampaign (100000 for a long local run)")
	campaignSeed = flag.Uint64("crossnic.seed", 0, "run only this schedule")
)

// tally sums what the schedules exercised.
type tally struct {
	faults, failovers, delivered, replayed, recvsMoved, switchBacks int
	// atomics in flight at the fault: how many executed at the
	// responder, completed with success, surfaced as an error
	atomics, atomicsExecuted, atomicsOK, atomicsFailed int
}

// campaignProfile is the simulator profile of a schedule: the seeds take
// the profiles in turn, so every run covers a dead device that flushes
// its QPs (rdmavt) and one that completes nothing more (strict, mlx5).
func campaignProfile(seed uint64) sim.Profile { return sim.Profiles[seed%uint64(len(sim.Profiles))] }

// nextPSN is the PSN of the next request node i posts on its default QP,
// before any reset: each round is one packet per WR (a slot fits the
// MTU), a SEND for a two-sided round, a WRITE and a WRITE_WITH_IMM for
// an NCCL-Simple one.
func (w *world) nextPSN(i int) uint32 {
	if w.sendRx[i] {
		return uint32(w.sent[i])
	}
	return uint32(2 * w.sent[i])
}

// schedule runs one seeded fault schedule and returns what it did.
func schedule(t testing.TB, seed uint64, tl *tally) (string, error) {
	rng := rand.New(rand.NewPCG(seed, 7))
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: seed, Profile: campaignProfile(seed)}, retry: 3})
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
		psn := w.nextPSN(victim)
		for k := uint32(0); k < 4; k++ {
			must(t, w.f.DropResponse(w.n[victim].def.qp, psn+k))
		}
		w.run(time.Duration(rng.IntN(10))*time.Microsecond, dirs...)
		desc += " ack-lost"
	}
	atomic := rng.IntN(5) == 0
	if atomic { // an atomic in flight at the fault: it must never run twice
		w.postAtomic(victim)
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
		if err := w.atomicOnce(victim); err != nil {
			return desc, err
		}
		tl.atomics++
		peer := w.n[1-victim]
		tl.atomicsExecuted += int(binary.LittleEndian.Uint64(peer.buf[len(peer.buf)-8:]))
		if w.atoms[victim][0].Status == verbs.WCSuccess {
			tl.atomicsOK++
		} else {
			tl.atomicsFailed++
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

// postAtomic posts from node i a FETCH_ADD of 1 on the counter at the end
// of the peer's buffer (which only atomics touch), the old value landing
// at the end of node i's.
func (w *world) postAtomic(i int) {
	n, peer := w.n[i], w.n[1-i]
	_, err := n.conn.PostSend([]verbs.SendWR{{WRID: atomicWRID, Opcode: verbs.WRAtomicFetchAdd, SendFlags: verbs.SendSignaled,
		CompareAdd: 1, SGList: []verbs.SGE{{Addr: n.def.mr.Addr() + uint64(len(n.buf)-8), Length: 8, LKey: n.def.mr.LKey()}},
		RemoteAddr: peer.def.mr.Addr() + uint64(len(peer.buf)-8), RKey: peer.def.mr.RKey()}})
	must(w.t, err)
	w.posted[i] = append(w.posted[i], atomicWRID)
}

// atomicOnce checks the atomic node i posted (postAtomic): it executed at
// most once at the responder (the counter it adds 1 to), and completed at
// the requester exactly once: with success, having executed exactly once
// and fetched the counter's value before it, or with an error, the
// connection's error surfaced.
func (w *world) atomicOnce(i int) error {
	me, peer := w.n[i], w.n[1-i]
	exec := binary.LittleEndian.Uint64(peer.buf[len(peer.buf)-8:])
	if exec > 1 {
		return fmt.Errorf("the atomic executed %d times at %s: replayed", exec, peer.name)
	}
	if len(w.atoms[i]) != 1 {
		return fmt.Errorf("the atomic completed %d times at %s (%v), want exactly once", len(w.atoms[i]), me.name, w.atoms[i])
	}
	wc := w.atoms[i][0]
	if wc.Status == verbs.WCSuccess {
		if exec != 1 {
			return fmt.Errorf("the atomic completed with success but executed %d times", exec)
		}
		if old := binary.LittleEndian.Uint64(me.buf[len(me.buf)-8:]); old != 0 {
			return fmt.Errorf("the atomic fetched %d, want the counter's 0", old)
		}
		return nil
	}
	if sq, _ := me.conn.State(); sq != fsm.SQSurfaced {
		return fmt.Errorf("the atomic completed with %v but %s's connection did not surface (%v)", wc.Status, me.name, sq)
	}
	return nil
}

// TestCrossNICCampaign runs seeded random fault schedules, on the
// simulator's profiles in turn, and checks after each: every signaled WR
// completes exactly once and in order, every notification arrives exactly
// once, in order, with its data intact, nothing is lost (a connection
// whose error surfaced completes every WR and receive it was given, in
// order, whether or not its dead HCA flushed them), and an atomic in
// flight executes at most once and completes exactly once.
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
			t.Fatalf("schedule %d, profile %s (%s): %v\nreproduce: go test ./crossnic -run TestCrossNICCampaign -crossnic.seed %d -v", s, campaignProfile(s), desc, err, s)
		}
	}
	t.Logf("%d schedules: %+v", runs, tl)
	if *campaignSeed == 0 && (tl.failovers < runs || tl.delivered == 0 || tl.replayed == 0 || tl.recvsMoved == 0 || tl.switchBacks == 0 ||
		tl.atomicsExecuted == 0 || tl.atomicsOK == 0 || tl.atomicsFailed == 0) {
		t.Fatalf("the campaign did not exercise failover fully: %+v", tl)
	}
}
