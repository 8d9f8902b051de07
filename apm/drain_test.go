package apm_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// drainView shows port of the adapter with GUID guid DOWN to the peers,
// as the drained node's ibpathd describes it.
func drainView(guid uint64, port uint8) func(pathsel.HCA) pathsel.HCA {
	return func(h pathsel.HCA) pathsel.HCA {
		if h.GUID != guid {
			return h
		}
		h.Ports = slices.Clone(h.Ports)
		for i := range h.Ports {
			if h.Ports[i].Num == port {
				h.Ports[i].State = verbs.PortDown
			}
		}
		return h
	}
}

// A drained port carries no traffic however long it stays up, through a
// flap, and until it is undrained: then the QPs fail back to it.
func TestDrainKeepsTrafficOffThePort(t *testing.T) {
	for _, prof := range sim.Profiles {
		t.Run(string(prof), func(t *testing.T) {
			w := newWorld(t, withProfile(dualPort, prof), apm.Config{FailbackHold: 20 * time.Millisecond, ProbeInterval: 10 * time.Millisecond})
			a, b := w.pair("mlx5_0", rcOpts{})
			tr := &traffic{a: a, b: b}
			w.runTraffic(tr, 5*time.Millisecond, 50*time.Microsecond)
			if a.state(t).State != fsm.APMArmed {
				t.Fatalf("not armed before the drain: %+v", a.state(t))
			}
			hca := w.nodes[0].host.HCA("mlx5_0")
			w.view = drainView(w.nodes[0].byDev["mlx5_0"].Device().GUID, 1)
			if n := a.n.mgr.Drain("mlx5_0", 1); n != 1 {
				t.Fatalf("drain asked %d QPs to move, want 1", n)
			}
			if got := a.n.mgr.Drained(); !slices.Equal(got, []string{"mlx5_0:1"}) {
				t.Fatalf("drained %v", got)
			}
			w.runTraffic(tr, time.Millisecond, 50*time.Microsecond)
			if a.port(t) != 2 {
				t.Fatalf("the drain did not move the QP: %+v", a.state(t))
			}
			check := func(when string) {
				t.Helper()
				for _, e := range []*end{a, b} {
					if e.port(t) != 2 {
						t.Fatalf("%s: node %p back on port %d: %+v", when, e.n, e.port(t), e.state(t))
					}
					if s := e.state(t); s.HasAlt && s.Alternate.Port == 1 {
						t.Fatalf("%s: alternate on the drained port: %+v", when, s)
					}
				}
			}
			// Far beyond the hold-down and the peer wait: no fail-back.
			w.runTraffic(tr, 300*time.Millisecond, 100*time.Microsecond)
			check("after 300 ms")
			// The drained port flaps: its PORT_ACTIVE brings nothing back.
			p1 := hca.Port(1)
			must(t, w.f.SetLink(p1, false))
			w.runTraffic(tr, 5*time.Millisecond, 100*time.Microsecond)
			must(t, w.f.SetLink(p1, true))
			loads := a.n.mgr.Stats().Loads
			w.runTraffic(tr, 200*time.Millisecond, 100*time.Microsecond)
			check("after a flap")
			// The machine still holds the port down: it does not look for
			// the home path at every probe.
			if n := a.n.mgr.Stats().Loads - loads; n > 1 {
				t.Fatalf("%d alternates loaded after the drained port's PORT_ACTIVE", n)
			}
			if len(tr.errs) != 0 {
				t.Fatalf("errors while drained: %+v", tr.errs)
			}
			w.view = nil
			if !a.n.mgr.Undrain("mlx5_0", 1) || a.n.mgr.Undrain("mlx5_0", 1) {
				t.Fatal("undrain: want true, then false")
			}
			w.runTraffic(tr, 300*time.Millisecond, 100*time.Microsecond)
			if a.port(t) != 1 {
				t.Fatalf("not home after the undrain: %+v", a.state(t))
			}
			if len(tr.errs) != 0 || tr.ok < 1000 {
				t.Fatalf("traffic: %d ok, errors %+v", tr.ok, tr.errs)
			}
		})
	}
}

// A QP with no alternate off the drained port (its alternate is an LMC
// path of the same port) is handed to the next layer, with a reason that
// names the drain.
func TestDrainHandsOverWhatCannotLeave(t *testing.T) {
	spec := sim.RailSpec{Config: sim.Config{Seed: 1}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1, LMC: 1}
	w := newWorld(t, spec, apm.Config{})
	a, b := w.pair("mlx5_0", rcOpts{})
	w.runTraffic(&traffic{a: a, b: b}, 5*time.Millisecond, 50*time.Microsecond)
	if s := a.state(t); s.State != fsm.APMArmed || s.Alternate.Port != 1 {
		t.Fatalf("want armed on the LMC path: %+v", s)
	}
	a.n.mgr.Drain("mlx5_0", 1)
	if len(a.n.ho.got) != 1 || !strings.Contains(a.n.ho.got[0], "port mlx5_0:1 is drained") {
		t.Fatalf("hand-overs %q, want one naming the drain", a.n.ho.got)
	}
	if s := a.state(t); s.State != fsm.APMHandedOver {
		t.Fatalf("state %+v, want handed over", s)
	}
}

// A QP connected on a drained port leaves it once it is armed.
func TestDrainNewQPLeaves(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{})
	w.nodes[0].mgr.Drain("mlx5_0", 1)
	a, b := w.open(0, "mlx5_0"), w.open(1, "mlx5_0")
	w.view = drainView(a.ctx.Device().GUID, 1)
	w.connect(a, b, rcOpts{})
	w.connect(b, a, rcOpts{})
	w.ping(a, b)
	tr := &traffic{a: a, b: b}
	w.runTraffic(tr, 20*time.Millisecond, 50*time.Microsecond)
	if a.port(t) != 2 {
		t.Fatalf("a QP created on the drained port stayed there: %+v", a.state(t))
	}
	if len(tr.errs) != 0 || tr.ok == 0 {
		t.Fatalf("traffic: %d ok, errors %+v", tr.ok, tr.errs)
	}
}
