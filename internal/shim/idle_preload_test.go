package shim

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procCost reads pid's thread count, the CPU time its threads ran (the
// sum of their /proc schedstat) and how many times they were switched
// out (their timeslices: a thread that wakes to do nothing costs one).
func procCost(t testing.TB, pid int) (threads int, cpu time.Duration, slices int64) {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		s, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(s)); len(f) > 2 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			n, _ := strconv.ParseInt(f[2], 10, 64)
			cpu += time.Duration(ns)
			slices += n
			threads++
		}
	}
	return threads, cpu, slices
}

// heldProbe runs the probe under env until it holds its QP idle (its
// "wait": READY on stdout), calls at with its pid, then lets it finish and
// returns what it wrote.
func heldProbe(tb testing.TB, bed preloadBed, env []string, at func(pid int)) (stdout, stderr string) {
	tb.Helper()
	p := bed.cmd(env, "100", "wait")
	var e strings.Builder
	p.Stderr = &e
	stdin, err := p.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := p.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Start(); err != nil {
		tb.Fatal(err)
	}
	defer p.Process.Kill()
	var o strings.Builder
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		o.WriteString(lines.Text() + "\n")
		if lines.Text() == "READY" {
			break
		}
	}
	if !strings.Contains(o.String(), "READY") {
		tb.Fatalf("probe (env %v) ended before it held its QP:\n%s\n%s", env, o.String(), e.String())
	}
	at(p.Process.Pid)
	stdin.Write([]byte("\n"))
	stdin.Close()
	for lines.Scan() {
		o.WriteString(lines.Text() + "\n")
	}
	if err := p.Wait(); err != nil {
		tb.Fatalf("probe (env %v): %v\n%s", env, err, e.String())
	}
	return o.String(), e.String()
}

// idleCost runs the probe under env until it holds its QP idle, then
// measures its threads and what it ran over idleFor.
func idleCost(tb testing.TB, bed preloadBed, env []string, idleFor time.Duration) (threads int, cpu time.Duration, slices int64) {
	tb.Helper()
	heldProbe(tb, bed, env, func(pid int) {
		time.Sleep(time.Second) // start-up settles
		_, t0, s0 := procCost(tb, pid)
		time.Sleep(idleFor)
		var t1 time.Duration
		var s1 int64
		threads, t1, s1 = procCost(tb, pid)
		cpu, slices = t1-t0, s1-s0
	})
	return threads, cpu, slices
}

// TestPreloadIdleWakesForNothing: a program holding a QP nothing
// protects, idle, is not woken by the shim: its threads ran at most a
// couple of times in 3 s (the shim's device pump read its events every
// 100 ms, some 80 thread wake-ups a second, while the async fd already
// woke it for each event).
func TestPreloadIdleWakesForNothing(t *testing.T) {
	bed := buildBed(t)
	const idleFor = 3 * time.Second
	if _, _, slices := idleCost(t, bed, []string{"IBPATH_SOCKET=off", "FAKE_LINK_LAYER=ib"}, idleFor); slices > 6 {
		t.Fatalf("the idle program's threads ran %d times in %v under the shim", slices, idleFor)
	}
}

// BenchmarkShimIdle: the cost of the shim in a program that sits idle
// with a QP nothing protects (the stand-in device: one port, no backup
// device, no ibpathd): its threads, and its CPU over idleFor, without the
// shim, with IBPATH_DISABLE=1, and with the shim on (RoCE and InfiniBand
// ports). Reported as threads, cpu_% (of one CPU) and wakeups/s (the
// timeslices its threads ran: a ticker that fires costs one each time).
//
//	go test -run '^$' -bench ShimIdle -benchtime 1x ./internal/shim
func BenchmarkShimIdle(b *testing.B) {
	const idleFor = 5 * time.Second
	bed := buildBed(b)
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"plain", nil},
		{"disabled", []string{"IBPATH_DISABLE=1"}},
		{"on-roce", []string{"IBPATH_SOCKET=off"}},
		{"on-ib", []string{"IBPATH_SOCKET=off", "FAKE_LINK_LAYER=ib"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				threads, cpu, slices := idleCost(b, bed, c.env, idleFor)
				b.ReportMetric(float64(threads), "threads")
				b.ReportMetric(float64(cpu)/float64(idleFor)*100, "cpu_%")
				b.ReportMetric(float64(slices)/idleFor.Seconds(), "wakeups/s")
			}
		})
	}
}

// BenchmarkShimStart: the wall time of a short verbs program (the probe,
// 10 steps) without the shim, with IBPATH_DISABLE=1 through the front
// (the core is not loaded), with IBPATH_DISABLE=1 on the core preloaded
// alone (its Go runtime starts all the same, as on machines without the
// front), and with the shim on.
//
//	go test -run '^$' -bench ShimStart ./internal/shim
func BenchmarkShimStart(b *testing.B) {
	bed := buildBed(b)
	alone := bed
	alone.shim = bed.core()
	for _, c := range []struct {
		name string
		bed  preloadBed
		env  []string
	}{
		{"plain", bed, nil},
		{"disabled", bed, []string{"IBPATH_DISABLE=1"}},
		{"disabled-core-alone", alone, []string{"IBPATH_DISABLE=1"}},
		{"on", bed, []string{"IBPATH_SOCKET=off"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if out, err := c.bed.cmd(c.env, "10").CombinedOutput(); err != nil {
					b.Fatalf("probe: %v\n%s", err, out)
				}
			}
		})
	}
}
