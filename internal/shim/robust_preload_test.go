package shim

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	fuzzSeed  = flag.Uint64("shim.fuzzseed", 0, "seed of the random verb programs (0: from the clock, printed)")
	fuzzProgs = flag.Int("shim.fuzzprogs", 10000, "random verb programs per link layer")
)

// buildVerbfuzz compiles testdata/verbfuzz.c against the bed's stand-in
// libibverbs.
func buildVerbfuzz(t *testing.T, b preloadBed) string {
	t.Helper()
	td, _ := filepath.Abs("testdata")
	bin := filepath.Join(b.dir, "verbfuzz")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", bin, filepath.Join(td, "verbfuzz.c"), "-L"+b.dir, "-libverbs",
		"-ldl", "-lpthread", "-Wl,-rpath,"+b.dir).CombinedOutput(); err != nil {
		t.Fatalf("gcc verbfuzz.c: %v\n%s", err, out)
	}
	return bin
}

// runVerbfuzz runs bin with args, under the shim when shim is set, bounded
// by limit (a hang fails the test with the seed).
func runVerbfuzz(t *testing.T, b preloadBed, bin string, shim bool, env []string, limit time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	c.Env = append(c.Environ(), env...)
	if shim {
		c.Env = append(c.Env, "LD_PRELOAD="+b.shim, "IBPATH_SOCKET=off", "IBPATH_LOG=error")
	}
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	if err := c.Run(); err != nil {
		t.Fatalf("verbfuzz %v (shim %v, env %v): %v (a crash, or a hang past %v)\nstderr (tail):\n%s", args, shim, env, err, limit,
			tail(e.String(), 2000))
	}
	return o.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestPreloadRobustness: seeded random verb programs (testdata/verbfuzz.c:
// contexts, PDs, every kind of MR, CQs and extended CQs, SRQs, QPs of
// every type, modifies legal and not, posts of every opcode, polls,
// channels, async reads, fork, dlopen, threads) see exactly the same
// under the shim as without it, on RoCE and InfiniBand ports, and on RoCE
// with a second device that layer 2 mirrors everything on: every return code,
// errno and completion (a hash per program, the first differing program
// traced step by step on failure). None crashes or hangs, and the shim's
// memory stays bounded: after the programs its RSS is within 48 MiB of
// the program's without it, and the second half of the programs adds
// under 8 MiB to it (every QP's rings, context tables and wrappers freed).
// The seed is printed; -shim.fuzzseed replays it; -shim.fuzzprogs sets
// the count (10,000, with -short too).
func TestPreloadRobustness(t *testing.T) {
	b := buildBed(t)
	bin := buildVerbfuzz(t, b)
	seed := *fuzzSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("verbfuzz seed %d (replay: go test ./internal/shim -run TestPreloadRobustness -shim.fuzzseed %d)", seed, seed)
	// the programs are C processes (the race detector is in the test
	// binary only): 10,000 take about a second with the shim
	n := *fuzzProgs
	rss := func(out string) int {
		i := strings.LastIndex(out, "rss ")
		v, _ := strconv.Atoi(strings.TrimSpace(out[i+4:]))
		return v
	}
	for _, ll := range []string{"eth", "ib", "eth+backup"} {
		env := []string{"FAKE_LINK_LAYER=" + strings.TrimSuffix(ll, "+backup")}
		if strings.HasSuffix(ll, "+backup") {
			// a second stand-in device: layer 2 mirrors every PD, MR,
			// SRQ and RC QP on it (shadow rings, backup resources)
			env = append(env, "FAKE_DEVICES=2")
		}
		plain := runVerbfuzz(t, b, bin, false, env, 2*time.Minute, fmt.Sprint(seed), fmt.Sprint(n))
		shimmed := runVerbfuzz(t, b, bin, true, env, 2*time.Minute, fmt.Sprint(seed), fmt.Sprint(n))
		pl, sl := strings.Split(plain, "\n"), strings.Split(shimmed, "\n")
		if len(pl) != len(sl) || len(pl) < n {
			t.Fatalf("%s: %d lines without the shim, %d with, for %d programs", ll, len(pl), len(sl), n)
		}
		for i := 0; i < n; i++ {
			if pl[i] == sl[i] {
				continue
			}
			p := strings.Fields(pl[i])[0]
			a := runVerbfuzz(t, b, bin, false, env, time.Minute, fmt.Sprint(seed), "0", p)
			c := runVerbfuzz(t, b, bin, true, env, time.Minute, fmt.Sprint(seed), "0", p)
			al, cl := strings.Split(a, "\n"), strings.Split(c, "\n")
			for k := range min(len(al), len(cl)) {
				if al[k] != cl[k] {
					t.Fatalf("%s: program %s of seed %d: step %d is %q under the shim, %q without\nwithout:\n%s", ll, p, seed, k, cl[k], al[k], a)
				}
			}
			t.Fatalf("%s: program %s of seed %d differs under the shim\nwithout:\n%s\nwith:\n%s", ll, p, seed, a, c)
		}
		if d := rss(shimmed) - rss(plain); d > 48<<10 {
			t.Errorf("%s: the shim's process ended with %d KiB more RSS than without it", ll, d)
		}
		if ll == "eth" {
			half := runVerbfuzz(t, b, bin, true, env, 2*time.Minute, fmt.Sprint(seed), fmt.Sprint(n/2))
			if g := rss(shimmed) - rss(half); g > 8<<10 {
				t.Errorf("the second %d programs grew the shim's process by %d KiB (%d KiB after %d, %d after %d): something is not freed",
					n-n/2, g, rss(half), n/2, rss(shimmed), n)
			}
		}
	}
}
