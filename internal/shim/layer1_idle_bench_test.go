package shim

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
)

// BenchmarkLayer1IdleCPU: the CPU that layer 1 takes in steady state with
// n armed QPs in each of the two processes of a simulated InfiniBand
// fabric (l1World: one Layer1 per process, the default configuration, so
// the migration poll backs off from 100 ms to 10 s), nothing happening.
// The process's CPU time (getrusage) over 10 s of wall time, after 35 s
// of settling, with 0 QPs and with n, side by side in one run: the
// difference is layer 1's (the real-time driver of the simulated fabric
// costs the same in both).
//
//	go test -run '^$' -bench Layer1IdleCPU -benchtime 1x ./internal/shim
func BenchmarkLayer1IdleCPU(b *testing.B) {
	for _, n := range []int{0, 10, 100} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cpu, polls := l1IdleCPU(b, n)
				b.ReportMetric(cpu*100, "cpu_%")
				b.ReportMetric(polls, "queries/QP/s")
			}
		})
	}
}

// l1IdleCPU builds the world with n pairs, waits until they are armed and
// the polls settled, and returns the CPU fraction of one core the process
// used over the measurement and the migration polls per QP per second.
func l1IdleCPU(b *testing.B, n int) (float64, float64) {
	settle := 35 * time.Second
	def := apm.Config{}
	w := newL1World(b, l1ProcOpts{apm: &def}, l1ProcOpts{apm: &def})
	var ends []*l1End
	tr := &l1Traffic{t: b}
	for i := 0; i < n; i++ {
		a, c := w.pair()
		ends = append(ends, a, c)
		tr.pairs = append(tr.pairs, [2]*l1End{a, c})
	}
	// REARM becomes ARMED with the first packets on the new alternate:
	// some traffic on every pair, then none
	armed := func() int {
		k := 0
		for _, e := range ends {
			if e.is(fsm.APMArmed.String(), "") {
				k++
			}
		}
		return k
	}
	deadline := time.Now().Add(3 * time.Minute)
	for k := armed(); k < len(ends); k = armed() {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d QPs armed after 3 minutes of traffic", k, len(ends))
		}
		tr.post()
		time.Sleep(time.Millisecond)
		tr.poll()
	}
	tr.drain()
	time.Sleep(settle)
	polls := func() (p int) {
		for _, pr := range w.procs {
			p += pr.l1.Stats().MigrationPolls
		}
		return p
	}
	p0 := polls()
	var r0, r1 syscall.Rusage
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &r0))
	t0 := time.Now()
	time.Sleep(10 * time.Second)
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &r1))
	wall := time.Since(t0)
	cpu := time.Duration(r1.Utime.Nano()-r0.Utime.Nano()+r1.Stime.Nano()-r0.Stime.Nano()) / 2 // per process
	rate := 0.0
	if n > 0 {
		rate = float64(polls()-p0) / float64(2*n) / wall.Seconds()
	}
	return float64(cpu) / float64(wall), rate
}
