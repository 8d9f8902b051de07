package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/demo"
	"github.com/ibpath/ibpath/internal/simrun"
	"github.com/ibpath/ibpath/verbs"
)

// runApp runs the CLI with args and returns its output, and its error
// output as an error when the exit code is not 0.
func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Run(append([]string{"ibpath"}, args...), &out, &errOut); code != ExitOK {
		return out.String(), fmt.Errorf("exit %d: %s", code, errOut.String())
	}
	return out.String(), nil
}

func TestSimCommand(t *testing.T) {
	out, err := runApp(t, "demo", "--seed", "3", "-v=false")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"ibpath simulator demo (seed 3)", "under the shim's runtime", "layer 1: armed, primary port 1, alternate port 2",
		"FAULT: cable of node0/mlx5_0 port 1 pulled", "node0 A layer 1: migrated port 1 -> port 2: proactive",
		"FAULT: both cables of node0/mlx5_1 pulled", "node0 B layer 1: handed to layer 2 (cross-NIC): primary port down and no alternate",
		"node0 B layer 2: failover onto the backup mlx5_0", "node0 B layer 2: back home on mlx5_1", "node0 B layer 1: protects the QP again",
		"FAULT: HCA node0/mlx5_1 dies", "node0 B layer 1: handed to layer 2 (cross-NIC): DEVICE_FATAL",
		"QP B: completing again on both sides", "verdict: PASS — 2 QPs (4 sides)", "QP A home, QP B on the backup (mlx5_0)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "error reaches the application") || strings.Contains(out, "VIOLATION") {
		t.Errorf("an error or a violation in the scripted run:\n%s", out)
	}
	if !strings.HasSuffix(strings.TrimRight(out, "\n"), "on the backup (mlx5_0)") {
		t.Errorf("the verdict is not the last line:\n%s", out)
	}
}

// TestSimRandom: --random draws the faults from --seed: the same seed
// replays, another seed plays another schedule.
func TestSimRandom(t *testing.T) {
	a, err := runApp(t, "sim", "--random", "--seed", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, a)
	}
	b, err := runApp(t, "sim", "--random", "--seed=5")
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if a == b || !strings.Contains(a, "schedule drawn from seed 2:") || !strings.Contains(b, "schedule drawn from seed 5:") {
		t.Errorf("seeds 2 and 5: the same run, or no schedule said:\n%s\n---\n%s", a, b)
	}
	again, err := runApp(t, "sim", "--seed=2", "--random")
	if err != nil || again != a {
		t.Errorf("--random --seed 2 twice differs (err %v):\n%s\n---\n%s", err, a, again)
	}
}

// TestSimViolationExit: a run whose verdict is FAIL exits 6 and says so
// on stderr; the timeline names the violation.
func TestSimViolationExit(t *testing.T) {
	simHook = func(o *demo.Options) {
		dropped := false
		o.Tamper = func(q *simrun.QP, wcs []verbs.WC) []verbs.WC {
			if !dropped && q.Name() == "node0 A" && len(wcs) > 0 && q.Recvd > 100 {
				dropped = true
				return wcs[1:] // the application never gets a completion
			}
			return wcs
		}
	}
	defer func() { simHook = nil }()
	var out, errOut bytes.Buffer
	code := Run([]string{"ibpath", "sim"}, &out, &errOut)
	if code != ExitViolation || !strings.HasPrefix(errOut.String(), "ibpath: sim: verdict FAIL: ") {
		t.Fatalf("exit %d, stderr %q; want %d and the verdict", code, errOut.String(), ExitViolation)
	}
	if !strings.Contains(out.String(), "verdict: FAIL — ") || !strings.Contains(out.String(), "violation: node0 A QP ") {
		t.Errorf("the output does not name the violation:\n%s", out.String())
	}
}

func TestSimVerbose(t *testing.T) {
	for _, c := range []struct {
		args  []string
		level int
	}{{nil, 0}, {[]string{"-v"}, 1}, {[]string{"--verbose"}, 1}, {[]string{"--verbose=2"}, 2}, {[]string{"-v=0"}, 0}, {[]string{"--verbose=false"}, 0}} {
		var got int
		simHook = func(o *demo.Options) {
			got = o.Verbose
			o.LinkLayer = 9 // refused by demo.Run: nothing is played
		}
		var out, errOut bytes.Buffer
		code := Run(append([]string{"ibpath", "sim"}, c.args...), &out, &errOut)
		simHook = nil
		if got != c.level || code != ExitError {
			t.Errorf("%v: level %d (exit %d: %s), want %d", c.args, got, code, errOut.String(), c.level)
		}
	}
	for _, v := range []string{"3", "-1", "x", "1.5"} {
		var out, errOut bytes.Buffer
		code := Run([]string{"ibpath", "sim", "--verbose=" + v}, &out, &errOut)
		if code != ExitUsage || !strings.Contains(errOut.String(), "verbose level") || out.Len() != 0 {
			t.Errorf("--verbose=%s: exit %d, stderr %q, %d bytes out; want a usage error", v, code, errOut.String(), out.Len())
		}
	}
}

func TestLinkLayerRoCE(t *testing.T) {
	out, err := runApp(t, "sim", "--link-layer", "roce", "--seed", "9")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"(seed 9, RoCE)", "layer 1: unsupported: RoCE has no automatic path migration",
		"node0 A: async event PORT_ERR on rxe0 port 1", "node0 A layer 2: failover onto the backup rxe1", "node0 A layer 2: back home on rxe0",
		"FAULT: the cable of node0/rxe1 pulled", "FAULT: NIC node0/rxe1 dies", "node0 B: async event DEVICE_FATAL on rxe1: kept from the application",
		"verdict: PASS", "QP B on the backup (rxe0)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "mlx5") || strings.Contains(out, "PATH_MIG") {
		t.Errorf("RoCE output names an IB device or a migration:\n%s", out)
	}
}

func TestLinkLayerBogus(t *testing.T) {
	for _, v := range []string{"bogus", "", "IB", "ethernet"} {
		out, err := runApp(t, "sim", "--link-layer", v)
		if err == nil {
			t.Fatalf("--link-layer %q accepted:\n%s", v, out)
		}
		msg := err.Error()
		if !strings.Contains(msg, "--link-layer") || !strings.Contains(msg, `"`+v+`"`) ||
			!strings.Contains(msg, "ib") || !strings.Contains(msg, "roce") {
			t.Errorf("--link-layer %q: error %q, want it to name the flag, the value, ib and roce", v, msg)
		}
		if strings.Contains(out, "ibpath simulator demo") {
			t.Errorf("--link-layer %q: the demo ran anyway:\n%s", v, out)
		}
	}
}

func TestSimUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"sim", "--bogus"}, {"sim", "--link-layer", "bogus"}, {"sim", "extra"}, {"sim", "--seed", "x"},
		{"sim", "--verbose=9"}, {"sim", "-v", "2"}} {
		var out, errOut bytes.Buffer
		if code := Run(append([]string{"ibpath"}, args...), &out, &errOut); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (usage)\n%s%s", args, code, ExitUsage, out.String(), errOut.String())
		}
		if !strings.HasPrefix(errOut.String(), "ibpath: sim: ") {
			t.Errorf("%v: error output %q, want it prefixed \"ibpath: sim: \"", args, errOut.String())
		}
		if strings.Contains(out.String(), "ibpath simulator demo") {
			t.Errorf("%v: the demo ran anyway:\n%s", args, out.String())
		}
	}
}
