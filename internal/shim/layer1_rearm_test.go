package shim

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/fsm"
)

// TestIdleRearmWatched: a connected pair with nothing flowing stays in
// REARM (the HCA arms a QP with the first packet from its peer). Past
// RearmIdle the manager polls it ever more rarely (here up to 3 s), and
// layer 1 reads its shadow rings instead: once traffic starts, the sends'
// progress brings the poll back, and ARMED is seen within a few hundred
// ms, where the backed-off poll alone would come only after more than a
// second.
func TestIdleRearmWatched(t *testing.T) {
	cfg := l1Config
	cfg.RearmIdle = 20 * time.Millisecond
	cfg.MigrationPollMax = 3 * time.Second
	o := l1ProcOpts{progress: true, apm: &cfg}
	w := newL1World(t, o, o)
	a, b := w.pair()
	tr := &l1Traffic{t: t, pairs: [][2]*l1End{{a, b}}}
	p := a.p.l1
	time.Sleep(1300 * time.Millisecond)
	if !a.is(fsm.APMRearming.String(), "") {
		t.Fatalf("%v: want REARM with nothing flowing", a)
	}
	p.mu.Lock()
	idle, polls := p.mgr.IdleInRearm(a.qp), p.mgr.Stats().RearmPolls
	p.mu.Unlock()
	if !idle {
		t.Fatalf("%v: not polled as idle after 1.3 s in REARM", a)
	}
	// the poll backed off: from PollMin to PollMax (about a dozen
	// queries), then 20, 40, ... 640 ms: some twenty since the load,
	// where PollMax alone would have made 130
	if polls > 40 {
		t.Fatalf("%d ARMED polls in 1.3 s of an idle QP in REARM, want the poll backed off", polls)
	}
	start := time.Now()
	tr.run("A's QP armed once traffic flows", func() bool { return a.is(fsm.APMArmed.String(), "") })
	took := time.Since(start)
	tr.drain()
	p.mu.Lock()
	moved := p.rearmTraffic
	p.mu.Unlock()
	t.Logf("ARMED seen %v after the traffic started (%d ARMED polls while idle, %d QPs seen moving)", took, polls, moved)
	// A backed-off poll can fall right after the traffic started (some
	// 1.5 % of runs: every 640 ms, ARMED within 10 ms) and see ARMED
	// before the first watch; past one watch period the watch must have
	// seen the sends move.
	if moved == 0 && took >= rearmWatchEvery {
		t.Fatalf("ARMED seen %v after the traffic started and layer 1 never saw the idle QP's sends move", took)
	}
	if took > 700*time.Millisecond {
		t.Fatalf("ARMED seen %v after the traffic started, want within a few watch periods", took)
	}
}
