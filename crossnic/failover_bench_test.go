package crossnic_test

import (
	"testing"
	"time"
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
