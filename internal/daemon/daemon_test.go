package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
)

// testDaemon starts a daemon on the simulated fabric with a socket in a
// temporary directory and returns it with a client.
func testDaemon(t testing.TB, mod func(*Config)) (*Daemon, *api.Client) {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{Node: "node0", Socket: filepath.Join(dir, "ibpathd.sock"), StateDir: dir, Fabric: "sim",
		Sim: SimConfig{Seed: 1, Hosts: 2, QPs: 2}, PortPoll: 20 * time.Millisecond, CommandTimeout: 2 * time.Second,
		Repl: ReplConfig{Off: true}}
	if mod != nil {
		mod(&cfg)
	}
	d, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	serve(t, d)
	return d, api.NewClient(cfg.Socket, 5*time.Second)
}

// serve runs d until the test ends, returning once it is ready.
func serve(tb testing.TB, d *Daemon) {
	tb.Helper()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- d.Serve(context.Background(), func() error { close(ready); return nil }) }()
	select {
	case <-ready:
	case err := <-done:
		tb.Fatalf("Serve: %v", err)
	}
	tb.Cleanup(func() {
		d.Close()
		if err := <-done; err != nil {
			tb.Errorf("Serve returned %v", err)
		}
	})
}

// dialOwner attaches an owner session to d as this process, for the
// test's duration; ctx bounds its requests.
func dialOwner(t *testing.T, d *Daemon) (ctx context.Context, s *ownerproto.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s, err := ownerproto.Dial(ctx, d.cfg.Socket, selfHello(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return ctx, s
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStatusOnSimFabric(t *testing.T) {
	_, c := testDaemon(t, nil)
	ctx := context.Background()
	var n status.Node
	eventually(t, "both workload QPs armed", func() bool {
		var err error
		n, err = c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n.Totals.ArmedQPs == 2
	})
	if n.Schema != status.SchemaVersion || n.Node != "node0" {
		t.Fatalf("schema %d node %q", n.Schema, n.Node)
	}
	// the reason says why once; the fabric's shape is its own field
	if n.Fabric.Kind != status.FabricSim || n.Fabric.Reason != "--fabric sim" || n.Fabric.Sim != (status.SimFabric{Seed: 1, Host: "node0", Hosts: 2}) {
		t.Fatalf("fabric %+v: want sim, saying why, and its shape", n.Fabric)
	}
	if len(n.HCAs) != 2 || len(n.HCAs[0].Ports) != 2 || n.HCAs[0].Ports[0].State != "ACTIVE" || n.HCAs[0].Ports[0].PhysState != "LINK_UP" ||
		n.HCAs[0].Ports[0].LID == 0 {
		t.Fatalf("HCAs %+v: want ports ACTIVE, LINK_UP (the rdma tool's names) with a LID", n.HCAs)
	}
	if len(n.QPs) != 2 {
		t.Fatalf("QPs %+v", n.QPs)
	}
	lid := map[string]uint16{}
	for _, h := range n.HCAs {
		for _, p := range h.Ports {
			lid[fmt.Sprintf("%s:%d", h.Name, p.Num)] = p.LID
		}
	}
	for _, q := range n.QPs {
		want := func(port uint8) status.Path {
			return status.Path{Device: q.Device, Port: port, LID: lid[fmt.Sprintf("%s:%d", q.Device, port)], PortState: "ACTIVE"}
		}
		if q.Layer != status.LayerAPM || q.APM != "armed" || q.Primary != want(1) || q.Alternate != want(2) || q.Home != want(1) {
			t.Fatalf("QP %+v: want armed on port 1 with port 2 as alternate, with their LIDs", q)
		}
	}
}

func TestAutoFallsBackToSimWithoutHCAs(t *testing.T) {
	empty := t.TempDir()
	d, c := testDaemon(t, func(cfg *Config) { cfg.Fabric = "auto"; cfg.Sysfs = empty })
	n, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n.Fabric.Kind != status.FabricSim || n.Fabric.Reason != "no RDMA device under "+filepath.Join(empty, "class", "infiniband") {
		t.Fatalf("fabric %+v", n.Fabric)
	}
	if d.Fabric() != n.Fabric {
		t.Fatalf("Fabric() %+v differs from status %+v", d.Fabric(), n.Fabric)
	}
}

func TestHardwareWithoutHCAsIsAnError(t *testing.T) {
	dir := t.TempDir()
	_, err := New(Config{Node: "n", Socket: filepath.Join(dir, "s"), StateDir: dir, Fabric: "hardware", Sysfs: dir, Repl: ReplConfig{Off: true}}, nil)
	if err == nil || !strings.Contains(err.Error(), "no RDMA device") {
		t.Fatalf("New with --fabric hardware and no device: %v", err)
	}
	_, err = New(Config{Node: "n", Socket: filepath.Join(dir, "s"), StateDir: dir, Fabric: "gpu"}, nil)
	if err == nil || !strings.Contains(err.Error(), `fabric "gpu"`) {
		t.Fatalf("New with a bad fabric: %v", err)
	}
}

func TestMigratePortAndPathMigratedEvent(t *testing.T) {
	d, c := testDaemon(t, nil)
	ctx := context.Background()
	eventually(t, "armed", func() bool { n, _ := c.Status(ctx); return n.Totals.ArmedQPs == 2 })
	events, cancel := d.Subscribe(16)
	defer cancel()
	dry, err := c.Migrate(ctx, api.Target{Device: "mlx5_0", Port: 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Results) != 1 || !dry.Results[0].OK || dry.Results[0].After.String() != "port 2" {
		t.Fatalf("dry run %+v", dry)
	}
	if n, _ := c.Status(ctx); n.Totals.Migrations != 0 {
		t.Fatalf("a dry run migrated: %+v", n.Totals)
	}
	res, err := c.Migrate(ctx, api.Target{Device: "mlx5_0", Port: 1}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 1 || !res.Results[0].OK || res.Results[0].Before.String() != "armed port 1" || !strings.HasSuffix(res.Results[0].After.String(), "port 2") {
		t.Fatalf("migrate %+v", res)
	}
	select {
	case e := <-events:
		if e.Kind != status.EvPathMigrated || e.Device != "mlx5_0" || e.From != "port 1" || e.To != "port 2" {
			t.Fatalf("event %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no PathMigrated event")
	}
	// The QP was not armed on mlx5_1 port 2's QPs: none there.
	res, err = c.Migrate(ctx, api.Target{Device: "mlx5_1", Port: 2}, false)
	if err != nil || len(res.Results) != 0 {
		t.Fatalf("migrate of a port without QPs: %+v %v", res, err)
	}
}

func TestActionErrors(t *testing.T) {
	_, c := testDaemon(t, nil)
	ctx := context.Background()
	cases := []struct {
		name string
		do   func() error
		code string
	}{
		{"unknown QP", func() error { _, err := c.Arm(ctx, api.Target{Device: "mlx5_0", QPN: 0x999}); return err }, api.CodeNotFound},
		{"unknown port", func() error { _, err := c.Arm(ctx, api.Target{Device: "mlx5_0", Port: 7}); return err }, api.CodeNotFound},
		{"unknown device", func() error { _, err := c.Migrate(ctx, api.Target{Device: "mlx9", Port: 1}, false); return err }, api.CodeNotFound},
		{"empty target", func() error { _, err := c.Arm(ctx, api.Target{}); return err }, api.CodeBadRequest},
		{"QPN and port", func() error { _, err := c.Arm(ctx, api.Target{Device: "mlx5_0", QPN: 1, Port: 1}); return err }, api.CodeBadRequest},
	}
	for _, tc := range cases {
		err := tc.do()
		var e *api.Error
		if !errors.As(err, &e) || e.Code != tc.code {
			t.Errorf("%s: %v, want code %s", tc.name, err, tc.code)
		}
	}
}

func TestAPIRefusesBadBodiesAndPaths(t *testing.T) {
	d, _ := testDaemon(t, nil)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.cfg.Socket)
	}}}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", api.PathArm, `{"target":{"all":true},"colour":"red"}`, 400},
		{"POST", api.PathArm, `{"target":{"all":true}} {}`, 400},
		{"POST", api.PathArm, `not json`, 400},
		{"POST", api.PathArm, `{"target":{"all":true},"dry_run":true}`, 400},
		{"POST", api.PathMigrate, `{"target":{"all":true}}` + strings.Repeat(" ", maxBody), 400},
		{"GET", "/v2/status", ``, 404},
		{"GET", api.PathOwner, ``, 400},
		{"DELETE", api.PathStatus, ``, 405},
	} {
		req, _ := http.NewRequest(tc.method, "http://ibpathd"+tc.path, strings.NewReader(tc.body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s %.40q: HTTP %d, want %d", tc.method, tc.path, tc.body, resp.StatusCode, tc.want)
		}
	}
}

func TestSecondDaemonOnSameSocketRefused(t *testing.T) {
	d, _ := testDaemon(t, nil)
	if _, err := listenUnix(d.cfg.Socket); err == nil || !strings.Contains(err.Error(), "another ibpathd") {
		t.Fatalf("second listen: %v", err)
	}
	// A stale socket file (no one listening) is replaced.
	stale := filepath.Join(t.TempDir(), "stale.sock")
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := listenUnix(stale)
	if err != nil {
		t.Fatalf("listen over a stale file: %v", err)
	}
	ln.Close()
}
