package simrun

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// ready builds a world with the switch back on and runs it until both
// layers protect every QP.
func ready(t *testing.T, c Config) *World {
	t.Helper()
	if c.Env == nil {
		c.Env = map[string]string{"IBPATH_SWITCHBACK": "on"}
	}
	w, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if err := w.Ready(time.Second); err != nil {
		t.Fatal(err)
	}
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSteppedRuntimesWaitForTheirStep: the world's runtimes start no
// goroutine and act only when stepped: a pulled cable is migrated away
// from at the next step, not while the fabric runs on its own.
func TestSteppedRuntimesWaitForTheirStep(t *testing.T) {
	before := runtime.NumGoroutine()
	w := ready(t, Config{Seed: 1})
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after building a world, %d before: a stepped runtime starts none", n, before)
	}
	a := w.QPs[0]
	if s := a.Status(); s.APM != fsm.APMArmed.String() || s.Primary.String() != "port 1" {
		t.Fatalf("node0 A ready: %+v", s)
	}
	must(t, w.SetCable("node0", a.Proc.Device, 1, false))
	w.Fabric.RunFor(10 * time.Millisecond) // the fabric alone: no runtime steps
	if s := a.Status(); s.Primary.String() != "port 1" {
		t.Fatalf("node0 A moved to %s without a step", s.Primary)
	}
	must(t, w.RunUntil(w.Now()+w.Config().Step))
	if s := a.Status(); s.Primary.String() != "port 2" {
		t.Fatalf("node0 A after a step: %+v; want it migrated to port 2", s)
	}
}

// trace is every record of a run, as text with its time.
func trace(t *testing.T, c Config, faults func(w *World)) (string, Verdict) {
	t.Helper()
	var b strings.Builder
	c.Observe = func(r Record) {
		name := ""
		if r.Proc != nil {
			name = r.Proc.Name
		}
		fmt.Fprintf(&b, "%v %s %d %s %+v %v %+v %+v %+v\n", r.At, name, r.Kind, r.Text, r.Event.Type, r.Kept, r.Status, r.Ev, r.Trace)
	}
	c.Trace = true
	w := ready(t, c)
	faults(w)
	if _, err := w.Quiesce(time.Second); err != nil {
		t.Fatal(err)
	}
	return b.String(), w.Verdict()
}

// TestReplays: the same configuration and faults give the same records,
// times included; another seed, with a lossy port, others.
func TestReplays(t *testing.T) {
	faults := func(w *World) {
		must(t, w.SetLoss("node0", "mlx5_0", 1, 0.05))
		must(t, w.RunUntil(w.Now()+20*time.Millisecond))
		must(t, w.SetLoss("node0", "mlx5_0", 1, 0))
		must(t, w.SetCable("node1", "mlx5_1", 1, false))
		must(t, w.SetCable("node1", "mlx5_1", 2, false))
		must(t, w.RunUntil(w.Now()+50*time.Millisecond))
		must(t, w.SetCable("node1", "mlx5_1", 1, true))
		must(t, w.SetCable("node1", "mlx5_1", 2, true))
		must(t, w.RunUntil(w.Now()+150*time.Millisecond))
	}
	a, va := trace(t, Config{Seed: 3}, faults)
	b, _ := trace(t, Config{Seed: 3}, faults)
	c, _ := trace(t, Config{Seed: 4}, faults)
	if a != b {
		t.Fatal("the same run twice recorded different things")
	}
	if a == c {
		t.Fatal("seeds 3 and 4 recorded the same run under loss")
	}
	if !va.OK() || va.Messages == 0 {
		t.Errorf("verdict %v, %d messages", va.Violations, va.Messages)
	}
	for _, want := range []string{"layer 2 failover", "layer 2 switched back", "loss on node0/mlx5_0 port 1: 5%"} {
		if !strings.Contains(a, want) {
			t.Errorf("the records lack %q", want)
		}
	}
}

// TestVerdictChecks: what the applications must see, and what the
// verdict makes of it.
func TestVerdictChecks(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		w := ready(t, Config{Seed: 1})
		must(t, w.RunUntil(w.Now()+20*time.Millisecond))
		if ok, err := w.Quiesce(time.Second); !ok || err != nil {
			t.Fatalf("quiesce: %v %v", ok, err)
		}
		v := w.Verdict()
		if !v.OK() || v.WRs != v.Messages || v.WRs < 4*150 {
			t.Fatalf("verdict %+v", v)
		}
		for _, q := range w.QPs {
			if q.SendDone != q.Sent || q.Recvd != q.Peer.Sent || q.Errors != 0 {
				t.Errorf("%s: %d sent, %d done, %d of %d received, %d errors", q.Name(), q.Sent, q.SendDone, q.Recvd, q.Peer.Sent, q.Errors)
			}
		}
	})
	tamper := func(name string, edit func(n int, wcs []verbs.WC) []verbs.WC) func(q *QP, wcs []verbs.WC) []verbs.WC {
		n := 0
		return func(q *QP, wcs []verbs.WC) []verbs.WC {
			if q.Name() != name || len(wcs) == 0 {
				return wcs
			}
			n++
			return edit(n, wcs)
		}
	}
	for _, c := range []struct {
		name   string
		tamper func(q *QP, wcs []verbs.WC) []verbs.WC
		want   string
	}{
		{"a completion twice", tamper("node0 A", func(n int, wcs []verbs.WC) []verbs.WC {
			if n == 40 {
				return append(wcs, wcs[0])
			}
			return wcs
		}), "once, in"},
		{"a completion lost", tamper("node1 B", func(n int, wcs []verbs.WC) []verbs.WC {
			if n == 40 {
				return wcs[1:]
			}
			return wcs
		}), "node1 B QP "},
		{"a message's data changed", tamper("node0 B", func(n int, wcs []verbs.WC) []verbs.WC {
			if n == 40 {
				wcs[0].ImmData++
			}
			return wcs
		}), "node0 B QP "},
		{"another QP's completion", tamper("node1 A", func(n int, wcs []verbs.WC) []verbs.WC {
			if n == 40 {
				wcs[0].QPNum++
			}
			return wcs
		}), "names QP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := ready(t, Config{Seed: 1, Tamper: c.tamper})
			must(t, w.RunUntil(w.Now()+20*time.Millisecond))
			if _, err := w.Quiesce(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			v := w.Verdict()
			if v.OK() || !strings.Contains(strings.Join(v.Violations, "\n"), c.want) {
				t.Fatalf("violations %q; want one with %q", v.Violations, c.want)
			}
		})
	}
	// Both HCAs of a host die: the errors reach the applications. Allowed
	// (nothing healthy is left), the verdict holds; not allowed, it
	// fails.
	for _, allow := range []bool{true, false} {
		t.Run(fmt.Sprintf("host lost, allowed %v", allow), func(t *testing.T) {
			w := ready(t, Config{Seed: 1})
			if allow {
				for _, q := range w.QPs {
					w.AllowSurface(q, "both HCAs of node0 died")
				}
			}
			must(t, w.RunUntil(w.Now()+5*time.Millisecond))
			must(t, w.KillHCA("node0", "mlx5_0"))
			must(t, w.KillHCA("node0", "mlx5_1"))
			must(t, w.RunUntil(w.Now()+time.Second))
			if _, err := w.Quiesce(time.Second); err != nil {
				t.Fatal(err)
			}
			v := w.Verdict()
			surfaced := 0
			for _, o := range v.QPs {
				if o.Surfaced != "" {
					surfaced++
				}
			}
			if surfaced == 0 || v.OK() != allow {
				t.Fatalf("%d QP sides surfaced, violations %q; want errors, a verdict OK %v", surfaced, v.Violations, allow)
			}
		})
	}
}

// TestRoCE: on RoCE the world protects its QPs with layer 2 alone.
func TestRoCE(t *testing.T) {
	w := ready(t, Config{Seed: 1, LinkLayer: verbs.LinkLayerEthernet})
	for _, q := range w.QPs {
		if s := q.Status(); s.APM != fsm.APMUnsupported.String() || s.CrossNIC != fsm.SQDefault.String() || !strings.HasPrefix(q.Proc.Device, "rxe") {
			t.Errorf("%s on %s: %+v", q.Name(), q.Proc.Device, s)
		}
	}
	if _, err := New(Config{LinkLayer: 7}); err == nil {
		t.Error("link layer 7 accepted")
	}
}

// TestStallStopsTheProcess: a stalled process polls, posts and steps
// nothing for the stall's length (its peer's messages wait in its HCA),
// then takes everything up, with every check holding.
func TestStallStopsTheProcess(t *testing.T) {
	w := ready(t, Config{Seed: 1})
	must(t, w.RunUntil(w.Now()+5*time.Millisecond))
	var b *QP
	for _, q := range w.QPs {
		if q.Proc.Name == "node1 A" {
			b = q
		}
	}
	if err := w.Stall("node1", "C", time.Millisecond); err == nil {
		t.Fatal("a stall of a connection that does not exist accepted")
	}
	must(t, w.Stall("node1", "A", 10*time.Millisecond))
	sent, recvd := b.Sent, b.Recvd
	must(t, w.RunUntil(w.Now()+9*time.Millisecond))
	if b.Sent != sent || b.Recvd != recvd {
		t.Fatalf("a stopped process sent %d and received %d", b.Sent-sent, b.Recvd-recvd)
	}
	must(t, w.RunUntil(w.Now()+10*time.Millisecond))
	if b.Sent == sent || b.Recvd == recvd {
		t.Fatal("the process did not run again after its stall")
	}
	// Its runtime stops too: stalled while its peer's HCA loses every
	// cable, it does not take part in the failover until it runs again.
	must(t, w.Stall("node1", "A", 20*time.Millisecond))
	for _, n := range []uint8{1, 2} {
		must(t, w.SetCable("node0", "mlx5_0", n, false))
	}
	must(t, w.RunUntil(w.Now()+15*time.Millisecond))
	if s := b.Status(); s.CrossNIC != "" && s.CrossNIC != fsm.SQDefault.String() {
		t.Fatalf("a stopped process's layer 2 acted: %+v", s)
	}
	must(t, w.RunUntil(w.Now()+30*time.Millisecond))
	if s := b.Status(); s.CrossNIC != fsm.SQFallback.String() {
		t.Fatalf("not failed over once it ran again: %+v", s)
	}
	if ok, err := w.Quiesce(time.Second); err != nil || !ok {
		t.Fatalf("quiesce: %v %v", ok, err)
	}
	if v := w.Verdict(); !v.OK() {
		t.Fatalf("verdict: %v", v.Violations)
	}
}
