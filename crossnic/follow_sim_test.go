package crossnic_test

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs/sim"
)

// switchTimes runs w in 5 µs steps (traffic both ways) for d and returns
// when each node's sends came home (0: they did not) and when its
// receives did.
func switchTimes(w *world, d time.Duration) (sq, rq [2]time.Duration) {
	for end := w.f.Now() + d; w.f.Now() < end; {
		w.run(5*time.Microsecond, 0, 1)
		for i, n := range w.n {
			s, r := n.conn.State()
			if sq[i] == 0 && s == fsm.SQDefault {
				sq[i] = w.f.Now()
			}
			if rq[i] == 0 && r == fsm.RQDefault {
				rq[i] = w.f.Now()
			}
		}
	}
	return sq, rq
}

// TestFollowerSwitchesAfterLeader: after a cable pull both ends' probes
// are answered; the leader (the lower PSN announced at the handshake)
// brings its sends home at once, the follower holds its own on the
// backup until the leader's switch-back notification arrives and
// switches right then, so that the window in which only one direction
// is home (a second fault there cannot fail over: docs/CROSSNIC.md,
// "Limits") is a round trip and a fence, not the two ends' probe phases
// apart. Everything is delivered once, in order.
func TestFollowerSwitchesAfterLeader(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 53, p)
		a := w.n[0]
		w.run(300*time.Microsecond, 0, 1)
		must(t, w.f.SetLink(a.hca.Port(1), false))
		w.run(5*time.Millisecond, 0, 1)
		must(t, w.f.SetLink(a.hca.Port(1), true))
		sq, rq := switchTimes(w, 40*time.Millisecond)
		lead := 0
		if w.n[1].conn.Stats().FollowHolds == 0 {
			lead = 1
		}
		fol := 1 - lead
		if h := w.n[lead].conn.Stats().FollowHolds; h != 0 || w.n[fol].conn.Stats().FollowHolds == 0 {
			t.Fatalf("follow holds %d and %d: want one end holding, the other not", w.n[0].conn.Stats().FollowHolds, w.n[1].conn.Stats().FollowHolds)
		}
		if sq[lead] == 0 || sq[fol] == 0 {
			t.Fatalf("sends home at %v and %v: want both", sq[0], sq[1])
		}
		// The follower switches when the leader's notification brings
		// its receives home: its sends come home a fence after that.
		if sq[fol] < rq[fol] || sq[fol]-rq[fol] > time.Millisecond {
			t.Fatalf("%s's receives home at %v, its sends at %v: want them right after", w.n[fol].name, rq[fol], sq[fol])
		}
		w.run(20*time.Millisecond, 0, 1)
		if err := w.delivered(0, 1); err != nil {
			t.Fatal(err)
		}
		for _, n := range w.n {
			if !n.conn.Home() {
				t.Fatalf("%s not home: %s", n.name, n.conn.AwayReason())
			}
		}
	})
}

// TestFollowerSwitchesAloneWhenLeaderLate: the leader's switch-back
// notification is held in the fabric (its QP resends it only at its local
// ACK timeout, 67 ms at timeout 14): the follower waits four
// ProbeIntervals for it, then brings its sends home alone.
func TestFollowerSwitchesAloneWhenLeaderLate(t *testing.T) {
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 59}, retry: 3, timeout: 14})
	a := w.n[0]
	w.run(300*time.Microsecond, 0, 1)
	must(t, w.f.SetLink(a.hca.Port(1), false))
	w.run(5*time.Millisecond, 0, 1)
	must(t, w.f.SetLink(a.hca.Port(1), true))
	lead := -1
	for k := 0; k < 20000 && lead < 0; k++ {
		w.run(5*time.Microsecond, 0, 1)
		for i, n := range w.n {
			if s, _ := n.conn.State(); s == fsm.SQWaitSignaled || s == fsm.SQWaitDrained {
				lead = i
			}
		}
	}
	if lead < 0 {
		t.Fatal("no end started its switch back")
	}
	// the leader's next request on its default QP is its notification
	must(t, w.f.HoldNext(w.n[lead].def.qp, w.f.Now()+200*time.Millisecond))
	fol := 1 - lead
	sq, rq := switchTimes(w, 30*time.Millisecond)
	if sq[fol] == 0 || rq[fol] != 0 {
		t.Fatalf("%s: sends home at %v, receives at %v: want it home alone, the leader's notification held", w.n[fol].name, sq[fol], rq[fol])
	}
	if h := w.n[fol].conn.Stats().FollowHolds; h < 2 {
		t.Fatalf("%s held %d times: want it to have waited", w.n[fol].name, h)
	}
	w.run(300*time.Millisecond, 0, 1)
	w.run(20 * time.Millisecond)
	if err := w.delivered(0, 1); err != nil {
		t.Fatal(err)
	}
	for _, n := range w.n {
		if !n.conn.Home() {
			t.Fatalf("%s not home: %s", n.name, n.conn.AwayReason())
		}
	}
}
