package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// portQPs counts the simulated workload's QPs whose primary path is on
// port of dev.
func portQPs(n status.Node, dev string, port uint8) int {
	k := 0
	for _, q := range n.QPs {
		if q.OwnerPID == 0 && q.Device == dev && q.Port == port {
			k++
		}
	}
	return k
}

func drainOf(n status.Node, dev string, port uint8) *status.Drain {
	for i := range n.Drains {
		if n.Drains[i].Device == dev && n.Drains[i].Port == port {
			return &n.Drains[i]
		}
	}
	return nil
}

// TestDrainHoldsAcrossRestart: a drain moves the workload's QPs off the
// port and keeps them off far beyond the fail-back hold-down; it is kept
// in the state directory and applied again by the next ibpathd; the
// undrain brings the QPs home.
func TestDrainHoldsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *Config) { c.StateDir = dir; c.Socket = filepath.Join(dir, "s.sock") }
	d, c := testDaemon(t, mod)
	ctx := context.Background()
	eventually(t, "armed", func() bool { n, _ := c.Status(ctx); return n.Totals.ArmedQPs == 2 })
	if n, _ := c.Status(ctx); portQPs(n, "mlx5_0", 1) != 1 {
		t.Fatalf("want the workload's QP on mlx5_0:1 first: %+v", n.QPs)
	}
	res, err := c.Drain(ctx, api.PortRequest{Device: "mlx5_0", Port: 1})
	if err != nil || !res.Drained || !res.Changed || len(res.Owners) != 1 || !res.Owners[0].OK {
		t.Fatalf("drain: %+v %v", res, err)
	}
	eventually(t, "the QP off the drained port", func() bool {
		n, _ := c.Status(ctx)
		x := drainOf(n, "mlx5_0", 1)
		return portQPs(n, "mlx5_0", 1) == 0 && x != nil && x.QPsLeft == 0
	})
	// The peer would fail back after 200 ms: a second is well past it.
	time.Sleep(time.Second)
	n, _ := c.Status(ctx)
	if portQPs(n, "mlx5_0", 1) != 0 {
		t.Fatalf("back on the drained port: %+v", n.QPs)
	}
	if x := drainOf(n, "mlx5_0", 1); x == nil || x.ByUID != uint32(os.Getuid()) || x.Since.IsZero() {
		t.Fatalf("status drains %+v", n.Drains)
	}
	// Peers are shown the port DOWN.
	h, err := d.describeLocal(ownerproto.Route{LID: lidOf(t, n, "mlx5_0", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := h.Port(1); p.State != verbs.PortDown {
		t.Fatalf("a peer sees the drained port %v", p.State)
	}
	var m strings.Builder
	if err := WriteMetrics(&m, n); err != nil || !strings.Contains(m.String(), `ibpath_drained_port_qps{device="mlx5_0",port="1"} 0`) {
		t.Fatalf("metrics of the drain (%v):\n%s", err, m.String())
	}
	again, err := c.Drain(ctx, api.PortRequest{Device: "mlx5_0", Port: 1})
	if err != nil || again.Changed {
		t.Fatalf("second drain: %+v %v", again, err)
	}

	d.Close()
	d2, c2 := testDaemon(t, mod)
	_ = d2
	eventually(t, "armed after the restart", func() bool { n, _ := c2.Status(ctx); return n.Totals.ArmedQPs == 2 })
	time.Sleep(500 * time.Millisecond)
	n, _ = c2.Status(ctx)
	if x := drainOf(n, "mlx5_0", 1); x == nil || portQPs(n, "mlx5_0", 1) != 0 {
		t.Fatalf("after a restart: drains %+v, QPs %+v", n.Drains, n.QPs)
	}
	un, err := c2.Undrain(ctx, api.PortRequest{Device: "mlx5_0", Port: 1})
	if err != nil || un.Drained || !un.Changed {
		t.Fatalf("undrain: %+v %v", un, err)
	}
	eventually(t, "the QP home after the undrain", func() bool { n, _ := c2.Status(ctx); return portQPs(n, "mlx5_0", 1) == 1 })
	if n, _ := c2.Status(ctx); len(n.Drains) != 0 {
		t.Fatalf("drains after the undrain: %+v", n.Drains)
	}
	if un, err := c2.Undrain(ctx, api.PortRequest{Device: "mlx5_0", Port: 1}); err != nil || un.Changed {
		t.Fatalf("second undrain: %+v %v", un, err)
	}
}

func lidOf(t *testing.T, n status.Node, dev string, port uint8) uint16 {
	t.Helper()
	for _, h := range n.HCAs {
		for _, p := range h.Ports {
			if h.Name == dev && p.Num == port {
				return p.LID
			}
		}
	}
	t.Fatalf("no %s:%d in %+v", dev, port, n.HCAs)
	return 0
}

// mine is the entry of this process's QP qpn among the drain's QPs.
func mine(x *status.Drain, qpn uint32) *status.DrainQP {
	if x == nil {
		return nil
	}
	for i := range x.QPs {
		if x.QPs[i].OwnerPID == os.Getpid() && x.QPs[i].QPN == qpn {
			return &x.QPs[i]
		}
	}
	return nil
}

// TestDrainTellsOwners: a process attached when the drain comes is told;
// one that attaches later is told at once; one of protocol 1 is told
// nothing, and the status says why its QP stays.
func TestDrainTellsOwners(t *testing.T) {
	d, c := testDaemon(t, nil)
	ctx := context.Background()
	var mu sync.Mutex
	var got []ownerproto.Command
	h := func(cmd ownerproto.Command) ownerproto.Result {
		mu.Lock()
		got = append(got, cmd)
		mu.Unlock()
		return ownerproto.Result{OK: true, Note: "drained; QPs moving off: 0"}
	}
	s, err := ownerproto.Dial(ctx, d.cfg.Socket, selfHello(t), h)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReportQP(status.QP{Device: "mlx5_0", QPN: 0x1c3, Port: 1, Layer: status.LayerAPM, APM: "armed"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the QP reported", func() bool { n, _ := c.Status(ctx); return len(n.Owners) == 1 && n.Owners[0].QPs == 1 })
	res, err := c.Drain(ctx, api.PortRequest{Device: "mlx5_0", Port: 1})
	if err != nil || len(res.Owners) != 2 || !res.Owners[1].OK || res.Owners[1].PID != os.Getpid() {
		t.Fatalf("drain: %+v %v", res, err)
	}
	n, _ := c.Status(ctx)
	// (the simulated workload's QP may still be on the port too)
	x := drainOf(n, "mlx5_0", 1)
	if q := mine(x, 0x1c3); q == nil || !strings.Contains(q.Why, "layer 1 is moving it") {
		t.Fatalf("status drain %+v", x)
	}
	s.Close()
	eventually(t, "the owner gone", func() bool { n, _ := c.Status(ctx); return len(n.Owners) == 0 })

	got = nil
	s2, err := ownerproto.Dial(ctx, d.cfg.Socket, selfHello(t), h)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	eventually(t, "the drain told at attach", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1 && got[0] == ownerproto.Command{Op: ownerproto.OpDrain, Device: "mlx5_0", Port: 1}
	})
	s2.Close()
	eventually(t, "the owner gone", func() bool { n, _ := c.Status(ctx); return len(n.Owners) == 0 })

	old := selfHello(t)
	old.Proto = 1
	got = nil
	s1, err := ownerproto.Dial(ctx, d.cfg.Socket, old, h)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	if err := s1.ReportQP(status.QP{Device: "mlx5_0", QPN: 0x1c4, Port: 1, Layer: status.LayerAPM, APM: "armed"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old owner's QP", func() bool { n, _ := c.Status(ctx); return len(n.Owners) == 1 && n.Owners[0].QPs == 1 })
	n, _ = c.Status(ctx)
	if q := mine(drainOf(n, "mlx5_0", 1), 0x1c4); q == nil || !strings.Contains(q.Why, "owner protocol 1") {
		t.Fatalf("protocol 1 owner's QP: %+v", drainOf(n, "mlx5_0", 1))
	}
	if n.Owners[0].Proto != 1 {
		t.Fatalf("owner %+v", n.Owners[0])
	}
	un, err := c.Undrain(ctx, api.PortRequest{Device: "mlx5_0", Port: 1})
	if err != nil || un.Owners[1].OK || !strings.Contains(un.Owners[1].Error, "no drain") {
		t.Fatalf("undrain with a protocol 1 owner: %+v %v", un, err)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("a protocol 1 owner got %+v", got)
	}
}

// TestDrainRefusals: bad ports, non-operators and a drains file that does
// not parse are refused with errors that say so.
func TestDrainRefusals(t *testing.T) {
	d, c := testDaemon(t, nil)
	ctx := context.Background()
	var ae *api.Error
	if _, err := c.Drain(ctx, api.PortRequest{Device: "mlx5_9", Port: 1}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("unknown port: %v", err)
	}
	if _, err := c.Drain(ctx, api.PortRequest{Device: "mlx5_0"}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
		t.Fatalf("no port: %v", err)
	}
	if _, err := d.Drain(ctx, api.Caller{UID: 4242, GID: 4242, PID: 1}, api.PortRequest{Device: "mlx5_0", Port: 1}); !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
		t.Fatalf("non-operator: %v", err)
	}
	if d.drains.has("mlx5_0", 1) {
		t.Fatal("a refused drain was recorded")
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, drainsFile), []byte("{\"version\":1,\"drains\":[{\"device\":\"mlx5_0\"}"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{Node: "n", Socket: filepath.Join(dir, "s"), StateDir: dir, Fabric: "sim", Sim: SimConfig{Seed: 1, Hosts: 2, QPs: 1}, Repl: ReplConfig{Off: true}}, nil)
	if err == nil || !strings.Contains(err.Error(), drainsFile) || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("damaged drains file: %v", err)
	}
}
