package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// invPort returns the inventory's port n of device dev.
func (d *Daemon) invPort(t testing.TB, dev string, n uint8) pathsel.PortInfo {
	t.Helper()
	p, ok := d.portInfo(dev, n)
	if !ok {
		t.Fatalf("no %s port %d in %s's inventory", dev, n, d.cfg.Node)
	}
	return p
}

// TestLookupHCAAcrossNodes: two ibpathd on the simulated fabric,
// replicating; a process attached to node0 asks for adapters of both.
func TestLookupHCAAcrossNodes(t *testing.T) {
	d0, _ := testDaemon(t, func(c *Config) { c.Repl = ReplConfig{Bind: "127.0.0.1:0", Insecure: true} })
	d1, _ := testDaemon(t, func(c *Config) {
		c.Node, c.Sim.Index = "node1", 1
		c.Repl = ReplConfig{Bind: "127.0.0.1:0", Insecure: true, Join: []string{d0.repl.Repl().Addr}}
	})
	eventually(t, "node1 alive in node0's view", func() bool {
		for _, p := range d0.repl.Peers() {
			if p.Name == "node1" && p.State == "alive" {
				return true
			}
		}
		return false
	})
	ctx, s := dialOwner(t, d0)

	local := d0.invPort(t, "mlx5_1", 2)
	h, err := s.LookupHCA(ctx, ownerproto.Route{LID: local.LID})
	if err != nil {
		t.Fatalf("a local LID: %v", err)
	}
	if h.Name != "mlx5_1" || len(h.Ports) != 2 || !h.APM || h.Ports[1].LID != local.LID || !h.Ports[1].Active() {
		t.Fatalf("node0's mlx5_1: %+v", h)
	}

	remote := d1.invPort(t, "mlx5_0", 1)
	for _, r := range []ownerproto.Route{{LID: remote.LID}, {LID: remote.LID + 1}, {GID: remote.GIDs[0].GID}} {
		h, err := s.LookupHCA(ctx, r)
		if err != nil {
			t.Fatalf("node1's route %+v: %v", r, err)
		}
		p, ok := h.PortByLID(remote.LID + 1)
		if h.Name != "mlx5_0" || h.GUID == 0 || !ok || p.Num != 1 || p.LMC != remote.LMC || p.LinkLayer != verbs.LinkLayerInfiniBand {
			t.Fatalf("node1's mlx5_0 through %+v: %+v", r, h)
		}
	}
	// The remote answer is cached for a second; then a port state change
	// on node1 shows.
	must(t, d1.sim.f.SetLink(d1.sim.host.HCA("mlx5_0").Port(1), false))
	time.Sleep(1100 * time.Millisecond)
	h, err = s.LookupHCA(ctx, ownerproto.Route{GID: remote.GIDs[0].GID})
	if err != nil || h.Ports[0].Active() {
		t.Fatalf("after node1's port 1 went down: %+v %v", h, err)
	}

	_, err = s.LookupHCA(ctx, ownerproto.Route{LID: 60000})
	if !errors.Is(err, ownerproto.ErrNotFound) || !strings.Contains(err.Error(), "LID 60000") || !strings.Contains(err.Error(), "no live member holds the route") {
		t.Fatalf("a LID nobody holds: %v", err)
	}
}

// Without replication only local adapters are described.
func TestLookupHCAWithoutReplication(t *testing.T) {
	d, _ := testDaemon(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := ownerproto.Dial(ctx, d.cfg.Socket, selfHello(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := d.invPort(t, "mlx5_0", 1)
	if h, err := s.LookupHCA(ctx, ownerproto.Route{GID: p.GIDs[0].GID}); err != nil || h.Name != "mlx5_0" {
		t.Fatalf("local GID: %+v %v", h, err)
	}
	_, err = s.LookupHCA(ctx, ownerproto.Route{LID: 60000})
	if !errors.Is(err, ownerproto.ErrNotFound) || !strings.Contains(err.Error(), "replication is off") {
		t.Fatalf("a remote LID without replication: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
