package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

// fixture copies a sysfs fixture tree of pathsel (symlinks kept) so a
// test may change it.
func fixture(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("cp", "-a", filepath.Join("..", "..", "pathsel", "testdata", "sysfs", name), dst).CombinedOutput()
	if err != nil {
		t.Fatalf("cp fixture %s: %v: %s", name, err, out)
	}
	return dst
}

func TestHardwareFixtureStatusAndPortEvents(t *testing.T) {
	root := fixture(t, "mlx4-dual")
	d, c := testDaemon(t, func(cfg *Config) { cfg.Fabric = "auto"; cfg.Sysfs = root })
	ctx := context.Background()
	n, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Fabric.Kind != status.FabricHardware || n.Fabric.Sysfs != root {
		t.Fatalf("fabric %+v: want hardware from the fixture", n.Fabric)
	}
	if len(n.HCAs) != 1 || n.HCAs[0].Name != "mlx4_0" || len(n.HCAs[0].Ports) != 2 || len(n.QPs) != 0 {
		t.Fatalf("status %+v", n)
	}
	var up, down *status.Port
	for i := range n.HCAs[0].Ports {
		p := &n.HCAs[0].Ports[i]
		if p.State == "ACTIVE" {
			up = p
		} else {
			down = p
		}
	}
	if up == nil || down == nil || up.LID == 0 || up.Rate == "" {
		t.Fatalf("ports %+v: want one ACTIVE with a LID and rate, one not", n.HCAs[0].Ports)
	}
	events, cancel := d.Subscribe(8)
	defer cancel()
	// The cable of the ACTIVE port is pulled: the kernel rewrites state.
	dir := filepath.Join(root, "class", "infiniband", "mlx4_0", "ports", itoa(up.Num))
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "phys_state"), []byte("3: Disabled\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Kind != status.EvPortStateChanged || e.Device != "mlx4_0" || e.Port != up.Num || e.From != "ACTIVE" || e.To != "DOWN" {
			t.Fatalf("event %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no PortStateChanged")
	}
	n, _ = c.Status(ctx)
	for _, p := range n.HCAs[0].Ports {
		if p.Num == up.Num && (p.State != "DOWN" || p.PhysState != "Disabled") {
			t.Fatalf("status not updated: %+v", p)
		}
	}
	// With no QP on the node, port actions name nothing and a QP action
	// is not found.
	if res, err := c.Migrate(ctx, api.Target{Device: "mlx4_0", Port: up.Num}, true); err != nil || len(res.Results) != 0 {
		t.Fatalf("dry run on an idle port: %+v %v", res, err)
	}
	m, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m, `ibpath_port_up{device="mlx4_0",port="`+itoa(up.Num)+`"} 0`) || !strings.Contains(m, "ibpath_fabric_simulated 0") {
		t.Fatalf("metrics do not show the port down on hardware:\n%s", m)
	}
}

func TestMalformedFixtureKeepsServing(t *testing.T) {
	root := fixture(t, "mlx4-dual")
	d, c := testDaemon(t, func(cfg *Config) { cfg.Fabric = "hardware"; cfg.Sysfs = root })
	state := filepath.Join(root, "class", "infiniband", "mlx4_0", "ports", "1", "state")
	if err := os.WriteFile(state, []byte("banana\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the discovery error recorded", func() bool {
		d.invMu.Lock()
		defer d.invMu.Unlock()
		return d.invErr != nil && strings.Contains(d.invErr.Error(), "state")
	})
	n, err := c.Status(context.Background())
	if err != nil {
		t.Fatalf("status after a bad sysfs read: %v", err)
	}
	if !strings.Contains(n.Fabric.Error, "state") {
		t.Fatalf("status does not show the discovery error: %+v", n.Fabric)
	}
}

func itoa(n uint8) string { return strconv.Itoa(int(n)) }
