package shim

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/syncbuf"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs/sim"
)

// TestSwitchBackDamped: A's cable flaps twice under traffic, a few
// virtual milliseconds apart, with flap damping on (half-life 200 ms).
// After the first failover both QPs switch back as soon as the cable is
// back; after the second, A's port is suppressed: both QPs stay on
// their backups, the traffic flowing there, A's status and log say
// until when, and they come home once the penalty has decayed below the
// reuse threshold, not before. Every message arrives once, in order.
func TestSwitchBackDamped(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 79, l2opts{env: map[string]string{EnvDamping: "half-life=200ms,max-suppress=10s", EnvSwitchDamping: "on"}})
	a := hosts[0]
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("A log:\n%s\nB log:\n%s", a.log, hosts[1].log)
		}
	})
	failedOverBoth(t, f, hosts, qa, qb, 1)
	if err := f.SetLink(a.port, true); err != nil {
		t.Fatal(err)
	}
	homeAgain(t, f, hosts, qa, qb)
	if s := qa.status(); s.Switchbacks != 1 || !s.SwitchbackHeldUntil.IsZero() {
		t.Fatalf("after one flap: %+v; want switched back, not held", s)
	}
	first := f.Now()
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A diverted again on PORT_ERR", qa.diverted)
	failedOverBoth(t, f, hosts, qa, qb, 2)
	key := pathsel.PortKey{Device: "mlx5_0", Port: 1}
	a.rt.mu.Lock()
	reuse, held := a.rt.damp.ReuseAt(key, f.Now())
	a.rt.mu.Unlock()
	if !held {
		t.Fatalf("A's port not suppressed by two flaps %v apart", f.Now()-first)
	}
	if err := f.SetLink(a.port, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("flaps %v apart; reuse %v after the second", f.Now()-first, reuse-f.Now())
	for f.Now() < reuse-2*time.Millisecond {
		switchStep(t, f, hosts, qa, qb)
		f.RunFor(time.Millisecond)
		if !qa.diverted() {
			t.Fatalf("A back home at virtual %v, before its port's reuse at %v", f.Now(), reuse)
		}
	}
	if s := qa.status(); s.SwitchbackHeldUntil.IsZero() || s.Switchbacks != 1 {
		t.Fatalf("held: A's status %+v; want its switch back held", s)
	}
	if n := strings.Count(a.log.String(), "layer 2 switch back held: the home port flapped\" "+qpnAttr(qa)); n != 1 {
		t.Fatalf("%d lines say A's switch back is held, want 1 (the hold's end moved with no new flap)", n)
	}
	homeAgain(t, f, hosts, qa, qb)
	if f.Now() < reuse {
		t.Fatalf("home at virtual %v, before the reuse at %v", f.Now(), reuse)
	}
	for _, q := range []*appQP{qa, qb} {
		if s := q.status(); s.Switchbacks != 2 || !s.SwitchbackHeldUntil.IsZero() {
			t.Fatalf("%s home: %+v; want 2 switch backs, none held", q.x.name, s)
		}
	}
	sendMoreClean(t, f, hosts, qa, qb, 100)
}

// TestBackupAvoidsDampedPort: layer 2's backup is another device with
// an ACTIVE port that flap damping does not suppress; with every other
// device's ports suppressed, the first with an ACTIVE port, said in
// the log; with damping off, the first.
func TestBackupAvoidsDampedPort(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 5}, Hosts: 2, HCAsPerHost: 3, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		damping string
		flapped []string
		want    string
		said    bool
	}{
		{"", nil, "mlx5_1", false},
		{"", []string{"mlx5_1"}, "mlx5_2", false},
		{"", []string{"mlx5_1", "mlx5_2"}, "mlx5_1", true},
		{"off", []string{"mlx5_1"}, "mlx5_1", false},
	} {
		r, lb := node0Runtime(t, f, map[string]string{EnvDamping: c.damping})
		r.mu.Lock()
		for _, dev := range c.flapped {
			for _, up := range []bool{false, true, false, true} {
				r.portFlap(dev, 1, up)
			}
		}
		r.mu.Unlock()
		name, ctx, err := r.chooseBackup("mlx5_0")
		r.Close()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		ctx.Close()
		said := (&l2host{log: lb}).logLine("every other device's ACTIVE ports are drained or suppressed") != ""
		if name != c.want || said != c.said {
			t.Errorf("damping %q, %v flapped: backup %s (said %v), want %s (%v)\n%s", c.damping, c.flapped, name, said, c.want, c.said, lb)
		}
	}
}

// TestSwitchBackMovesPerFlap measures layer 2's moves per flap with and
// without the switch-back hold (docs/PERFORMANCE.md, "Layer 2: moves
// per flap"): A's default cable flaps four times, down until both ends
// are on their backups, then up for 100 ms, with a 200 ms half-life. A
// move is a failover or a switch back of A's QP. Without the hold each
// flap is two moves (out, home); with it the QP stays on its backup from
// the second flap on until the penalty has decayed, then comes home once.
// Every message arrives once either way.
func TestSwitchBackMovesPerFlap(t *testing.T) {
	const flaps, upFor = 4, 100 * time.Millisecond
	moves := map[string]int{}
	for _, hold := range []string{"off", "on"} {
		f, hosts, qa, qb := expressWorld(t, 79, l2opts{env: map[string]string{EnvDamping: "half-life=200ms,max-suppress=10s", EnvSwitchDamping: hold}})
		a := hosts[0]
		for k := 0; k < flaps; k++ {
			home := !qa.diverted()
			if err := f.SetLink(a.port, false); err != nil {
				t.Fatal(err)
			}
			if home {
				waitFor(t, "A diverted on PORT_ERR", qa.diverted)
				failedOverBoth(t, f, hosts, qa, qb, qa.status().Failovers)
			} else {
				switchStep(t, f, hosts, qa, qb)
			}
			if err := f.SetLink(a.port, true); err != nil {
				t.Fatal(err)
			}
			up := f.Now()
			for f.Now() < up+upFor && (qa.diverted() || qb.diverted()) {
				switchStep(t, f, hosts, qa, qb)
				f.RunFor(200 * time.Microsecond)
				time.Sleep(50 * time.Microsecond)
			}
			t.Logf("hold %s, flap %d: up for %v, A %s", hold, k+1, f.Now()-up, map[bool]string{true: "on its backup", false: "home"}[qa.diverted()])
			for f.Now() < up+upFor {
				switchStep(t, f, hosts, qa, qb)
				f.RunFor(time.Millisecond)
			}
		}
		homeAgain(t, f, hosts, qa, qb)
		s := qa.status()
		moves[hold] = s.Failovers + s.Switchbacks
		t.Logf("hold %s: %d flaps, %d failovers and %d switch backs of A's QP", hold, flaps, s.Failovers, s.Switchbacks)
		sendMoreClean(t, f, hosts, qa, qb, 100)
	}
	if moves["off"] != 2*flaps || moves["on"] >= moves["off"] {
		t.Fatalf("moves: %d without the hold (want %d), %d with it (want fewer)", moves["off"], 2*flaps, moves["on"])
	}
}

// node0Runtime is a runtime of node0 of fabric f (its devices and
// clock) configured by env, and its log.
func node0Runtime(t *testing.T, f *sim.Fabric, vars map[string]string) (*Runtime, *syncbuf.Buffer) {
	t.Helper()
	cfg, err := FromEnv(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	lb := &syncbuf.Buffer{}
	r := NewRuntime(cfg, slog.New(slog.NewTextHandler(lb, nil)))
	r.fo.clock = f
	r.SetProvider(f.Host("node0"))
	return r, lb
}
