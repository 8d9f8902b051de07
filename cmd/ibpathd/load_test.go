package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
)

// BenchmarkOwnerProcesses: ibpathd (a process of its own, on the
// simulated fabric) with 1,000 owner processes of 100 QPs each attached
// (testdata/ownerload.c, a small C owner that answers every command):
// ibpathd's RSS and its CPU while the owners are attached and idle, the
// time of `ibpath status` (100 QP rows, every count) and of the whole
// status through the socket, the RSS after those, and an arm of every QP
// relayed to every owner. IBPATH_LOAD_OWNERS sets another number of owners.
func BenchmarkOwnerProcesses(b *testing.B) {
	if _, err := exec.LookPath("gcc"); err != nil {
		b.Skip("gcc not found")
	}
	owners, per := 1000, 100
	if v := os.Getenv("IBPATH_LOAD_OWNERS"); v != "" {
		owners, _ = strconv.Atoi(v)
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "ownerload")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "ownerload.c")).CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, out)
	}
	d := startDaemon(b, "node0", dir, "--fabric", "sim", "--no-replication", "--max-conns-per-user", strconv.Itoa(owners+16))
	var stdins []io.WriteCloser
	b.Cleanup(func() {
		for _, w := range stdins {
			w.Close()
		}
	})
	for i := range owners {
		c := exec.Command(bin, d.socket, strconv.Itoa(per), strconv.Itoa(0x10000+i*per))
		in, err := c.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := c.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			b.Fatalf("owner %d: %v", i, err)
		}
		stdins = append(stdins, in)
		go c.Wait()
		if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "attached\n" {
			b.Fatalf("owner %d said %q: %v", i, l, err)
		}
	}
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := d.client.StatusQPs(ctx, 0)
		if err == nil && n.QPsTotal >= owners*per {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the QPs never all arrived: %d of %d (%v)", n.QPsTotal, owners*per, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pid := d.cmd.Process.Pid
	rssAttached := rssOf(b, pid)
	c0, t0 := cpuOf(b, pid), time.Now()
	time.Sleep(5 * time.Second)
	idle := float64(cpuOf(b, pid)-c0) / float64(time.Since(t0)) * 100
	b.ResetTimer() // it also clears what was reported: reported below
	var short, whole time.Duration
	for range b.N {
		t0 := time.Now()
		if n, err := d.client.StatusQPs(ctx, 100); err != nil || len(n.QPs) != 100 {
			b.Fatalf("status of 100 rows: %d rows, %v", len(n.QPs), err)
		}
		short += time.Since(t0)
		t0 = time.Now()
		if _, err := d.client.Status(ctx); err != nil {
			b.Fatal(err)
		}
		whole += time.Since(t0)
	}
	b.StopTimer()
	b.ReportMetric(float64(rssAttached)/(1<<20), "MB-rss-attached")
	b.ReportMetric(idle, "%cpu-idle")
	b.ReportMetric(float64(short.Microseconds())/1000/float64(b.N), "ms/status-100")
	b.ReportMetric(float64(whole.Milliseconds())/float64(b.N), "ms/status-whole")
	b.ReportMetric(float64(rssOf(b, pid))/(1<<20), "MB-rss-after-status")
	t0 = time.Now()
	res, err := d.client.Arm(ctx, api.Target{All: true})
	if err != nil || len(res.Results) < owners*per || res.Failed() != 0 {
		b.Fatalf("arm all: %d results, %d failed, %v", len(res.Results), res.Failed(), err)
	}
	b.ReportMetric(float64(time.Since(t0).Milliseconds()), "ms/arm-all")
	b.ReportMetric(float64(rssOf(b, pid))/(1<<20), "MB-rss-after-arm")
}

// rssOf is pid's resident set, in bytes (VmRSS of /proc/PID/status).
func rssOf(tb testing.TB, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

// cpuOf is pid's user and system CPU time (/proc/PID/stat, clock ticks
// of 10 ms).
func cpuOf(tb testing.TB, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
