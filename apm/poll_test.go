package apm_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// TestMigrationPollReArmsWithoutEvents: node0 never sees its QP events.
// The peer's primary cable is pulled (nothing happens on node0's ports),
// node0's HCA migrates by itself after its RC retries, and the migration
// poll notices, waits for the peer and re-arms, as PATH_MIG would have.
func TestMigrationPollReArmsWithoutEvents(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{MigrationPoll: 5 * time.Millisecond})
	w.nodes[0].qpDeaf = true
	a, b := w.pair("mlx5_0", rcOpts{})
	w.run(11 * time.Millisecond)
	if s := a.state(t); s.State != fsm.APMArmed {
		t.Fatalf("before the fault: %+v, want armed", s)
	}
	tr := &traffic{a: a, b: b}
	must(t, w.f.SetLink(w.nodes[1].host.HCA("mlx5_0").Port(1), false))
	w.runTraffic(tr, 150*time.Millisecond, 100*time.Microsecond)
	w.run(20 * time.Millisecond)
	tr.poll(t)
	if !slices.Contains(a.n.events, verbs.EventPathMig) {
		t.Fatalf("node0 events %v: the HCA did not migrate by itself", a.n.events)
	}
	st := a.n.mgr.Stats()
	if st.HWMigrations != 1 || st.PolledMigrations != 1 {
		t.Fatalf("stats %+v: want the one hardware migration found by the poll", st)
	}
	s := a.state(t)
	if s.State != fsm.APMArmed || s.Primary.Port != 2 || !s.HasAlt || s.Migrations != 1 {
		t.Fatalf("after the peer's cable pull: %+v, want re-armed on port 2 (LMC alternate: the peer's port 1 is down)", s)
	}
	if len(tr.errs) != 0 || tr.ok != tr.posted {
		t.Fatalf("traffic: %d of %d ok, errors %+v", tr.ok, tr.posted, tr.errs)
	}
}

// TestMigrationPollFindsAnErroredQP: with no event read, a QP that went
// to ERR is handed over by the poll.
func TestMigrationPollFindsAnErroredQP(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{MigrationPoll: 5 * time.Millisecond})
	w.nodes[0].qpDeaf = true
	a, _ := w.pair("mlx5_0", rcOpts{})
	w.run(11 * time.Millisecond)
	// Behind the manager's back, as a fatal QP error would.
	must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState))
	w.run(6 * time.Millisecond)
	if s := a.state(t); s.State != fsm.APMHandedOver || s.Reason != "QP is in ERR" {
		t.Fatalf("%+v, want handed over by the poll", s)
	}
	if len(a.n.ho.got) != 1 {
		t.Fatalf("handovers %q", a.n.ho.got)
	}
}

// TestMigrationPollBacksOff: an ARMED QP on which nothing happens is
// queried ever more rarely, down to once per MigrationPollMax (10 s): at
// most 0.1 queries per QP per second once settled, where a fixed 100 ms
// period made 10. A port or device event on its device starts the period
// over: the next query follows within MigrationPoll. A migration nobody
// reported is then found within MigrationPollMax.
func TestMigrationPollBacksOff(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{})
	w.nodes[0].qpDeaf = true
	var ends []*end
	for i := 0; i < 4; i++ {
		a, _ := w.pair("mlx5_0", rcOpts{})
		ends = append(ends, a)
	}
	w.run(11 * time.Millisecond)
	for _, a := range ends {
		if s := a.state(t); s.State != fsm.APMArmed {
			t.Fatalf("%+v, want armed", s)
		}
	}
	w.step = 5 * time.Millisecond
	mgr := w.nodes[0].mgr
	w.run(30 * time.Second)
	before := mgr.Stats().MigrationPolls
	w.run(60 * time.Second)
	polls := mgr.Stats().MigrationPolls - before
	rate := float64(polls) / float64(len(ends)) / 60
	t.Logf("settled: %d migration polls of %d armed QPs in 60 s: %.3f per QP per second", polls, len(ends), rate)
	if rate > 0.1+1e-9 {
		t.Fatalf("%.3f migration polls per armed QP per second once settled, want at most 0.1", rate)
	}
	if polls == 0 {
		t.Fatal("no migration poll at all in 60 s")
	}
	// A port event on the device: the QPs are looked at again soon.
	before = mgr.Stats().MigrationPolls
	mgr.HandleEvent(ends[0].ctx, verbs.AsyncEvent{Type: verbs.EventSMChange, Port: 1})
	w.run(110 * time.Millisecond)
	if got := mgr.Stats().MigrationPolls - before; got < len(ends) {
		t.Fatalf("%d migration polls within 110 ms of a port event, want one per armed QP (%d)", got, len(ends))
	}
}

// idleRearmed returns a world's node0 end whose QP was migrated by hand
// and re-armed with nothing flowing on it: it stays in REARM (the HCA arms
// it with the first packet from the peer).
func idleRearmed(t *testing.T, cfg apm.Config) (*world, *end) {
	t.Helper()
	w := newWorld(t, dualPort, cfg)
	a, _ := w.pair("mlx5_0", rcOpts{})
	w.run(11 * time.Millisecond)
	must(t, a.n.mgr.Migrate(a.qp))
	w.step = 5 * time.Millisecond
	w.run(time.Second)
	if s := a.state(t); s.State != fsm.APMRearming {
		t.Fatalf("%+v, want re-armed and idle in REARM", s)
	}
	return w, a
}

// rearmPollRate is the ARMED polls a second of a's manager over d of
// virtual time.
func rearmPollRate(w *world, a *end, d time.Duration) float64 {
	before := a.n.mgr.Stats().RearmPolls
	w.run(d)
	return float64(a.n.mgr.Stats().RearmPolls-before) / d.Seconds()
}

// TestRearmPollBacksOff: a QP re-armed after a migration stays in REARM
// while nothing flows on it. With Config.RearmIdle its ARMED poll runs
// every PollMax (10 ms) for RearmIdle after the load, then backs off to
// MigrationPollMax: about 0.1 queries a second once settled, where the
// same QP without RearmIdle is queried 100 times a second. Traffic (the
// data path moved) brings the poll back to PollMax for RearmIdle, and a
// port event on the device polls it again at once.
func TestRearmPollBacksOff(t *testing.T) {
	w0, a0 := idleRearmed(t, apm.Config{})
	fixed := rearmPollRate(w0, a0, 10*time.Second)
	w, a := idleRearmed(t, apm.Config{RearmIdle: time.Second})
	mgr := a.n.mgr
	w.run(30 * time.Second)
	if !mgr.IdleInRearm(a.qp) {
		t.Fatal("an idle QP 30 s in REARM is not reported idle")
	}
	settled := rearmPollRate(w, a, 60*time.Second)
	t.Logf("ARMED polls a second of an idle QP in REARM: %.3f with RearmIdle 1 s once settled, %.1f without", settled, fixed)
	if fixed < 90 {
		t.Fatalf("%.1f ARMED polls a second without RearmIdle, want one every PollMax", fixed)
	}
	if settled > 0.2 || settled == 0 {
		t.Fatalf("%.3f ARMED polls a second of an idle QP in REARM once settled, want some and at most 0.2", settled)
	}
	// the data path moved: every PollMax again, for RearmIdle
	mgr.Traffic(a.qp)
	if mgr.IdleInRearm(a.qp) {
		t.Fatal("still idle right after Traffic")
	}
	if got := rearmPollRate(w, a, 500*time.Millisecond); got < 90 {
		t.Fatalf("%.1f ARMED polls a second in the 500 ms after Traffic, want one every PollMax", got)
	}
	w.run(10 * time.Second)
	if got := rearmPollRate(w, a, 30*time.Second); got > 0.2 {
		t.Fatalf("%.3f ARMED polls a second once idle again, want at most 0.2", got)
	}
	before := mgr.Stats().RearmPolls
	mgr.HandleEvent(a.ctx, verbs.AsyncEvent{Type: verbs.EventSMChange, Port: 1})
	w.run(20 * time.Millisecond)
	if got := mgr.Stats().RearmPolls - before; got < 2 {
		t.Fatalf("%d ARMED polls within 20 ms of a port event, want it polled again at once", got)
	}
}
