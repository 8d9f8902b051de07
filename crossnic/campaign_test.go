package crossnic_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
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
	onlyProfile  = flag.String("crossnic.profile", "", "run every campaign schedule on this simulator profile (default: the seeds take them in turn)")
)

// tally sums what the schedules exercised.
type tally struct {
	faults, failovers, delivered, replayed, recvsMoved, switchBacks int
	// atomics in flight at the fault: how many executed at the
	// responder, completed with success, surfaced as an error
	atomics, atomicsExecuted, atomicsOK, atomicsFailed int
	// schedules of each fault kind, and those that surfaced
	kinds, surfaced [len(faultKinds)]int
	kindFailovers   [len(faultKinds)]int // connections that failed over, per kind
	readsRefused    int                  // connections that surfaced an unanswered READ
	shared          int                  // schedules with a second connection on the same HCAs
	overruns        int                  // connections whose application's CQ overran
	stale           uint64               // requests executed after their QP's reset (none with effect)

}

// add sums o into tl.
func (tl *tally) add(o tally) {
	tl.faults += o.faults
	tl.failovers += o.failovers
	tl.delivered += o.delivered
	tl.replayed += o.replayed
	tl.recvsMoved += o.recvsMoved
	tl.switchBacks += o.switchBacks
	tl.atomics += o.atomics
	tl.atomicsExecuted += o.atomicsExecuted
	tl.atomicsOK += o.atomicsOK
	tl.atomicsFailed += o.atomicsFailed
	tl.readsRefused += o.readsRefused
	tl.shared += o.shared
	tl.overruns += o.overruns
	tl.stale += o.stale
	for k := range tl.kinds {
		tl.kinds[k] += o.kinds[k]
		tl.surfaced[k] += o.surfaced[k]
		tl.kindFailovers[k] += o.kindFailovers[k]
	}
}

// campaignProfile is the simulator profile of a schedule: the seeds take
// the profiles in turn, so every run covers a dead device that flushes
// its QPs (rdmavt) and one that completes nothing more (strict, mlx5);
// -crossnic.profile puts every schedule on one (to measure it alone).
func campaignProfile(seed uint64) sim.Profile {
	if *onlyProfile != "" {
		return sim.Profile(*onlyProfile)
	}
	return sim.Profiles[seed%uint64(len(sim.Profiles))]
}

// checkProfileFlag fails the test on a -crossnic.profile that names no
// profile.
func checkProfileFlag(t *testing.T) {
	if *onlyProfile != "" {
		if _, err := sim.ParseProfile(*onlyProfile); err != nil {
			t.Fatalf("-crossnic.profile: %v", err)
		}
	}
}

// nextPSN is the PSN of the next request node i posts on its default QP,
// before any reset: each round is one packet per WR (a slot fits the
// MTU), a SEND for a two-sided round, a WRITE and a WRITE_WITH_IMM for
// an NCCL-Simple one.
func (w *world) nextPSN(i int) uint32 {
	if w.sendRx[i] {
		return uint32(w.sent[i])
	}
	if w.load[i]&wlRead != 0 { // and the READ's response between
		return uint32(3 * w.sent[i])
	}
	return uint32(2 * w.sent[i])
}

// faultKinds names the campaign's faults (schedule). Those marked with a
// star in their name leave no healthy backup path for some QP, or take a
// peer away: the error may then surface (cleanly); on the others no
// error may reach the application.
var faultKinds = [...]string{
	"kill the victim's default HCA",
	"kill the victim's default HCA",
	"kill both default HCAs",
	"the victim's default link down",
	"flap the victim's default link",
	"flap the victim's default link",
	"the default rail's leaf dies, then comes back",
	"the spine of the default path dies (silently), then comes back",
	"*kill both HCAs of the victim's host",
	"*a backup fault, then the default HCA dies",
	"*the default HCA dies, then a backup fault during the handshake or replay",
	"the default HCA dies, then the peer's during the handshake or replay",
	"the peer's process stops for a while as the default HCA dies",
	"*the peer's process is killed",
	"*the Directory fails its lookups as the default HCA dies",
	"*the victim's application stops polling and its CQ overruns",
}

// mayFail reports whether fault kind k may surface the error.
func mayFail(k int) bool { return faultKinds[k][0] == '*' }

// failingDirectory is a Directory whose lookups fail once failing is set:
// the store unreachable or damaged at the failover.
type failingDirectory struct {
	*crossnic.MemDirectory
	failing bool
}

func (d *failingDirectory) LookupQP(def crossnic.Endpoint) (crossnic.Backup, bool) {
	if d.failing {
		return crossnic.Backup{}, false
	}
	return d.MemDirectory.LookupQP(def)
}

func (d *failingDirectory) LookupMR(def crossnic.MRRef) (uint32, bool) {
	if d.failing {
		return 0, false
	}
	return d.MemDirectory.LookupMR(def)
}

// drawNoMailbox says whether a cross-NIC campaign's schedule runs
// without mailboxes, and so without switch back (-crossnic.mailbox):
// with "mixed", one in four, drawn from a stream of its own, so that a
// Conn whose peer published no mailbox (an older version, switch back
// off there, or an SRQ) stays covered beside the mailbox's.
func drawNoMailbox(t testing.TB, seed uint64) bool {
	switch *mailboxes {
	case "on":
		return false
	case "off":
		return true
	case "mixed":
		return rand.New(rand.NewPCG(seed, 14)).IntN(4) == 0
	}
	t.Fatalf("-crossnic.mailbox %q: want mixed, on or off", *mailboxes)
	return false
}

// schedule runs one seeded fault schedule and returns what it did. Beside
// the fault kind (faultKinds) a schedule draws the workload of each
// direction (SENDs or NCCL-Simple WRITEs; multi-SGE, inline, with
// READs), packet loss, delay and reordering, a receiver that reposts its
// receives late (RNR), lost ACKs before the fault, an atomic in flight,
// and now and then the long timers of a large fabric (retry_cnt 7,
// timeout 20: 4.3 s per try).
func schedule(t testing.TB, seed uint64, tl *tally) (string, error) {
	rng := rand.New(rand.NewPCG(seed, 7))
	fault := rng.IntN(len(faultKinds))
	o := worldOpts{cfg: sim.Config{Seed: seed, Profile: campaignProfile(seed)}, retry: 3, acrossSpines: fault == 7}
	o.noMailbox = drawNoMailbox(t, seed)
	if o.noMailbox {
		// A switch back needs mailboxes. The fallback handshake is
		// bounded as with recovery (the shim bounds it either way).
		o.noRecovery, o.handshake = true, time.Second
	}
	if fault == 15 {
		o.cqe = 8 // the peer's 16 rounds of credit overrun it
	}
	long := rng.IntN(16) == 0
	if long {
		o.retry, o.timeout = 7, 20
	}
	mem := crossnic.NewMemDirectory()
	fdir := &failingDirectory{MemDirectory: mem}
	w := newWorldWith(t, [2]crossnic.Directory{fdir, fdir}, o)
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
	w.load = [2]workload{workload(rng.IntN(8)), workload(rng.IntN(8))}
	if fault == 15 {
		dirs = []int{0, 1} // the peer's rounds fill the victim's CQ
	}
	ws := []*world{w}
	shared := rng.IntN(4) == 0
	if shared {
		// A second connection of the same two processes, its own QPs on
		// the same HCAs: one backup HCA serves both.
		o2 := o
		o2.fabric = w.f
		w2 := newWorldWith(t, [2]crossnic.Directory{fdir, fdir}, o2)
		w2.sendRx = [2]bool{rng.IntN(2) == 0, rng.IntN(2) == 0}
		w2.load = [2]workload{workload(rng.IntN(8)), workload(rng.IntN(8))}
		ws = append(ws, w2)
	}
	run := func(d time.Duration, dirs ...int) { runAll(ws, d, dirs...) }
	victim := rng.IntN(2)
	peer := 1 - victim
	desc := fmt.Sprintf("fault %d (%s) victim %d dirs %v sendRx %v load %v mailbox and switch back %v", fault, faultKinds[fault], victim, dirs, w.sendRx, w.load, !o.noMailbox)
	if shared {
		desc += fmt.Sprintf(", a second connection on the same HCAs: sendRx %v load %v", ws[1].sendRx, ws[1].load)
	}
	defer func() {
		if t.Failed() { // the checker failed the test on the way
			t.Logf("schedule %d, profile %s: %s", seed, o.cfg.Profile, desc)
		}
	}()
	if long {
		desc += " retry_cnt 7 timeout 20"
	}
	if rng.IntN(2) == 0 {
		loss := rng.Float64() * 0.02
		must(t, w.f.SetLoss(w.n[0].hca.Port(1), loss, loss))
		desc += fmt.Sprintf(" loss %.3f", loss)
	}
	if rng.IntN(4) == 0 {
		desc += drawDelay(t, rng, w)
	}
	if rng.IntN(4) == 0 {
		k := rng.IntN(2)
		for _, x := range ws {
			x.holdRecvs[k] = time.Duration(200+rng.IntN(2000)) * time.Microsecond
		}
		desc += fmt.Sprintf(" rnr at %d (reposts every %v)", k, w.holdRecvs[k])
	}
	run(time.Duration(50+rng.IntN(400))*time.Microsecond, dirs...)
	if rng.IntN(2) == 0 { // lose the ACKs of the next few PSNs first
		psn := w.nextPSN(victim)
		for k := uint32(0); k < 4; k++ {
			must(t, w.f.DropResponse(w.n[victim].def.qp, psn+k))
		}
		run(time.Duration(rng.IntN(10))*time.Microsecond, dirs...)
		desc += " ack-lost"
	}
	atomic := rng.IntN(5) == 0
	if atomic { // an atomic in flight at the fault: it must never run twice
		w.postAtomic(victim)
		w.f.RunFor(time.Duration(rng.IntN(4)) * time.Microsecond)
		desc += " atomic"
	}
	// A request held in the fabric across the fault (its own stream:
	// the other draws of a seed stay what they were).
	desc += drawHold(t, rand.New(rand.NewPCG(seed, 14)), w)
	vic, per := w.n[victim], w.n[peer]
	defHCA := func(n *node) *sim.HCA { return n.hca }
	bakHCA := func(n *node) *sim.HCA { return n.bak.ctx.(*sim.Context).HCA() }
	soon := func() time.Duration { return time.Duration(rng.IntN(60)) * time.Microsecond }
	comesBack := false // the fault heals: traffic must end home
	killed := false    // the peer's process is gone
	switch fault {
	case 0, 1:
		must(t, w.f.KillHCA(defHCA(vic)))
	case 2:
		must(t, w.f.KillHCA(defHCA(w.n[0])))
		must(t, w.f.KillHCA(defHCA(w.n[1])))
	case 3:
		must(t, w.f.SetLink(defHCA(vic).Port(1), false))
	case 4, 5:
		must(t, w.f.SetLink(defHCA(vic).Port(1), false))
		run(time.Duration(1+rng.IntN(20))*time.Millisecond, dirs...)
		must(t, w.f.SetLink(defHCA(vic).Port(1), true))
		comesBack = true
	case 6:
		leaf := w.f.Leaf("rail0-p1")
		must(t, w.f.FailSwitch(leaf))
		run(time.Duration(1+rng.IntN(20))*time.Millisecond, dirs...)
		must(t, w.f.ReviveSwitch(leaf))
		comesBack = true
	case 7:
		// The DLID picks the spine (LID mod spines): the spine of the
		// path to node1's default port; node0's default LID is even too
		// (the LIDs go 2, 3, 4, 5 in cabling order), the backups' odd.
		pa, err := w.n[1].def.ctx.QueryPort(1)
		must(t, err)
		sp := w.f.Spine(int(pa.LID) % 2)
		must(t, w.f.FailSwitch(sp))
		run(time.Duration(1+rng.IntN(60))*time.Millisecond, dirs...)
		must(t, w.f.ReviveSwitch(sp))
		comesBack = true
	case 8:
		must(t, w.f.KillHCA(defHCA(vic)))
		must(t, w.f.KillHCA(bakHCA(vic)))
	case 9:
		switch rng.IntN(3) {
		case 0:
			must(t, w.f.KillHCA(bakHCA(w.n[rng.IntN(2)])))
		case 1:
			must(t, w.f.SetLink(bakHCA(w.n[rng.IntN(2)]).Port(1), false))
		default:
			must(t, w.f.FailSwitch(w.f.Leaf("rail1-p1")))
		}
		run(soon(), dirs...)
		must(t, w.f.KillHCA(defHCA(vic)))
	case 10:
		must(t, w.f.KillHCA(defHCA(vic)))
		run(soon(), dirs...)
		who := w.n[rng.IntN(2)]
		if rng.IntN(2) == 0 {
			must(t, w.f.KillHCA(bakHCA(who)))
		} else {
			must(t, w.f.SetLink(bakHCA(who).Port(1), false))
			run(time.Duration(rng.IntN(5000))*time.Microsecond, dirs...)
			must(t, w.f.SetLink(bakHCA(who).Port(1), true))
		}
	case 11:
		must(t, w.f.KillHCA(defHCA(vic)))
		run(soon(), dirs...)
		must(t, w.f.KillHCA(defHCA(per)))
	case 12:
		for _, x := range ws {
			x.stopped[peer] = true
		}
		must(t, w.f.KillHCA(defHCA(vic)))
		run(time.Duration(1+rng.IntN(50))*time.Millisecond, dirs...)
		for _, x := range ws {
			x.stopped[peer] = false
		}
	case 13:
		// The kernel destroys a dead process's QPs: its peer's packets
		// go unanswered on both paths.
		killed = true
		for _, x := range ws {
			x.stopped[peer] = true
			must(t, x.n[peer].def.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState))
			must(t, x.n[peer].bak.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState))
		}
	case 14:
		fdir.failing = true
		must(t, w.f.KillHCA(defHCA(vic)))
	case 15:
		for _, x := range ws {
			x.overrunOK = true
			x.stopped[victim] = true
		}
		run(time.Duration(1+rng.IntN(10))*time.Millisecond, dirs...)
		for _, x := range ws {
			x.stopped[victim] = false // its next poll finds the overrun
		}
	}
	run(time.Duration(200+rng.IntN(800))*time.Microsecond, dirs...)
	if comesBack {
		run(40*time.Millisecond, dirs...) // probes succeed, fences drain
	}
	if long {
		run(40 * time.Second) // 8 tries of 4.3 s, then the handshake
	}
	run(30 * time.Millisecond) // drain
	settled := func() bool {
		for _, x := range ws {
			if x.check(dirs...) != nil {
				return false
			}
		}
		return true
	}
	anySurfaced := func() bool {
		for _, x := range ws {
			for _, n := range x.n {
				if sq, _ := n.conn.State(); sq == fsm.SQSurfaced {
					return true
				}
			}
		}
		return false
	}
	for k := 0; k < 100 && (mayFail(fault) || anySurfaced()) && !settled(); k++ {
		// No way left, or one end surfaced (a READ that lost its
		// response): the error takes the retries of the backup path
		// (and the handshake's bound) to surface.
		run(10 * time.Millisecond)
	}
	if killed {
		// The dead process's sends and receives are nobody's concern.
		dirs = slices.DeleteFunc(dirs, func(i int) bool { return i == peer })
	}
	tl.kinds[fault]++
	if shared {
		tl.shared++
	}
	for _, x := range ws {
		if x.overran[victim] {
			tl.overruns++
		}
	}
	for k, x := range ws {
		surfaced, readRefused, err := verdict(x, dirs, fault, k == 0 && atomic, comesBack && !o.noRecovery, killed || long)
		if err != nil {
			if k > 0 {
				err = fmt.Errorf("the second connection: %w", err)
			}
			return desc, err
		}
		if surfaced {
			tl.surfaced[fault]++
		}
		if readRefused {
			tl.readsRefused++
		}
		for _, n := range x.n {
			st := n.conn.Stats()
			tl.faults += st.Faults
			tl.delivered += st.Delivered
			tl.replayed += st.Replayed
			tl.recvsMoved += st.RecvsMoved
			tl.switchBacks += st.SwitchBacks
			if st.Faults > 0 || st.RecvsMoved > 0 {
				tl.failovers++
				tl.kindFailovers[fault]++
			}
		}
	}
	tl.stale += w.f.Stats().StaleExecuted // the worlds share the fabric
	if atomic && w.overran[victim] {
		// Its completion may be one the overrun lost; it still executed
		// at most once.
		if _, err := w.atomicAtMostOnce(victim); err != nil {
			return desc, err
		}
	} else if atomic && !killed {
		if err := w.atomicOnce(victim); err != nil {
			return desc, err
		}
		tl.atomics++
		tl.atomicsExecuted += int(binary.LittleEndian.Uint64(per.buf[len(per.buf)-8:]))
		if w.atoms[victim][0].Status == verbs.WCSuccess {
			tl.atomicsOK++
		} else {
			tl.atomicsFailed++
		}
	}
	return desc, nil
}

// verdict checks one connection of a schedule: whether its error surfaced
// and whether a READ was refused, and that it surfaced only where allowed
// (a fault kind that may, an atomic in flight on it, a READ refused), came
// home after a healed fault, and that every invariant holds; safeOnly:
// rounds may still be pending (a killed peer, 4.3 s tries).
func verdict(w *world, dirs []int, fault int, atomic, comesBack, safeOnly bool) (surfaced, readRefused bool, err error) {
	if _, err := noStaleEffect(w); err != nil {
		return false, false, err
	}
	switchLost := false
	for _, n := range w.n {
		if sq, _ := n.conn.State(); sq == fsm.SQSurfaced {
			surfaced = true
		}
		// A READ executed at the peer before a notification it
		// consumed, its response lost in the fault, is not replayed
		// (ErrReadUnanswered): that side's error surfaces, and its
		// peer's with it.
		readRefused = readRefused || strings.Contains(n.conn.Reason(), crossnic.ErrReadUnanswered.Error())
		// A switch-back notification that failed may have been taken by
		// the peer (its ACK lost): the error surfaces rather than send
		// the held WRs where the peer no longer reads (docs/CROSSNIC.md).
		switchLost = switchLost || strings.Contains(n.conn.Reason(), crossnic.ErrSwitchNotifyLost.Error())
	}
	if surfaced && !atomic && !mayFail(fault) && !readRefused && !switchLost {
		return surfaced, readRefused, fmt.Errorf("a connection surfaced without an atomic in flight or a fault that leaves no way: %s / %s", w.n[0].conn.Reason(), w.n[1].conn.Reason())
	}
	if comesBack && !surfaced {
		for _, n := range w.n {
			if sq, rq := n.conn.State(); sq != fsm.SQDefault || rq != fsm.RQDefault {
				return surfaced, readRefused, fmt.Errorf("%s did not switch back after the fault healed: %v/%v (%s) %+v", n.name, sq, rq, n.conn.Reason(), n.conn.Stats())
			}
		}
	}
	for i, n := range w.n {
		if sq, _ := n.conn.State(); w.overran[i] && sq != fsm.SQSurfaced {
			return surfaced, readRefused, fmt.Errorf("%s's CQ overran, its connection did not surface (%v)", n.name, sq)
		}
	}
	check := w.check
	if safeOnly {
		// A sender whose peer is gone, or whose QPs wait out 4.3 s
		// tries, may still have rounds pending, as without ibpath.
		check = w.checkSafe
	}
	if err := check(dirs...); err != nil {
		return surfaced, readRefused, err
	}
	for _, i := range dirs {
		if w.overran[i] || w.overran[1-i] {
			// The overrun lost completions, this node's or its peer's
			// receives, as with plain verbs: what arrived is checked
			// above (once, in order, intact), not that all did.
			continue
		}
		if sq, _ := w.n[i].conn.State(); sq == fsm.SQSurfaced {
			if err := w.exactlyOnce(i); err != nil {
				return surfaced, readRefused, err
			}
			continue
		}
		if safeOnly {
			continue
		}
		if err := w.delivered(i); err != nil {
			return surfaced, readRefused, err
		}
	}
	return surfaced, readRefused, nil
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

// atomicAtMostOnce reads how many times the atomic node i posted executed
// at the peer (the counter it adds 1 to): an error past once.
func (w *world) atomicAtMostOnce(i int) (uint64, error) {
	peer := w.n[1-i]
	exec := binary.LittleEndian.Uint64(peer.buf[len(peer.buf)-8:])
	if exec > 1 {
		return exec, fmt.Errorf("the atomic executed %d times at %s: replayed", exec, peer.name)
	}
	return exec, nil
}

// atomicOnce checks the atomic node i posted (postAtomic): it executed at
// most once at the responder (the counter it adds 1 to), and completed at
// the requester exactly once: with success, having executed exactly once
// and fetched the counter's value before it, or with an error, the
// connection's error surfaced.
func (w *world) atomicOnce(i int) error {
	me := w.n[i]
	exec, err := w.atomicAtMostOnce(i)
	if err != nil {
		return err
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
	checkProfileFlag(t)
	runs := *campaignRuns
	if testing.Short() {
		runs = 100
	}
	var (
		mu sync.Mutex
		tl tally
	)
	seedWorkers(t, runs, *campaignSeed, func(t *testing.T, s uint64) {
		var one tally
		desc, err := schedule(t, s, &one)
		if err != nil {
			t.Fatalf("schedule %d, profile %s (%s): %v\nreproduce: go test ./crossnic -run TestCrossNICCampaign -crossnic.seed %d -v", s, campaignProfile(s), desc, err, s)
		}
		mu.Lock()
		tl.add(one)
		mu.Unlock()
	})
	if t.Failed() {
		return
	}
	if *campaignSeed != 0 {
		runs = 1
	}
	t.Logf("%d schedules: failovers %d, faults %d, delivered %d, replayed %d, receives moved %d, switch backs %d; atomics %d (executed %d, ok %d, failed %d); unanswered READs refused %d; %d schedules with a second connection on the same HCAs; %d CQ overruns; %d stale requests executed, none with effect",
		runs, tl.failovers, tl.faults, tl.delivered, tl.replayed, tl.recvsMoved, tl.switchBacks, tl.atomics, tl.atomicsExecuted, tl.atomicsOK, tl.atomicsFailed, tl.readsRefused, tl.shared, tl.overruns, tl.stale)
	for k, name := range faultKinds {
		t.Logf("fault %2d %-70s %5d schedules, %5d connections failed over, %4d surfaced", k, name, tl.kinds[k], tl.kindFailovers[k], tl.surfaced[k])
		if *campaignSeed == 0 && runs >= 1000 && tl.kindFailovers[k] == 0 {
			t.Errorf("fault %d (%s) made no connection fail over in %d schedules: it does not reach the traffic", k, name, tl.kinds[k])
		}
	}
	if *campaignSeed == 0 && (tl.failovers < runs/2 || tl.delivered == 0 || tl.replayed == 0 || tl.recvsMoved == 0 || tl.switchBacks == 0 ||
		tl.atomicsExecuted == 0 || tl.atomicsOK == 0 || tl.atomicsFailed == 0 || tl.overruns == 0) {
		t.Fatalf("the campaign did not exercise failover fully: %+v", tl)
	}
}

// TestPurgeWaitsForRecords pins cross-NIC schedule 3917 (mailboxes,
// retry_cnt 7, local ACK timeout 20: 4.3 s): a side writes a record to
// its peer's mailbox and, its queues home, purges its backup before the
// record was acknowledged (records are unsignaled). The HCA's
// retransmission of it, already in the fabric, wrote the peer's inbox
// after the purge: a request of the backup's earlier incarnation that
// executed. The purge now waits for a fence behind the records.
func TestPurgeWaitsForRecords(t *testing.T) {
	var tl tally
	if desc, err := schedule(t, 3917, &tl); err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	if tl.switchBacks == 0 {
		t.Fatal("no switch back: the schedule no longer reaches the purge")
	}
}
