package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

// TestDegradedPortLeftAndReturned: on the simulated fabric, node0's
// mlx5_0 port 1 starts losing 5 % of its packets under the workload's
// traffic. ibpathd finds it degraded from its counters (the receive
// errors the loss makes, or the sequence errors, over the window), takes it out of service as a drain does (the
// workload's QP migrates to port 2 before any QP fails), and says so in
// the status; an operator's undrain does not bring it back. When the
// loss stops, the port is back in service once healthy for the clear
// time, and the QP fails back to it.
func TestDegradedPortLeftAndReturned(t *testing.T) {
	d, c := testDaemon(t, func(cfg *Config) {
		cfg.Sim.QPs = 1
		cfg.CounterPoll = 50 * time.Millisecond
		cfg.Health = "window=1s,min-seq-errors=3,clear=1s"
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
	if p, n := port(); p.Health == nil || p.Health.State != status.HealthOK || p.Health.XmitPacketsPerSecond == 0 || n.Health != "window=1s,link-errors=3,min-seq-errors=3,seq-error-ratio=0.01,clear=1s" {
		t.Fatalf("healthy port under traffic: %+v (rule %q)", p.Health, n.Health)
	}
	p1 := d.sim.f.Host("node0").HCA("mlx5_0").Port(1)
	if err := d.sim.f.SetLoss(p1, 0.05, 0.05); err != nil {
		t.Fatal(err)
	}
	lossAt := time.Now()
	eventually(t, "the port out of service", func() bool { p, _ := port(); return p.Health != nil && p.Health.OutOfService })
	p, n := port()
	if p.Health.State != status.HealthDegraded || !strings.Contains(p.Health.Why, "link errors") && !strings.Contains(p.Health.Why, "sequence errors") || n.Totals.DegradedPorts != 1 {
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

// TestDegradedPortFromSysfs drives the counter poll by hand on a sysfs
// fixture (rdma_rxe's hw_counters): ACK timeouts alone (a dead peer) do
// nothing, nor does one burst of sequence errors (a failover's replay);
// sequence errors poll after poll take rxe0:1 out of service; when rxe0 goes away from sysfs it is forgotten, out of
// service no more; a counter file that does not parse is shown as the
// port's error and judges nothing.
func TestDegradedPortFromSysfs(t *testing.T) {
	d, root, start := clockedFixtureDaemon(t, "min-seq-errors=3,clear=2s")
	clock := *start
	d.damp.now = func() time.Time { return clock }
	hw := filepath.Join(root, "class", "infiniband", "rxe0", "ports", "1", "hw_counters")
	gaps, sent := 300, 100
	poll := func() *status.PortHealth {
		t.Helper()
		clock = clock.Add(time.Second)
		writeFile(t, filepath.Join(hw, "out_of_seq_request"), strconv.Itoa(gaps))
		writeFile(t, filepath.Join(hw, "sent_pkts"), strconv.Itoa(sent))
		d.pollCounters()
		for _, h := range d.Status().HCAs {
			for _, p := range h.Ports {
				if h.Name == "rxe0" && p.Num == 1 {
					return p.Health
				}
			}
		}
		return nil
	}
	for range 3 {
		sent += 1000
		if h := poll(); h == nil || h.State != status.HealthOK {
			t.Fatalf("quiet port: %+v", h)
		}
	}
	// A peer that died: its QPs' ACK timeouts climb (rxe's completer
	// retries), nothing else; the port is fine.
	for i := range 3 {
		writeFile(t, filepath.Join(hw, "completer_retry_err"), strconv.Itoa(1100+500*(i+1)))
		sent += 500
		if h := poll(); h == nil || h.State != status.HealthOK {
			t.Fatalf("ACK timeouts alone: %+v", h)
		}
	}
	// A burst of duplicates in one poll (a failover's replay): nothing.
	gaps += 50
	sent += 1000
	if h := poll(); h == nil || h.State != status.HealthOK {
		t.Fatalf("a burst of 50 duplicate requests: %+v", h)
	}
	// Duplicates poll after poll (a lossy path): degraded once three
	// polls of the window saw some (the burst's among them).
	for i := 1; i <= 2; i++ {
		gaps += 10
		sent += 1000
		h := poll()
		if i == 1 && (h == nil || h.State != status.HealthOK) {
			t.Fatalf("duplicates in 2 polls: %+v", h)
		}
		if i == 2 && (h == nil || !h.OutOfService || !strings.Contains(h.Why, "70 sequence errors") || !strings.Contains(h.Why, "in 3 polls")) {
			t.Fatalf("duplicates in 3 polls of the window: %+v", h)
		}
	}
	if n := d.Status(); len(n.Drains) != 1 || n.Totals.DegradedPorts != 1 {
		t.Fatalf("drains %+v, %d degraded", n.Drains, n.Totals.DegradedPorts)
	}
	clock = clock.Add(time.Second)
	writeFile(t, filepath.Join(hw, "sent_pkts"), "garbage")
	d.pollCounters()
	if p := d.portHealthStatus("rxe0", 1); p == nil || !strings.Contains(p.Error, "sent_pkts") || !p.OutOfService {
		t.Fatalf("a counter that does not parse: %+v; want the error shown, the port still out", p)
	}
	if err := os.RemoveAll(filepath.Join(root, "class", "infiniband", "rxe0")); err != nil {
		t.Fatal(err)
	}
	d.refreshPorts()
	d.pollCounters()
	if n := d.Status(); len(n.Drains) != 0 || n.Totals.DegradedPorts != 0 || d.healthOut("rxe0", 1) {
		t.Fatalf("rxe0 gone: drains %+v, %d degraded", n.Drains, n.Totals.DegradedPorts)
	}
}
