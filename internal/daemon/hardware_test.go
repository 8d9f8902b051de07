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
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
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
	if up == nil || down == nil || up.LID == 0 || up.Rate == "" || up.PhysState != "LINK_UP" {
		t.Fatalf("ports %+v: want one ACTIVE (LINK_UP, sysfs's \"5: LinkUp\") with a LID and rate, one not", n.HCAs[0].Ports)
	}
	events, cancel := d.Subscribe(8)
	defer cancel()
	// The watcher's polls without a change read no GID table.
	eventually(t, "light port polls", func() bool { return d.poll.lightReads.Load() >= 3 })
	if n := d.poll.fullReads.Load(); n != 1 {
		t.Fatalf("%d full discoveries by the port poll without a change, want 1 (New's)", n)
	}
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
	// One full read per poll that saw a change: 2, or 3 when a poll fell
	// between the two writes.
	if n := d.poll.fullReads.Load(); n != 2 && n != 3 {
		t.Fatalf("%d full discoveries after one state change, want 2 or 3", n)
	}
	n, _ = c.Status(ctx)
	for _, p := range n.HCAs[0].Ports {
		if p.Num == up.Num && (p.State != "DOWN" || p.PhysState != "DISABLED") {
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

func TestFullReadEvery(t *testing.T) {
	for poll, want := range map[time.Duration]int{time.Second: 30, 20 * time.Millisecond: 1500, 7 * time.Second: 4,
		30 * time.Second: 1, time.Minute: 1, 0: 1} {
		if got := fullReadEvery(poll); got != want {
			t.Errorf("fullReadEvery(%v) = %d, want %d", poll, got, want)
		}
	}
}

// TestPortPollReadsLightBetweenFullReads drives the hardware port poll by
// hand (no ticker): polls without a change make no full discovery, a
// state change makes one on the poll that sees it and is reported from
// it, and a GID change alone waits for the periodic full read.
func TestPortPollReadsLightBetweenFullReads(t *testing.T) {
	root := fixture(t, "rxe-two")
	dir := t.TempDir()
	d, err := New(Config{Node: "n", Socket: filepath.Join(dir, "s"), StateDir: dir, Fabric: "hardware", Sysfs: root,
		PortPoll: time.Second, Repl: ReplConfig{Off: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if d.poll.every != 30 {
		t.Fatalf("full read every %d polls at 1 s, want 30", d.poll.every)
	}
	events, cancel := d.Subscribe(8)
	defer cancel()
	full := func() uint64 { return d.poll.fullReads.Load() }
	gid2 := func(dev string) string {
		d.invMu.Lock()
		defer d.invMu.Unlock()
		for _, h := range d.inv {
			if h.Name == dev {
				for _, g := range h.Ports[0].GIDs {
					if g.Index == 2 {
						return g.GID.String()
					}
				}
			}
		}
		return ""
	}
	noEvent := func(when string) {
		t.Helper()
		select {
		case e := <-events:
			t.Fatalf("%s: event %+v", when, e)
		default:
		}
	}
	if full() != 1 {
		t.Fatalf("%d full reads after New, want 1 (the first poll)", full())
	}
	for range 5 {
		d.refreshPorts()
	}
	if full() != 1 {
		t.Fatalf("%d full reads after 5 polls without a change, want still 1", full())
	}
	noEvent("polls without a change")

	// The IP address of rxe1's netdev changes: only its GID table does.
	port1 := func(dev string) string { return filepath.Join(root, "class", "infiniband", dev, "ports", "1") }
	writeFile(t, filepath.Join(port1("rxe1"), "gids", "2"), "0000:0000:0000:0000:0000:ffff:c0a8:7b63")
	old := gid2("rxe1")
	d.refreshPorts()
	if full() != 1 || gid2("rxe1") != old {
		t.Fatalf("a GID change alone made a full read (%d, GID %s)", full(), gid2("rxe1"))
	}

	// rxe0's link goes down: the next poll reads it all and reports it.
	writeFile(t, filepath.Join(port1("rxe0"), "state"), "1: DOWN")
	writeFile(t, filepath.Join(port1("rxe0"), "phys_state"), "3: Disabled")
	d.refreshPorts()
	if full() != 2 {
		t.Fatalf("%d full reads after a state change, want 2", full())
	}
	select {
	case e := <-events:
		if e.Kind != status.EvPortStateChanged || e.Device != "rxe0" || e.Port != 1 || e.From != "ACTIVE" || e.To != "DOWN" ||
			e.Reason != "state,phys-state" {
			t.Fatalf("event %+v", e)
		}
	default:
		t.Fatal("no PortStateChanged on the poll that saw the state change")
	}
	noEvent("after the PortStateChanged (the GID change is only logged)")
	if gid2("rxe1") == old {
		t.Fatal("the full read did not pick up the GID change")
	}

	// Another GID change waits for the safety net: 30 polls after the
	// last full read.
	writeFile(t, filepath.Join(port1("rxe1"), "gids", "2"), "0000:0000:0000:0000:0000:ffff:c0a8:7b64")
	for i := 1; i < 30; i++ {
		d.refreshPorts()
	}
	if full() != 2 || gid2("rxe1") != "192.168.123.99" {
		t.Fatalf("29 polls: %d full reads, GID %s; want 2 and the old GID", full(), gid2("rxe1"))
	}
	d.refreshPorts()
	if full() != 3 || gid2("rxe1") != "192.168.123.100" {
		t.Fatalf("30th poll: %d full reads, GID %s; want 3 and the new GID", full(), gid2("rxe1"))
	}
	noEvent("GID changes")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDescribeLocalWithoutAFullRead: a shim's lookup_hca of a local route
// is answered from the port poll's inventory while a light read finds the
// ports unchanged (no GID table is read: here the GID tables are made
// unreadable and the answer still comes), and from a full discovery, with
// the port's state of the moment, once a port changed.
func TestDescribeLocalWithoutAFullRead(t *testing.T) {
	root := fixture(t, "mlx4-dual")
	d, _ := testDaemon(t, func(cfg *Config) { cfg.Fabric = "hardware"; cfg.Sysfs = root; cfg.PortPoll = time.Hour })
	d.invMu.Lock()
	inv := d.inv
	d.invMu.Unlock()
	var num uint8
	var lid uint16
	for _, p := range inv[0].Ports {
		if p.LID != 0 {
			num, lid = p.Num, p.LID
		}
	}
	if lid == 0 {
		t.Fatalf("no port with a LID in %+v", inv)
	}
	route := ownerproto.Route{LID: lid}
	ports := filepath.Join(root, "class", "infiniband", "mlx4_0", "ports")
	var gids []string
	for _, p := range inv[0].Ports {
		g := filepath.Join(ports, itoa(p.Num), "gids")
		if err := os.Rename(g, g+".away"); err != nil {
			t.Fatal(err)
		}
		gids = append(gids, g)
	}
	if _, err := pathsel.Discover(pathsel.DiscoverOptions{SysfsRoot: root}); err == nil {
		t.Fatal("a full discovery works without the GID tables: the test shows nothing")
	}
	h, err := d.describeLocal(route)
	if err != nil {
		t.Fatalf("describe without a change needed a full read: %v", err)
	}
	if p, ok := h.PortByLID(lid); !ok || p.State != verbs.PortActive {
		t.Fatalf("described %+v", h)
	}
	// A port changed: the answer comes from a full read, with its state.
	for _, g := range gids {
		if err := os.Rename(g+".away", g); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ports, itoa(num), "state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if h, err = d.describeLocal(route); err != nil {
		t.Fatal(err)
	}
	if p, ok := h.PortByLID(lid); !ok || p.State != verbs.PortDown {
		t.Fatalf("after the port went down, described %+v", h)
	}
}
