package sim_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

var simRuns = flag.Int("sim.runs", 300, "schedules in TestRandomFaultScheduleInvariants")
var simSeed = flag.Uint64("sim.seed", 0, "run only this schedule seed (0: all)")
var simProfile = flag.String("sim.profile", "", "run every schedule on this profile (default: spread over all)")

// workload is a seeded fault schedule over a two-QP connection with APM
// armed: random loss, flaps of either port, a possible HCA death, and a
// stream of mixed WRs. It returns the trace and what the requester saw.
type workload struct {
	profile  sim.Profile
	trace    []string
	posted   []uint64 // wr_ids posted, in order
	signaled map[uint64]bool
	ops      map[uint64]verbs.WROpcode
	stats    sim.Stats
	wcs      []verbs.WC
	rwcs     []verbs.WC
	// reqDied: the requester's HCA died (on a profile without fatal
	// flushes its outstanding WRs never complete).
	reqDied bool
	// respDied with respCQEDelay: the responder may have acknowledged
	// messages whose receive CQEs it never wrote.
	respDied, respCQEDelay bool
	// reqOverrun, respOverrun: that side's CQ overran and lost the
	// completions after it.
	reqOverrun, respOverrun bool
	// src and got: the bytes each SEND carried, and the bytes each
	// receive buffer (by receive wr_id) holds at the end.
	src map[uint64][]byte
	got func(recv uint64) []byte
}

// recvOff is where receive k lands in the responder's buffer: past every
// WRITE and READ target, one 64-byte slot each. SENDs come from
// sendOff(i) in the requester's buffer, which nothing writes.
func recvOff(k int) int { return 32768 + k*64 }
func sendOff(i int) int { return 40000 + i*64%20000 }

// scheduleProfile spreads the campaign's seeds over every profile, or
// gives the one -sim.profile names.
func scheduleProfile(seed uint64) sim.Profile {
	if *simProfile != "" {
		return sim.Profile(*simProfile)
	}
	return sim.Profiles[seed%uint64(len(sim.Profiles))]
}

func runSchedule(t testing.TB, seed uint64) workload {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	prof := scheduleProfile(seed)
	var late time.Duration
	if rng.IntN(3) == 0 {
		late = time.Duration(rng.IntN(2000)) * time.Microsecond
	}
	o := connOpts{spec: sim.RailSpec{Config: sim.Config{Seed: seed, Profile: prof, TimerLate: late}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 2, LMC: 1}}
	settle := 3 * time.Second
	if rng.IntN(6) == 0 { // the longest timers: retry_cnt 7, timeout 20 (4.3 s)
		o.retry, o.timeout = 7, 20
		settle = 60 * time.Second
	}
	if rng.IntN(5) == 0 { // receives come late: RNR NAKs, rnr_retry 0..7
		o.rnrRetry, o.minRNR = uint8(rng.IntN(8)), uint8(1+rng.IntN(5))
	}
	if rng.IntN(8) == 0 { // CQs that can overrun
		o.cqe = 48 + rng.IntN(128)
	}
	if rng.IntN(4) == 0 { // PSNs that wrap past 0xffffff during the schedule
		o.psn = 0xffffff - uint32(rng.IntN(200))
	}
	c := newConn(t, o)
	w := workload{profile: prof, signaled: map[uint64]bool{}, ops: map[uint64]verbs.WROpcode{}, src: map[uint64][]byte{}}
	for i := range c.a.buf {
		c.a.buf[i] = byte(i*7 + 1)
	}
	c.f.SetTracer(func(r sim.TraceRecord) { w.trace = append(w.trace, r.String()) })
	armBoth(t, c)
	must(t, c.f.SetLoss(c.a.hca.Port(1), rng.Float64()*0.05, rng.Float64()*0.05))
	must(t, c.f.SetLoss(c.b.hca.Port(2), rng.Float64()*0.05, rng.Float64()*0.05))
	ports := []*sim.Port{c.a.hca.Port(1), c.a.hca.Port(2), c.b.hca.Port(1), c.b.hca.Port(2)}
	for k := rng.IntN(3); k > 0; k-- {
		p := ports[rng.IntN(len(ports))]
		start := c.f.Now() + time.Duration(rng.IntN(20))*time.Millisecond
		must(t, c.f.Flap(p, start, time.Duration(1+rng.IntN(30))*time.Millisecond, 60*time.Millisecond, 1+rng.IntN(2)))
	}
	if rng.IntN(3) == 0 { // late and reordered packets
		must(t, c.f.SetDelay(ports[rng.IntN(len(ports))], time.Duration(1+rng.IntN(30))*time.Microsecond))
	}
	if rng.IntN(4) == 0 { // CQEs written late: an HCA may die having ACKed
		must(t, c.f.SetCQEDelay(c.b.hca, time.Duration(1+rng.IntN(20))*time.Microsecond))
		w.respCQEDelay = true
	}
	switch rng.IntN(8) { // a switch dies for a while
	case 0:
		leaf := c.a.hca.Port(uint8(1 + rng.IntN(2))).Leaf()
		at := c.f.Now() + time.Duration(rng.IntN(30))*time.Millisecond
		c.f.At(at, func() { _ = c.f.FailSwitch(leaf) })
		c.f.At(at+time.Duration(1+rng.IntN(50))*time.Millisecond, func() { _ = c.f.ReviveSwitch(leaf) })
	case 1:
		spine := c.f.Spine(rng.IntN(2))
		at := c.f.Now() + time.Duration(rng.IntN(30))*time.Millisecond
		c.f.At(at, func() { _ = c.f.FailSwitch(spine) })
		c.f.At(at+time.Duration(1+rng.IntN(50))*time.Millisecond, func() { _ = c.f.ReviveSwitch(spine) })
	}
	if rng.IntN(4) == 0 {
		victim := []*sim.HCA{c.a.hca, c.b.hca}[rng.IntN(2)]
		w.reqDied = victim == c.a.hca
		w.respDied = victim == c.b.hca
		c.f.At(c.f.Now()+time.Duration(rng.IntN(40))*time.Millisecond, func() { _ = c.f.KillHCA(victim) })
	}
	early := 300
	if o.rnrRetry != 7 || o.minRNR > 1 {
		early = rng.IntN(100) // the rest are posted after the sends
	}
	postRecvs := func(from, to int) {
		for i := from; i < to; i++ {
			c.b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{c.b.sge(recvOff(i), 64)}}})
		}
	}
	postRecvs(0, early)
	for i := 0; i < 150; i++ {
		wr := verbs.SendWR{WRID: uint64(i), SGList: []verbs.SGE{c.a.sge(i*64%30000, 64)},
			RemoteAddr: c.b.mr.Addr() + uint64(i*64%30000), RKey: c.b.mr.RKey(), ImmData: uint32(i) | 0x5a000000}
		switch rng.IntN(4) {
		case 0:
			wr.Opcode = verbs.WRSend
			wr.SGList = []verbs.SGE{c.a.sge(sendOff(i), 64)}
			if rng.IntN(3) == 0 { // the same bytes in two SGEs
				wr.SGList = []verbs.SGE{c.a.sge(sendOff(i), 24), c.a.sge(sendOff(i)+24, 40)}
			}
			w.src[wr.WRID] = slices.Clone(c.a.buf[sendOff(i) : sendOff(i)+64])
		case 1:
			wr.Opcode = verbs.WRRDMARead
		case 2:
			wr.Opcode = verbs.WRRDMAWriteWithImm
		default:
			wr.Opcode = verbs.WRRDMAWrite
		}
		w.ops[wr.WRID] = wr.Opcode
		if rng.IntN(3) > 0 {
			wr.SendFlags = verbs.SendSignaled
		}
		if (wr.Opcode == verbs.WRSend || wr.Opcode == verbs.WRRDMAWrite) && rng.IntN(4) == 0 {
			wr.SendFlags |= verbs.SendInline // copied at post time
		}
		if n, err := c.a.qp.PostSend([]verbs.SendWR{wr}); err == nil && n == 1 {
			w.posted = append(w.posted, wr.WRID)
			w.signaled[wr.WRID] = wr.SendFlags&verbs.SendSignaled != 0
		}
		c.run(time.Duration(rng.IntN(400)) * time.Microsecond)
	}
	postRecvs(early, 300)
	c.run(settle)
	w.wcs, w.reqOverrun = drain(c.a.cq)
	w.rwcs, w.respOverrun = drain(c.b.cq)
	w.stats = c.f.Stats()
	w.got = func(k uint64) []byte { return c.b.buf[recvOff(int(k)) : recvOff(int(k))+64] }
	return w
}

// drain polls cq empty; overrun reports a CQ that overran (EIO once
// drained), which lost the completions after it.
func drain(cq verbs.CQ) (out []verbs.WC, overrun bool) {
	buf := make([]verbs.WC, 64)
	for {
		n, err := cq.Poll(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, errors.Is(err, verbs.EIO)
		}
		if n == 0 {
			return out, false
		}
	}
}

func TestSameSeedSameTrace(t *testing.T) {
	a, b := runSchedule(t, 5), runSchedule(t, 5)
	if len(a.trace) < 100 {
		t.Fatalf("trace has %d records; the schedule did too little to compare", len(a.trace))
	}
	if !slices.Equal(a.trace, b.trace) {
		for i := range min(len(a.trace), len(b.trace)) {
			if a.trace[i] != b.trace[i] {
				t.Fatalf("traces diverge at record %d:\n  %s\n  %s", i, a.trace[i], b.trace[i])
			}
		}
		t.Fatalf("traces differ in length: %d vs %d", len(a.trace), len(b.trace))
	}
	if c := runSchedule(t, 6); slices.Equal(a.trace, c.trace) {
		t.Fatal("seeds 5 and 6 gave the same trace: the seed does not reach the fabric")
	}
}

// TestRandomFaultScheduleInvariants checks the transport's promises under
// random faults, on every profile: every WR gets at most one completion,
// every signaled WR and every failed WR exactly one (unless its HCA died
// on a profile that makes no flush completions), in posting order; after
// the first error only flushes follow. At the responder, each receive
// completes once, in order, and the successful ones carry, in order, the
// SENDs and WRITE_WITH_IMMs the requester posted, with their data and
// immediate.
func TestRandomFaultScheduleInvariants(t *testing.T) {
	runs := *simRuns
	if testing.Short() {
		runs = 30
	}
	if _, err := sim.ParseProfile(*simProfile); err != nil {
		t.Fatal(err)
	}
	migrated, failed := 0, 0
	for s := uint64(1); s <= uint64(runs); s++ {
		if *simSeed != 0 && s != *simSeed {
			continue
		}
		w := runSchedule(t, s)
		err := checkCompletions(w)
		if err == nil {
			err = checkResponder(w)
		}
		if err != nil {
			err = fmt.Errorf("profile %s: %w", w.profile, err)
		}
		if err != nil {
			t.Fatalf("seed %d: %v\nreproduce: go test ./verbs/sim -run TestRandomFaultScheduleInvariants -sim.seed %d", s, err, s)
		}
		if w.stats.Migrations > 0 {
			migrated++
		}
		if slices.ContainsFunc(w.wcs, func(wc verbs.WC) bool { return wc.Status != verbs.WCSuccess }) {
			failed++
		}
	}
	t.Logf("%d schedules: %d with a migration, %d with a failed QP", runs, migrated, failed)
	if *simSeed == 0 && (migrated == 0 || failed == 0 || failed == runs) {
		t.Fatalf("the campaign does not exercise both migration and failure (%d migrated, %d failed of %d)", migrated, failed, runs)
	}
}

func checkCompletions(w workload) error {
	seen := map[uint64]bool{}
	last := -1
	failed := false
	for _, wc := range w.wcs {
		if seen[wc.WRID] {
			return fmt.Errorf("wr_id %d completed twice", wc.WRID)
		}
		seen[wc.WRID] = true
		idx := slices.Index(w.posted, wc.WRID)
		if idx < 0 {
			return fmt.Errorf("completion for wr_id %d that was never posted", wc.WRID)
		}
		if idx <= last {
			return fmt.Errorf("wr_id %d completed out of order", wc.WRID)
		}
		last = idx
		if failed && wc.Status != verbs.WCWRFlushErr {
			return fmt.Errorf("wr_id %d completed %v after the QP failed", wc.WRID, wc.Status)
		}
		if wc.Status == verbs.WCSuccess && !w.signaled[wc.WRID] {
			return fmt.Errorf("unsignaled wr_id %d produced a successful completion", wc.WRID)
		}
		if wc.Status != verbs.WCSuccess {
			failed = true
		}
	}
	if w.reqOverrun || (w.reqDied && !fatalFlushes(w.profile)) {
		// The device died and makes no completions: what completed
		// before obeys the rules above; the rest never completes.
		return nil
	}
	if !failed {
		for _, id := range w.posted {
			if w.signaled[id] && !seen[id] {
				return fmt.Errorf("signaled wr_id %d never completed", id)
			}
		}
	}
	if failed {
		// Every WR after the first error must have completed (flushed).
		for _, id := range w.posted[last+1:] {
			return fmt.Errorf("wr_id %d posted but never completed after the QP failed", id)
		}
	}
	return nil
}

// fatalFlushes reports whether a dead device's QPs flush on profile p.
func fatalFlushes(p sim.Profile) bool { return p == sim.ProfileRdmavt }

// checkResponder checks the receives: each completes at most once, in
// posting order, successes before flushes; the k-th success is the k-th
// SEND or WRITE_WITH_IMM the requester posted, with its data and
// immediate; and every such WR the requester saw succeed was received.
func checkResponder(w workload) error {
	var msgs []uint64 // the requester's WRs that consume a receive, in order
	for _, id := range w.posted {
		if op := w.ops[id]; op == verbs.WRSend || op == verbs.WRRDMAWriteWithImm {
			msgs = append(msgs, id)
		}
	}
	// An HCA that died with CQEs on their way lost them: the last
	// successes before its death, never one followed by another success.
	lossy := w.respDied && w.respCQEDelay
	ok, flushed, next := 0, false, uint64(0)
	for i, wc := range w.rwcs {
		gap := lossy && wc.Status != verbs.WCSuccess && !flushed && wc.WRID > next
		if wc.WRID != next && !gap {
			return fmt.Errorf("receive completion %d is wr_id %d: receives complete once, in posting order", i, wc.WRID)
		}
		next = wc.WRID + 1
		if wc.Status != verbs.WCSuccess {
			flushed = true
			continue
		}
		if flushed {
			return fmt.Errorf("receive %d succeeded after a flush", wc.WRID)
		}
		if ok >= len(msgs) {
			return fmt.Errorf("receive %d succeeded but only %d messages were posted: a message was delivered twice", wc.WRID, len(msgs))
		}
		id := msgs[ok]
		ok++
		switch w.ops[id] {
		case verbs.WRSend:
			if wc.Opcode != verbs.WCRecv || wc.ByteLen != 64 || wc.WCFlags&verbs.WCFlagWithImm != 0 {
				return fmt.Errorf("receive %d: opcode %v len %d flags %v, want the SEND of wr_id %d", wc.WRID, wc.Opcode, wc.ByteLen, wc.WCFlags, id)
			}
			if got := w.got(wc.WRID); !slices.Equal(got, w.src[id]) {
				return fmt.Errorf("receive %d holds other bytes than the SEND of wr_id %d", wc.WRID, id)
			}
		default:
			if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.ImmData != uint32(id)|0x5a000000 {
				return fmt.Errorf("receive %d: opcode %v imm %#x, want the WRITE_WITH_IMM of wr_id %d", wc.WRID, wc.Opcode, wc.ImmData, id)
			}
		}
	}
	if w.respDied && w.respCQEDelay || w.respOverrun {
		return nil // ACKed, then the HCA died before writing the CQE
	}
	for _, wc := range w.wcs {
		if i := slices.Index(msgs, wc.WRID); wc.Status == verbs.WCSuccess && i >= ok {
			return fmt.Errorf("wr_id %d completed successfully at the requester but was not received", wc.WRID)
		}
	}
	return nil
}
