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
// n QPs in each of the two processes of a simulated InfiniBand fabric
// (l1World: one Layer1 per process, the default configuration), nothing
// happening. The process's CPU time (getrusage) over 10 s of wall time,
// after 35 s of settling, side by side in one run: the difference
// between rows is layer 1's (the real-time driver of the simulated
// fabric costs the same in all).
//
//   - armed/n: n QPs armed by a little traffic, then idle: the migration
//     poll backs off from 100 ms to 10 s.
//
//   - rearm-fixed/n: n QPs connected and never used, so they stay in
//     REARM, with the ARMED poll at PollMax (no RearmIdle, no Progress).
//
//   - rearm-idle/n: the same with the shim's Progress hook, which turns
//     RearmIdle on (layer1_rearm.go): the poll backs off and layer 1
//     reads the rings every 100 ms instead.
//
//     go test -run '^$' -bench Layer1IdleCPU -benchtime 1x ./internal/shim
func BenchmarkLayer1IdleCPU(b *testing.B) {
	for _, c := range []struct {
		mode string
		ns   []int
	}{{"armed", []int{0, 10, 100, 1000}}, {"rearm-fixed", []int{1000}}, {"rearm-idle", []int{1000}}} {
		for _, n := range c.ns {
			b.Run(fmt.Sprintf("%s/%d", c.mode, n), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					cpu, polls := l1IdleCPU(b, n, c.mode)
					b.ReportMetric(cpu*100, "cpu_%")
					b.ReportMetric(polls, "queries/QP/s")
				}
			})
		}
	}
}

// l1IdleCPU builds the world with n pairs, waits until they are armed
// (mode armed) or not (the rearm modes), lets the polls settle, and
// returns the CPU fraction of one core the process used over the
// measurement and the ARMED and migration polls per QP per second.
func l1IdleCPU(b *testing.B, n int, mode string) (float64, float64) {
	settle := 35 * time.Second
	def := apm.Config{}
	o := l1ProcOpts{apm: &def, progress: mode == "rearm-idle"}
	w := newL1World(b, o, o)
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
	for k := armed(); mode == "armed" && k < len(ends); k = armed() {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d QPs armed after 3 minutes of traffic", k, len(ends))
		}
		tr.post()
		time.Sleep(time.Millisecond)
		tr.poll()
	}
	tr.drain()
	time.Sleep(settle)
	if k := armed(); mode != "armed" && k > 0 {
		b.Fatalf("%d of %d QPs armed with no traffic: want them all in REARM", k, len(ends))
	}
	polls := func() (p int) {
		for _, pr := range w.procs {
			st := pr.l1.Stats()
			p += st.MigrationPolls + st.RearmPolls
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
