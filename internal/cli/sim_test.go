package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
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
	for _, args := range [][]string{{"sim", "--seed", "3"}, {"demo", "-v=false"}} {
		out, err := runApp(t, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		for _, want := range []string{"PATH_MIG", "layer 1: armed", "handed to layer 2 (cross-NIC): DEVICE_FATAL",
			"QP B layer 2: fault (layer 1 handed over: DEVICE_FATAL)", "completing again on both sides, through node0/mlx5_0 <-> node1/mlx5_0",
			"both cables of node0/mlx5_1 pulled", "QP B layer 1: handed to layer 2 (cross-NIC): primary port down and no alternate",
			"QP B: back home on both sides, completing through node0/mlx5_1 <-> node1/mlx5_1", "QP B layer 1: registered again",
			"layer 2: switching back enabled"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out)
			}
		}
		if strings.Contains(out, " completed with ") {
			t.Errorf("%v: an error completion reached the application:\n%s", args, out)
		}
	}
}

// TestLinkLayerIBIsTheDefault: --link-layer ib is today's scenario, byte
// for byte.
func TestLinkLayerIBIsTheDefault(t *testing.T) {
	def, err := runApp(t, "sim", "--seed", "3")
	if err != nil {
		t.Fatal(err)
	}
	ib, err := runApp(t, "sim", "--seed", "3", "--link-layer", "ib")
	if err != nil {
		t.Fatal(err)
	}
	if ib != def {
		t.Fatalf("--link-layer ib differs from the default:\n%s\n---\n%s", ib, def)
	}
}

func TestLinkLayerRoCE(t *testing.T) {
	out, err := runApp(t, "sim", "--link-layer", "roce", "--seed", "9")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"(seed 9, RoCE)", "node0/rxe0 + node1/rxe0 QP A layer 1: unsupported: ",
		"is Ethernet; alternate paths exist only on InfiniBand", "async event PORT_ERR",
		"layer 2 does not protect QP A in this script: plain verbs from here", "async event DEVICE_FATAL",
		"node0/rxe1 QP B layer 2: fault (DEVICE_FATAL) -> await-ack", "node1/rxe1 QP B layer 2: node0's notification on node1/rxe0",
		"completing again on both sides, through node0/rxe0 <-> node1/rxe0", "node0/rxe1 QP B layer 2: fault (PORT_ERR) -> await-ack",
		"QP B: back home on both sides, completing through node0/rxe1 <-> node1/rxe1", "layer 2: switching back enabled"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "mlx5") || strings.Contains(out, "PATH_MIG") {
		t.Errorf("RoCE output names an IB device or a migration:\n%s", out)
	}
	if strings.Contains(out, " completed with ") {
		t.Errorf("an error completion reached the application:\n%s", out)
	}
	again, err := runApp(t, "sim", "--link-layer=roce", "--seed=9")
	if err != nil || again != out {
		t.Errorf("same seed, different output (err %v):\n%s\n---\n%s", err, out, again)
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
	for _, args := range [][]string{{"sim", "--bogus"}, {"sim", "--link-layer", "bogus"}, {"sim", "extra"}, {"sim", "--seed", "x"}} {
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
