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
