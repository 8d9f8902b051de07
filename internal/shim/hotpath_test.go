package shim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// buildHotpathCheck compiles cmd/libibpath/cbench/hotpath_check.c with
// the shim's hot path (hotpath.c) against a provider stub.
func buildHotpathCheck(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		tb.Skip("gcc not found")
	}
	src := filepath.Join("..", "..", "cmd", "libibpath")
	bin := filepath.Join(tb.TempDir(), "hotpath_check")
	out, err := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-I", src, "-o", bin,
		filepath.Join(src, "cbench", "hotpath_check.c"), filepath.Join(src, "hotpath.c"), filepath.Join(src, "divert.c"), "-lpthread").CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "verbs.h") {
			tb.Skip("libibverbs-dev is not installed (verbs.h missing); .ci/run installs it")
		}
		tb.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// TestHotPathRings runs the C checks of the shadow rings: recording,
// retirement by signaled completions, refused WRs, receives, partial
// entries, error completions, the handshake counters, inline copies,
// interception and diversion (a divert waits for a post in progress),
// ring order with two threads posting to one QP, removal and restoring
// the provider's ops.
func TestHotPathRings(t *testing.T) {
	bin := buildHotpathCheck(t)
	for _, single := range []string{"0", "1"} {
		cmd := exec.Command(bin, "test")
		cmd.Env = append(os.Environ(), "IBPATH_SINGLE_POSTER="+single)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "PASS") {
			t.Fatalf("hotpath_check test (IBPATH_SINGLE_POSTER=%s): %v\n%s", single, err, out)
		}
	}
}

// BenchmarkHotPath reports the ns the shim's Default-state wrappers add
// to post_send and poll_cq over direct calls to the same provider
// function, measured side by side in one C program (best of 5
// alternating rounds of 4M calls; no cgo in the timed loop), with the
// default atomic slot reservation and with IBPATH_SINGLE_POSTER=1.
func BenchmarkHotPath(b *testing.B) {
	for _, mode := range []struct{ name, single string }{{"shared", "0"}, {"single-poster", "1"}} {
		b.Run(mode.name, func(b *testing.B) { benchHotPath(b, mode.single) })
	}
}

func benchHotPath(b *testing.B, single string) {
	bin := buildHotpathCheck(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(bin, "bench")
		cmd.Env = append(os.Environ(), "IBPATH_SINGLE_POSTER="+single)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("hotpath_check bench: %v\n%s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line) // post_send direct_ns X shim_ns Y added_ns Z
			if len(f) != 7 {
				b.Fatalf("unexpected line %q", line)
			}
			for k := 1; k < 7; k += 2 {
				v, err := strconv.ParseFloat(f[k+1], 64)
				if err != nil {
					b.Fatalf("%q: %v", line, err)
				}
				b.ReportMetric(v, f[0]+"_"+f[k]+"/op")
			}
		}
	}
}
