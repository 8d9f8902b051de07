package crossnic_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/verbs/sim"
)

// benchFailover measures, over b.N faults, the time from the fault (the
// instant of the first error completion or PORT_ERR) to the first good
// completion on the backup: in virtual time, and in CPU time of ibpath's
// own code (the pumps into both nodes' Conns; the simulator's processing
// of packets is not counted).
func benchFailover(b *testing.B, portErr bool) {
	var virt, cpu time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w := newWorld(b, uint64(i+1))
		w.run(200*time.Microsecond, 0)
		before := len(w.done[0])
		t0 := w.f.Now()
		if portErr {
			must(b, w.f.SetLink(w.n[0].hca.Port(1), false))
		} else {
			must(b, w.f.KillHCA(w.n[0].hca))
		}
		for len(w.done[0]) == before {
			if w.f.Now()-t0 > time.Second {
				b.Fatal("no completion within a second of the fault")
			}
			if w.sent[0]-len(w.done[0]) < window {
				if err := w.post(0, w.sent[0]); err != nil {
					b.Fatal(err)
				}
				w.sent[0]++
			}
			w.f.RunFor(100 * time.Nanosecond)
			c0 := time.Now()
			w.pump()
			cpu += time.Since(c0)
		}
		virt += w.f.Now() - t0
		if len(w.errs[0]) != 0 {
			b.Fatalf("errors reached the application: %v", w.errs[0])
		}
	}
	b.ReportMetric(float64(virt.Nanoseconds())/1000/float64(b.N), "virtual-us")
	b.ReportMetric(float64(cpu.Nanoseconds())/1000/float64(b.N), "cpu-us")
}

func BenchmarkFailoverFromErrorCompletion(b *testing.B) { benchFailover(b, false) }
func BenchmarkFailoverFromPortErr(b *testing.B)         { benchFailover(b, true) }

// BenchmarkSwitchBackPause: node0's default cable is pulled and plugged
// back; traffic in both directions fails over, probes the default, and
// switches back. Reported: the virtual time application WRs were held
// during node0's switch (fence to release), and from the plug to both
// sides being home.
func BenchmarkSwitchBackPause(b *testing.B) {
	var pause, home time.Duration
	for i := 0; i < b.N; i++ {
		w := newWorld(b, uint64(i+1))
		w.sendRx[1] = true
		w.run(200*time.Microsecond, 0, 1)
		port := w.n[0].hca.Port(1)
		must(b, w.f.SetLink(port, false))
		w.run(5*time.Millisecond, 0, 1)
		must(b, w.f.SetLink(port, true))
		t0 := w.f.Now()
		for !w.home() {
			if w.f.Now()-t0 > time.Second {
				b.Fatal("not home a second after the plug")
			}
			w.run(20*time.Microsecond, 0, 1)
		}
		home += w.f.Now() - t0
		pause += w.n[0].conn.Stats().SwitchPause
		w.run(10 * time.Millisecond) // drain
		if err := w.check(0, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(pause.Nanoseconds())/1000/float64(b.N), "hold-us")
	b.ReportMetric(float64(home.Nanoseconds())/1e6/float64(b.N), "plug-to-home-ms")
}

// BenchmarkFailoverManyQPs: n connections of the same two processes, each
// with NCCL-Simple traffic from node0, share node0's default HCA, which
// dies. Reported, in virtual time from the death: when the first
// connection and when the last saw its first good completion on the
// backup, and their ratio (the job waits for the last), and the request
// packets the fabric carried until then. The Conns are pumped one after
// the other, as one process's runtime does; pumps take no virtual time.
func BenchmarkFailoverManyQPs(b *testing.B) {
	for _, n := range []int{1, 4, 64, 512} {
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) { benchFailoverMany(b, n) })
	}
}

func benchFailoverMany(b *testing.B, n int) {
	var first, last time.Duration
	var packets uint64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := crossnic.NewMemDirectory()
		dirs := [2]crossnic.Directory{dir, dir}
		ws := []*world{newWorldWith(b, dirs, worldOpts{cfg: sim.Config{Seed: uint64(i + 1)}, retry: 3})}
		for len(ws) < n {
			ws = append(ws, newWorldWith(b, dirs, worldOpts{cfg: sim.Config{Seed: uint64(i + 1)}, retry: 3, fabric: ws[0].f}))
		}
		runAll(ws, 300*time.Microsecond, 0)
		f := ws[0].f
		before := make([]int, n)
		got := make([]time.Duration, n)
		for k, w := range ws {
			before[k] = len(w.done[0])
			got[k] = -1
		}
		t0, reqs := f.Now(), f.Stats().Requests
		b.StartTimer()
		must(b, f.KillHCA(ws[0].n[0].hca))
		left := n
		for left > 0 {
			if f.Now()-t0 > 2*time.Second {
				b.Fatalf("%d of %d connections saw no completion within 2 s of the fault", left, n)
			}
			for k, w := range ws {
				if w.sent[0]-len(w.done[0]) < window {
					if err := w.post(0, w.sent[0]); err != nil {
						b.Fatal(err)
					}
					w.sent[0]++
				}
				w.pump()
				if got[k] < 0 && len(w.done[0]) > before[k] {
					got[k] = f.Now() - t0
					left--
				}
			}
			f.RunFor(100 * time.Nanosecond)
		}
		b.StopTimer()
		packets += f.Stats().Requests - reqs
		for _, w := range ws {
			if len(w.errs[0]) != 0 {
				b.Fatalf("errors reached the application: %v", w.errs[0])
			}
		}
		first += slices.Min(got)
		last += slices.Max(got)
	}
	b.ReportMetric(float64(first.Nanoseconds())/1000/float64(b.N), "first-us")
	b.ReportMetric(float64(last.Nanoseconds())/1000/float64(b.N), "last-us")
	b.ReportMetric(float64(last)/float64(first), "last/first")
	b.ReportMetric(float64(packets)/float64(b.N), "requests")
}
