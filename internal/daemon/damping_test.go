package daemon

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/status"
)

// TestPortFlapDamping drives the hardware port poll by hand on a fixture
// and the damper's clock by hand: two flaps of a port a second apart
// suppress it, until the penalty has decayed below the reuse threshold;
// polls that see the same outage, or fail, add nothing; the status
// shows it all.
func TestPortFlapDamping(t *testing.T) {
	d, root, now := clockedFixtureDaemon(t, "")
	clock := *now
	d.damp.now = func() time.Time { return clock }
	setState := func(up bool) { t.Helper(); setRxe0Port1(t, d, root, up) }
	damping := func() (*status.PortDamping, status.Node) {
		t.Helper()
		n := d.Status()
		for _, h := range n.HCAs {
			for _, p := range h.Ports {
				if h.Name == "rxe0" && p.Num == 1 {
					return p.Damping, n
				}
			}
		}
		t.Fatalf("no rxe0 port 1 in %+v", n.HCAs)
		return nil, n
	}
	// the defaults: damping, and port health judged (Config.Health "")
	if pd, n := damping(); pd != nil || n.Damping != "half-life=30s,suppress=1500,reuse=750,penalty=1000,max-suppress=5m0s" ||
		n.Health != "window=10s,link-errors=3,min-seq-errors=20,seq-error-ratio=0.01,clear=30s" {
		t.Fatalf("before any flap: damping %+v, config %q, health %q", pd, n.Damping, n.Health)
	}

	setState(false)
	d.refreshPorts() // the same outage, seen again
	pd, n := damping()
	if pd == nil || pd.Penalty != 1000 || pd.Flaps != 1 || pd.Suppressed || n.Totals.SuppressedPorts != 0 {
		t.Fatalf("one flap: %+v, %d suppressed; want penalty 1000, not suppressed", pd, n.Totals.SuppressedPorts)
	}
	// The link comes back. A read that fails then is no flap (the
	// device it fails on is missing from it), and neither is the read
	// after it.
	clock = clock.Add(time.Second)
	setState(true)
	writeFile(t, filepath.Join(root, "class", "infiniband", "rxe0", "ports", "1", "state"), "garbage")
	d.refreshPorts()
	if d.invErr == nil {
		t.Fatal("a port state that does not parse did not fail the read")
	}
	setState(true)
	if pd, n := damping(); pd == nil || pd.Flaps != 1 || pd.Suppressed {
		t.Fatalf("after a failed read: %+v, want still 1 flap", pd)
	} else {
		for _, h := range n.HCAs {
			for _, p := range h.Ports {
				if p.Damping != nil && (h.Name != "rxe0" || p.Num != 1) {
					t.Fatalf("after a failed read: %s:%d, which never went down, has %+v", h.Name, p.Num, p.Damping)
				}
			}
		}
	}
	setState(false)
	pd, n = damping()
	if pd == nil || pd.Flaps != 2 || !pd.Suppressed || n.Totals.SuppressedPorts != 1 {
		t.Fatalf("two flaps 1 s apart: %+v, %d suppressed; want suppressed", pd, n.Totals.SuppressedPorts)
	}
	// 1000·2^(-1/30) + 1000 = 1977: reusable once decayed to 750, 41.9 s later.
	reuse := pd.ReuseAt.Sub(clock)
	if reuse < 41*time.Second || reuse > 43*time.Second {
		t.Fatalf("reuse in %v, want about 42 s", reuse)
	}
	setState(true) // the link is back; it stays suppressed
	clock = clock.Add(reuse - time.Millisecond)
	if pd, _ := damping(); pd == nil || !pd.Suppressed || !pd.ReuseAt.Equal(clock.Add(time.Millisecond)) {
		t.Fatalf("just before reuse: %+v", pd)
	}
	clock = clock.Add(time.Millisecond)
	pd, n = damping()
	if pd == nil || pd.Suppressed || !pd.ReuseAt.IsZero() || n.Totals.SuppressedPorts != 0 {
		t.Fatalf("at reuse: %+v, %d suppressed; want a penalty, not suppressed", pd, n.Totals.SuppressedPorts)
	}
	// The device goes away: its ports that were up are down.
	clock = clock.Add(time.Second)
	d.damp.observe(nil)
	if pd, _ := damping(); pd == nil || pd.Flaps != 3 || !pd.Suppressed {
		t.Fatalf("device gone: %+v, want a third flap that suppresses", pd)
	}
}

// TestPortFlapDampingConfig: --damping off never suppresses; a setting
// that does not parse stops ibpathd with an error naming it.
func TestPortFlapDampingConfig(t *testing.T) {
	dir := t.TempDir()
	_, err := New(Config{Node: "n", Socket: filepath.Join(dir, "s"), StateDir: dir, Fabric: "sim", Damping: "half-life=0s",
		Repl: ReplConfig{Off: true}}, nil)
	if err == nil || !strings.Contains(err.Error(), "damping") || !strings.Contains(err.Error(), "half-life") {
		t.Fatalf("New with --damping half-life=0s: %v; want an error naming the setting", err)
	}
	d, err := New(Config{Node: "n", Socket: filepath.Join(dir, "s"), StateDir: dir, Fabric: "sim", Damping: "off",
		Repl: ReplConfig{Off: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if s := d.Status().Damping; s != "off" {
		t.Fatalf("status damping %q, want off", s)
	}
	for range 5 {
		d.damp.observe(nil)
		d.refreshPorts()
	}
	for _, h := range d.Status().HCAs {
		for _, p := range h.Ports {
			if p.Damping != nil {
				t.Fatalf("damping off: port %s:%d has %+v", h.Name, p.Num, p.Damping)
			}
		}
	}
}

// clockedFixtureDaemon is a daemon (not served) on a copy of the rxe-two
// sysfs fixture, with the port health rule health ("" for the default);
// *start is its start, for the test's clock of its flap damping.
func clockedFixtureDaemon(t *testing.T, health string) (d *Daemon, root string, start *time.Time) {
	t.Helper()
	root = fixture(t, "rxe-two")
	dir := t.TempDir()
	d, err := New(Config{Node: "n", Socket: filepath.Join(dir, "s"), StateDir: dir, Fabric: "hardware", Sysfs: root,
		Health: health, Repl: ReplConfig{Off: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d, root, &d.started
}

// setRxe0Port1 sets the fixture's rxe0 port 1 up or down and has d read
// the ports.
func setRxe0Port1(t *testing.T, d *Daemon, root string, up bool) {
	t.Helper()
	port1 := filepath.Join(root, "class", "infiniband", "rxe0", "ports", "1")
	if up {
		writeFile(t, filepath.Join(port1, "state"), "4: ACTIVE")
		writeFile(t, filepath.Join(port1, "phys_state"), "5: LinkUp")
	} else {
		writeFile(t, filepath.Join(port1, "state"), "1: DOWN")
		writeFile(t, filepath.Join(port1, "phys_state"), "3: Disabled")
	}
	d.refreshPorts()
}
