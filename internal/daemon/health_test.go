package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

// TestDegradedPortLeftAndReturned: on the simulated fabric, node0's
// mlx5_0 port 1 starts losing 5 % of its packets under the workload's
// traffic. ibpathd finds it degraded from its counters (the receive
// errors the loss makes, or the retransmissions, over the window), takes it out of service as a drain does (the
// workload's QP migrates to port 2 before any QP fails), and says so in
// the status; an operator's undrain does not bring it back. When the
// loss stops, the port is back in service once healthy for the clear
// time, and the QP fails back to it.
func TestDegradedPortLeftAndReturned(t *testing.T) {
	d, c := testDaemon(t, func(cfg *Config) {
		cfg.Sim.QPs = 1
		cfg.CounterPoll = 50 * time.Millisecond
		cfg.Health = "window=1s,min-retrans=3,clear=1s"
	})
	ctx := context.Background()
	qp := func() status.QP {
		t.Helper()
		n, err := c.Status(ctx)
		if err != nil || len(n.QPs) != 1 {
			t.Fatalf("status: %v, %+v", err, n.QPs)
		}
		return n.QPs[0]
	}
	port := func() (status.Port, status.Node) {
		t.Helper()
		n, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range n.HCAs {
			for _, p := range h.Ports {
				if h.Name == "mlx5_0" && p.Num == 1 {
					return p, n
				}
			}
		}
		t.Fatal("no mlx5_0 port 1")
		return status.Port{}, n
	}
	eventually(t, "the workload QP armed on port 1", func() bool { q := qp(); return q.APM == "armed" && q.Primary.Port == 1 })
	eventually(t, "the port's traffic counted", func() bool { p, _ := port(); return p.Health != nil && p.Health.XmitPacketsPerSecond > 0 })
	if p, n := port(); p.Health == nil || p.Health.State != status.HealthOK || p.Health.XmitPacketsPerSecond == 0 || n.Health != "window=1s,link-errors=3,min-retrans=3,retrans-ratio=0.01,clear=1s" {
		t.Fatalf("healthy port under traffic: %+v (rule %q)", p.Health, n.Health)
	}
	p1 := d.sim.f.Host("node0").HCA("mlx5_0").Port(1)
	if err := d.sim.f.SetLoss(p1, 0.05, 0.05); err != nil {
		t.Fatal(err)
	}
	lossAt := time.Now()
	eventually(t, "the port out of service", func() bool { p, _ := port(); return p.Health != nil && p.Health.OutOfService })
	p, n := port()
	if p.Health.State != status.HealthDegraded || !strings.Contains(p.Health.Why, "link errors") && !strings.Contains(p.Health.Why, "retransmissions") || n.Totals.DegradedPorts != 1 {
		t.Fatalf("degraded port: %+v, %d degraded", p.Health, n.Totals.DegradedPorts)
	}
	if len(n.Drains) != 1 || !strings.HasPrefix(n.Drains[0].Reason, "degraded: ") {
		t.Fatalf("drains %+v: want the port, by ibpathd", n.Drains)
	}
	eventually(t, "the QP off the port", func() bool { return qp().Primary.Port == 2 })
	t.Logf("traffic off the port %v after the loss began (docs/PERFORMANCE.md, \"Port health\")", time.Since(lossAt).Round(time.Millisecond))
	if q := qp(); q.APM == "unprotected" || q.Layer != status.LayerAPM {
		t.Fatalf("QP after the move: %+v", q)
	}
	// An operator's undrain does not bring a degraded port back.
	res, err := c.Undrain(ctx, api.PortRequest{Device: "mlx5_0", Port: 1})
	if err != nil || !strings.Contains(res.Note, "stays out of service") {
		t.Fatalf("undrain of a degraded port: %+v %v", res, err)
	}
	time.Sleep(300 * time.Millisecond)
	if q := qp(); q.Primary.Port != 2 {
		t.Fatalf("the QP went back to the degraded port after an undrain: %+v", q)
	}
	if err := d.sim.f.SetLoss(p1, 0, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the port back in service", func() bool { p, _ := port(); return p.Health != nil && !p.Health.OutOfService })
	if p, n := port(); p.Health.State != status.HealthOK || n.Totals.DegradedPorts != 0 || len(n.Drains) != 0 || p.Damping == nil || p.Damping.Flaps != 1 {
		t.Fatalf("back in service: %+v, damping %+v, drains %+v", p.Health, p.Damping, n.Drains)
	}
	eventually(t, "the QP back on port 1", func() bool { return qp().Primary.Port == 1 })
}
