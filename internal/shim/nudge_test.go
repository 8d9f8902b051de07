package shim

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/internal/syncbuf"
	"github.com/ibpath/ibpath/verbs"
)

// Layer 1's nudge in the shim (layer1_nudge.go, the hot path's Nudger).

// nudgeTimeout is the local ACK timeout (the IBA's exponent) of the QPs
// whose recovery the nudge tests time: 268 ms, so that a resend at the
// timeout cannot pass for one at the nudge, however slow the machine.
const nudgeTimeout = 16

// lyNudgeRecovery connects node0 and node1 (layer 1 and the nudge as
// off says), lets traffic run until both layers are armed, then sends one
// message from node0 whose two requests (its WRITE and its SEND) are lost
// on the primary path, and pulls node0's port-1 cable. It returns the
// fabric's time from the pull to the message's completion, and node0.
func lyNudgeRecovery(t *testing.T, off bool) (time.Duration, *lyHost, *appQP) {
	t.Helper()
	w := newLyWorld(t)
	a, b := w.host("node0", 0, lyOpts{noNudge: off}), w.host("node1", 1, lyOpts{noNudge: off})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	lyConnectTimeout(t, qa, qb, nudgeTimeout)
	hosts := lyTrafficArmed(t, a, b, qa, qb)
	qa.total, qb.total = qa.sent, qb.sent
	lyRun(t, "the traffic so far delivered", hosts, finished(qa, qb))

	attr, _, err := qa.qp.Query(verbs.QPAttrSQPSN)
	l1Must(t, err)
	dropped := w.f.Stats().Dropped
	l1Must(t, w.f.DropRequest(qa.qp, attr.SQPSN))
	l1Must(t, w.f.DropRequest(qa.qp, (attr.SQPSN+1)&0xffffff))
	done := len(qa.sendDone)
	qa.total++
	lyRun(t, "the message's two requests lost", hosts, func() bool { return w.f.Stats().Dropped >= dropped+2 })
	if len(qa.sendDone) != done {
		t.Fatal("the message completed before the cut: its requests were not lost")
	}
	t0 := w.f.Now()
	l1Must(t, w.f.SetLink(a.hca.Port(1), false))
	lyRun(t, "the message completed after the cut", hosts, func() bool { return len(qa.sendDone) > done })
	took := w.f.Now() - t0
	// The HCA arms a QP in REARM with the peer's next packet on the
	// primary path (docs/SIMULATOR.md rule 86): traffic goes on until
	// the QP is armed, however late the runtime's REARM comes (a fixed
	// number of messages could all be delivered before it, and an idle
	// QP stays in REARM), then the traffic so far is delivered.
	qa.total, qb.total = lyForever, lyForever
	lyRun(t, "node0's QP re-armed on port 2", hosts, func() bool { return qa.l1Is("armed", "port 2") })
	qa.total, qb.total = qa.sent, qb.sent
	lyRun(t, "the traffic delivered", hosts, finished(qa, qb))
	if qa.diverted() {
		t.Fatal("layer 2 took the QP over: layer 1 protects it")
	}
	for _, wc := range qa.all {
		if wc.WRID == crossnic.NudgeWRID {
			t.Fatalf("the application saw the nudge: %+v", wc)
		}
	}
	return took, a, qa
}

// TestLayersNudgeAfterCableCut: node0's QP has a message in flight whose
// requests the primary path lost when that path's cable is pulled.
// Layer 1 migrates the QP at PORT_ERR and nudges it: the zero-length
// WRITE leaves on the new path, the peer follows and answers with a
// sequence NAK, and the HCA resends the message at once. Without the
// nudge (IBPATH_NUDGE=off) nothing reaches the peer until the local ACK
// timeout (268 ms here). The nudge takes no completion from the
// application, and layer 2 stays out.
func TestLayersNudgeAfterCableCut(t *testing.T) {
	nudged, a, _ := lyNudgeRecovery(t, false)
	plain, b, _ := lyNudgeRecovery(t, true)
	to := verbs.TimeoutDuration(nudgeTimeout)
	t.Logf("from the cable pull to the lost message's completion (local ACK timeout %v): nudged %v, not nudged %v", to, nudged, plain)
	if st := a.rt.l1.NudgeStats(); st.Posted != 1 || st.Failed != 0 {
		t.Fatalf("nudges %+v: want the one after the migration", st)
	}
	if posted, _ := a.hp.NudgeCounts(); posted != 1 {
		t.Fatalf("the hot path posted %d nudges, want 1", posted)
	}
	if st := b.rt.l1.NudgeStats(); st != (NudgeStats{}) {
		t.Fatalf("nudges with %s=off: %+v", EnvNudge, st)
	}
	if plain < to/2 {
		t.Fatalf("without the nudge the message completed %v after the cut, before half its local ACK timeout %v: "+
			"its requests were not lost", plain, to)
	}
	if nudged > to/4 {
		t.Fatalf("with the nudge the message completed %v after the cut; want well under the local ACK timeout %v", nudged, to)
	}
}

// TestNudgeFlushKeptFromApplication: a nudge is out (behind a message, a
// FETCH_ADD and a message) when node0's link goes down. Layer 2 diverts
// the QP at PORT_ERR and, with an atomic outstanding, surfaces the error:
// the default QP's flushes reach the application through the runtime,
// each of its WRs once, and the nudge's flush not at all (routeWC).
func TestNudgeFlushKeptFromApplication(t *testing.T) {
	f, hosts, qa, qb, _ := exchangeWorld(t, 34, l2opts{}, false)
	a, b := qa.x, qb.x
	if err := a.hp.Nudge(qa.fq.App()); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("nudge with nothing in flight: %v, want ENODATA", err)
	}
	before, k := len(qa.all), uint64(qa.sent)
	sendAtomicBetween(t, qa)
	if err := a.hp.Nudge(qa.fq.App()); err != nil {
		t.Fatalf("nudge with WRs in flight: %v", err)
	}
	if err := a.hp.Nudge(qa.fq.App()); !errors.Is(err, syscall.EALREADY) {
		t.Fatalf("a second nudge while the first is out: %v, want EALREADY", err)
	}
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A diverted on PORT_ERR", qa.diverted)
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) >= 5 })
	f.RunFor(time.Millisecond)
	a.poll(t)
	got := qa.all[before:]
	seen := map[uint64]int{}
	for _, wc := range got {
		seen[wc.WRID]++
		if wc.WRID == crossnic.NudgeWRID {
			t.Fatalf("the application saw the nudge's completion %+v among %+v", wc, got)
		}
	}
	for _, id := range []uint64{2 * k, 2*k + 1, 7777, 2*k + 2, 2*k + 3} { // two messages (WRITE 2k, SEND 2k+1) around the atomic
		if seen[id] != 1 {
			t.Fatalf("WR %d completed %d times after the cut: %+v", id, seen[id], got)
		}
	}
	a.rt.fo.mu.Lock()
	dropped := a.rt.fo.nudgeWCs
	a.rt.fo.mu.Unlock()
	if dropped != 1 {
		t.Fatalf("the runtime dropped %d nudge completions, want the one flush", dropped)
	}
	if _, ctr := b.counter(); ctr[0] != 0 {
		t.Fatalf("the atomic executed %d times", ctr[0])
	}
}

// TestLayer1NudgeOutcomes: layer 1 counts each nudge by what the data
// path answered (posted, nothing in flight, a reason of the QP's, a
// refusal) and logs those that leave WRs waiting for the timeout.
func TestLayer1NudgeOutcomes(t *testing.T) {
	var answers []error
	log := &syncbuf.Buffer{}
	l, err := NewLayer1(Layer1Options{Log: slog.New(slog.NewTextHandler(log, nil)),
		Nudge: func(verbs.Context, verbs.QP) error { e := answers[0]; answers = answers[1:]; return e }})
	l1Must(t, err)
	defer l.Close()
	answers = []error{nil, syscall.ENODATA, fmt.Errorf("lip_nudge: %w", syscall.EALREADY), syscall.ENOSPC,
		syscall.EBUSY, syscall.ENOENT, syscall.ENOTSUP, fmt.Errorf("lip_nudge: %w", syscall.EINVAL), nil}
	for range answers {
		l.nudge(l1Nudge{k: l1Key{"mlx5_0", 0x42}})
	}
	if st, want := l.NudgeStats(), (NudgeStats{Posted: 2, Idle: 1, Skipped: 5, Failed: 1}); st != want {
		t.Fatalf("counts %+v, want %+v", st, want)
	}
	if n := strings.Count(log.String(), "did not nudge the QP"); n != 6 {
		t.Fatalf("%d lines say a nudge was not posted, want 6 (not for nothing in flight):\n%s", n, log)
	}
}

// TestNudgeSlots: the application's RC QPs get the nudge's send slot on a
// device with an InfiniBand port while layer 1 nudges, not on RoCE, not
// with the nudge off, not without layer 1.
func TestNudgeSlots(t *testing.T) {
	ib := []Port{{Num: 1, LinkLayer: verbs.LinkLayerEthernet}, {Num: 2, LinkLayer: verbs.LinkLayerInfiniBand}}
	roce := []Port{{Num: 1, LinkLayer: verbs.LinkLayerEthernet}}
	for _, k := range []struct {
		env   map[string]string
		ports []Port
		want  bool
	}{
		{nil, ib, true},
		{nil, roce, false},
		{map[string]string{EnvNudge: "off"}, ib, false},
		{map[string]string{EnvAPM: "off"}, ib, false},
		{map[string]string{EnvSingle: "1"}, ib, false},
	} {
		cfg, err := FromEnv(env(k.env))
		l1Must(t, err)
		rt := NewRuntime(cfg, slog.New(slog.DiscardHandler))
		if got := rt.NudgeSlots(k.ports); got != k.want {
			t.Errorf("%v on %+v: %v, want %v", k.env, k.ports, got, k.want)
		}
		rt.Close()
	}
}
