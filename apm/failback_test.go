package apm_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// both runs the world for d with traffic both ways.
func (w *world) both(ab, ba *traffic, d time.Duration) {
	end := w.f.Now() + d
	for w.f.Now() < end {
		for _, tr := range []*traffic{ab, ba} {
			if tr.posted-tr.ok-len(tr.errs) < 256 {
				tr.post(w.t, 1)
			}
		}
		w.run(100 * time.Microsecond)
		ab.poll(w.t)
		ba.poll(w.t)
	}
}

// TestFailbackHeldWhileHomeIsDead: the peer's adapter was described with
// its port up (a cached description, as the shim's are for seconds) when
// the home path was armed; by the hold-down's end it is down. The QP does
// not fail back onto the dead path: it waits another hold-down, and again,
// while the path's far port is down.
func TestFailbackHeldWhileHomeIsDead(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{FailbackHold: 20 * time.Millisecond, ProbeInterval: 10 * time.Millisecond})
	a, b := w.pair("mlx5_0", rcOpts{})
	ab, ba := &traffic{a: a, b: b}, &traffic{a: b, b: a}
	w.both(ab, ba, 5*time.Millisecond)
	stale := func(h pathsel.HCA) pathsel.HCA { // a's port 1 as it was before its cable went
		if h.GUID != a.ctx.Device().GUID {
			return h
		}
		h.Ports = slices.Clone(h.Ports)
		for i := range h.Ports {
			h.Ports[i].State = verbs.PortActive
		}
		return h
	}
	w.view = stale
	p1 := w.nodes[0].host.HCA("mlx5_0").Port(1)
	must(t, w.f.SetLink(p1, false))
	w.both(ab, ba, 15*time.Millisecond)
	if s := b.state(t); b.port(t) != 2 || !s.HasAlt || s.Alternate.Port != 1 {
		t.Fatalf("b should run on port 2 with home armed from the stale description: %+v", s)
	}
	w.view = nil // descriptions fresh again before the hold-down ends
	w.both(ab, ba, 200*time.Millisecond)
	if b.port(t) != 2 || len(ab.errs)+len(ba.errs) != 0 {
		t.Fatalf("b failed back onto a dead path: port %d, errors %+v %+v, state %+v", b.port(t), ab.errs, ba.errs, b.state(t))
	}
	if b.n.mgr.Stats().FailbacksHeld == 0 {
		t.Fatal("no failback held")
	}
	// (After the repair both ends must re-arm their home paths before
	// either fails back; docs/APM.md, "Limits": the ends' failbacks are
	// not coordinated.)
}
