package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
)

// viewsOf are the port_view commands f got for dev's port.
func (f *fakeShim) viewsOf(dev string, port uint8) []ownerproto.PortView {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ownerproto.PortView
	for _, c := range f.cmds {
		if c.Op == ownerproto.OpPortView && c.Device == dev && c.Port == port {
			out = append(out, *c.View)
		}
	}
	return out
}

// TestPortViewsTold: on the simulated fabric, the workload's traffic
// crosses node0's mlx5_0 port 1 while its links mark every packet
// congested (ECN on RoCE, credits waited for on InfiniBand). ibpathd's
// counter poll shows the congestion in the status; a process of protocol
// 2 is told nothing; one of protocol 3 that attaches is told its view of
// the port at once (the rate's band), the empty view when the marking
// stops, and the view again when it starts again. (One session per
// process: the two attach one after the other.)
func TestPortViewsTold(t *testing.T) {
	d, c := testDaemon(t, func(cfg *Config) {
		cfg.Sim.QPs = 1
		cfg.CounterPoll = 50 * time.Millisecond
		cfg.Health = "window=1s,clear=1s"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	attach := func(proto int) (*fakeShim, *ownerproto.Session) {
		f := &fakeShim{}
		h := selfHello(t)
		h.Proto = proto
		s, err := ownerproto.Dial(ctx, d.cfg.Socket, h, f.handle)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return f, s
	}
	node := func() status.Node {
		n, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	port := func() status.Port {
		for _, h := range node().HCAs {
			for _, p := range h.Ports {
				if h.Name == "mlx5_0" && p.Num == 1 {
					return p
				}
			}
		}
		t.Fatal("no mlx5_0 port 1")
		return status.Port{}
	}
	mark := func(m float64) {
		t.Helper()
		for _, n := range []string{"node0", "node1"} {
			if err := d.sim.f.SetCongestion(d.sim.f.Host(n).HCA("mlx5_0").Port(1), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	old, s := attach(2)
	eventually(t, "the port's traffic counted", func() bool { p := port(); return p.Health != nil && p.Health.XmitPacketsPerSecond > 0 })
	mark(1)
	eventually(t, "the congestion in the status", func() bool { p := port(); return p.Health != nil && p.Health.CongestionPerSecond >= 1 })
	time.Sleep(200 * time.Millisecond) // four counter polls
	if v := old.viewsOf("mlx5_0", 1); len(v) != 0 {
		t.Fatalf("an owner of protocol 2 was told views: %+v", v)
	}
	s.Close()
	eventually(t, "the first owner gone", func() bool { return len(node().Owners) == 0 })

	now, _ := attach(ownerproto.Proto)
	eventually(t, "the view told at attach", func() bool { v := now.viewsOf("mlx5_0", 1); return len(v) > 0 && v[0].Congestion >= 1 })
	if got := now.viewsOf("mlx5_0", 1)[0].Congestion; got != congestionBand(got) {
		t.Fatalf("view's congestion %v: want a power of two", got)
	}
	mark(0)
	eventually(t, "the empty view", func() bool {
		v := now.viewsOf("mlx5_0", 1)
		return v[len(v)-1] == ownerproto.PortView{}
	})
	told := len(now.viewsOf("mlx5_0", 1))
	mark(1)
	eventually(t, "the view told again", func() bool {
		v := now.viewsOf("mlx5_0", 1)
		return len(v) > told && v[len(v)-1].Congestion >= 1
	})
	if n := len(now.viewsOf("mlx5_0", 1)); n > 16 {
		t.Fatalf("%d views told for a fall and a rise: want a few (bands), not one per poll", n)
	}
}

// TestPortViewSuppressed: ibpathd's view of a port that flapped twice is
// suppressed (its flap damping, node-wide), and not once the penalty has
// decayed; congestionBand rounds down to a power of two.
func TestPortViewSuppressed(t *testing.T) {
	d, root, start := clockedFixtureDaemon(t, "")
	clock := *start
	d.damp.now = func() time.Time { return clock }
	k := pathsel.PortKey{Device: "rxe0", Port: 1}
	for range 2 {
		setRxe0Port1(t, d, root, false)
		clock = clock.Add(time.Second)
		setRxe0Port1(t, d, root, true)
		clock = clock.Add(time.Second)
	}
	if v := d.viewOf(k); !v.Suppressed {
		t.Fatalf("after two flaps: %+v, want suppressed", v)
	}
	clock = clock.Add(10 * time.Minute)
	if v := d.viewOf(k); v.Suppressed {
		t.Fatalf("ten minutes later: %+v", v)
	}
	for _, c := range [][2]float64{{0, 0}, {0.9, 0}, {1, 1}, {3, 2}, {1000, 512}, {1024, 1024}} {
		if got := congestionBand(c[0]); got != c[1] {
			t.Errorf("congestionBand(%v) = %v, want %v", c[0], got, c[1])
		}
	}
}
