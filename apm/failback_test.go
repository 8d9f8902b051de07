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

// flapTwice flaps node0's port 1 twice, 140 ms apart, under traffic
// both ways, and returns the two ends and their traffic 150 ms after
// the second repair, by when a failback without damping is done.
func flapTwice(t *testing.T, damping pathsel.DampingConfig) (w *world, a, b *end, ab, ba *traffic) {
	w = newWorld(t, dualPort, apm.Config{FailbackHold: 20 * time.Millisecond, ProbeInterval: 10 * time.Millisecond, Damping: damping})
	a, b = w.pair("mlx5_0", rcOpts{})
	ab, ba = &traffic{a: a, b: b}, &traffic{a: b, b: a}
	w.both(ab, ba, 5*time.Millisecond)
	p1 := w.nodes[0].host.HCA("mlx5_0").Port(1)
	must(t, w.f.SetLink(p1, false))
	w.both(ab, ba, 40*time.Millisecond)
	must(t, w.f.SetLink(p1, true))
	w.both(ab, ba, 100*time.Millisecond)
	if a.port(t) != 1 || b.port(t) != 1 {
		t.Fatalf("not home after the first flap: %+v %+v", a.state(t), b.state(t))
	}
	must(t, w.f.SetLink(p1, false))
	w.both(ab, ba, 40*time.Millisecond)
	must(t, w.f.SetLink(p1, true))
	w.both(ab, ba, 150*time.Millisecond)
	return w, a, b, ab, ba
}

// TestFailbackDampedAfterFlaps: a port that flaps twice within a
// half-life keeps the QPs off it until its penalty decays below reuse,
// on both ends: node0 by its port's PORT_ERRs, node1, whose port never
// failed, by its QP's home path, which it left twice following node0.
// Then both come home, and the application saw no error. Without
// damping both are home 150 ms after the second repair.
func TestFailbackDampedAfterFlaps(t *testing.T) {
	// a penalty of 1000·2^(-0.7) + 1000 = 1616 at the second flap: held
	// 200 ms · log2(1616/750) = 221 ms
	damping := pathsel.DampingConfig{HalfLife: 200 * time.Millisecond, MaxSuppress: 2 * time.Second}
	w, a, b, ab, ba := flapTwice(t, damping)
	if a.port(t) != 2 || b.port(t) != 2 {
		t.Fatalf("failed back onto a port that flapped twice: %+v %+v", a.state(t), b.state(t))
	}
	for _, e := range []*end{a, b} {
		if s := e.state(t); s.DampedUntil-w.f.Now() <= 0 || s.DampedUntil-w.f.Now() > 221*time.Millisecond {
			t.Fatalf("%s: held for %v more, want (0, 221 ms]", e.n.host.Name(), s.DampedUntil-w.f.Now())
		}
		if n := e.n.mgr.Stats().FailbacksDamped; n != 1 {
			t.Fatalf("%s: %d failbacks damped, want 1 (counted once)", e.n.host.Name(), n)
		}
	}
	pd := w.nodes[0].mgr.PortDamping()
	if len(pd) != 1 || pd[0].Key != (pathsel.PortKey{Device: "mlx5_0", Port: 1}) || !pd[0].Suppressed || pd[0].Flaps != 2 {
		t.Fatalf("node0's port damping %+v, want mlx5_0:1 suppressed after 2 flaps", pd)
	}
	if pd := w.nodes[1].mgr.PortDamping(); len(pd) != 0 {
		t.Fatalf("node1's ports never went down: %+v", pd)
	}
	w.both(ab, ba, 100*time.Millisecond)
	if a.port(t) != 1 || b.port(t) != 1 {
		t.Fatalf("not home once the penalty decayed: %+v %+v", a.state(t), b.state(t))
	}
	if s := a.state(t); s.DampedUntil != 0 {
		t.Fatalf("home and still damped: %+v", s)
	}
	if len(ab.errs)+len(ba.errs) != 0 || ab.ok == 0 || ba.ok == 0 {
		t.Fatalf("errors %+v %+v, %d and %d WRITEs", ab.errs, ba.errs, ab.ok, ba.ok)
	}

	_, a, b, _, _ = flapTwice(t, pathsel.DampingConfig{Off: true})
	if a.port(t) != 1 || b.port(t) != 1 {
		t.Fatalf("without damping, not home 150 ms after the second flap: %+v %+v", a.state(t), b.state(t))
	}
}

// TestFlapDampingFigures: a cable that flaps five times, 500 ms apart
// (down 40 ms each, up long enough for a failback), under traffic both
// ways, with the default damping and without. Without, every flap moves
// the traffic away and back (through the LMC alternate: three
// migrations) and fails back; with it, the first flap does, the second
// moves it away for good, the last three move nothing, and it comes
// home once, when the penalty has decayed. The figures (docs/
// PERFORMANCE.md, "Flap damping") are logged:
// go test ./apm -run TestFlapDampingFigures -v
func TestFlapDampingFigures(t *testing.T) {
	const flaps = 5
	type result struct {
		moves, failbacks int
		home             time.Duration
	}
	run := func(damping pathsel.DampingConfig) result {
		w := newWorld(t, dualPort, apm.Config{Damping: damping})
		a, b := w.pair("mlx5_0", rcOpts{})
		ab, ba := &traffic{a: a, b: b}, &traffic{a: b, b: a}
		w.both(ab, ba, 5*time.Millisecond)
		p1 := w.nodes[0].host.HCA("mlx5_0").Port(1)
		var last time.Duration
		for range flaps {
			must(t, w.f.SetLink(p1, false))
			w.both(ab, ba, 40*time.Millisecond)
			must(t, w.f.SetLink(p1, true))
			last = w.f.Now()
			w.both(ab, ba, 460*time.Millisecond)
		}
		// the rest without traffic, in coarser steps, until both are home
		w.step = 10 * time.Millisecond
		for a.port(t) != 1 || b.port(t) != 1 {
			if w.f.Now()-last > 400*time.Second {
				t.Fatalf("not home 400 s after the last flap: %+v %+v", a.state(t), b.state(t))
			}
			w.run(100 * time.Millisecond)
		}
		home := w.f.Now() - last
		w.step = 20 * time.Microsecond
		w.both(ab, ba, 5*time.Millisecond)
		if len(ab.errs)+len(ba.errs) != 0 || ab.ok == 0 || ba.ok == 0 {
			t.Fatalf("errors %+v %+v, %d and %d WRITEs", ab.errs, ba.errs, ab.ok, ba.ok)
		}
		st := w.nodes[0].mgr.Stats()
		return result{st.Migrations + st.HWMigrations, st.Failbacks, home}
	}
	on, off := run(pathsel.DampingConfig{}), run(pathsel.DampingConfig{Off: true})
	t.Logf("%d flaps 500 ms apart: with damping, %d migrations (%.1f a flap), %d failbacks, home %.1f s after the last flap; "+
		"without, %d migrations (%.1f a flap), %d failbacks, home %.1f s after",
		flaps, on.moves, float64(on.moves)/flaps, on.failbacks, on.home.Seconds(),
		off.moves, float64(off.moves)/flaps, off.failbacks, off.home.Seconds())
	if off.failbacks != flaps || on.failbacks != 2 || 2*on.moves > off.moves {
		t.Fatalf("failbacks %d with damping (want 2: after the first flap and at the end), %d without (want %d); migrations %d and %d",
			on.failbacks, off.failbacks, flaps, on.moves, off.moves)
	}
	// 5 flaps 500 ms apart: 1000·(1 + 2^(-0.5/30) + ... + 2^(-2/30)) =
	// 4886, reused 30 s · log2(4886/750) = 81.1 s after the last
	if on.home < 81*time.Second || on.home > 83*time.Second || off.home > 3*time.Second {
		t.Fatalf("home %v after the last flap with damping (want 81.1 s and the failback's own time), %v without", on.home, off.home)
	}
}
