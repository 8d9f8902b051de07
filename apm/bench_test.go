package apm_test

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

const benchQPs = 2048

// benchWorld connects benchQPs QP pairs with plain verbs (no manager yet).
func benchWorld(b *testing.B) (*world, []*end, []*end) {
	w := newWorld(b, sim.RailSpec{Config: sim.Config{Seed: 1}, Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2, LMC: 1}, apm.Config{})
	w.maxWR = 4
	var as, bs []*end
	for i := 0; i < benchQPs; i++ {
		a, bb := w.pair("mlx5_0", rcOpts{plain: true})
		as, bs = append(as, a), append(bs, bb)
	}
	return w, as, bs
}

// armAll registers every QP of ends with its manager and polls them to
// ARMED, timing only the manager's own work (the simulated HCA's load
// delay runs with the timer stopped).
func armAll(b *testing.B, w *world, ends []*end) {
	for _, e := range ends {
		must(b, e.n.mgr.Register(e.ctx, e.qp))
	}
	b.StopTimer()
	pingAll(b, w, ends)
	b.StartTimer()
	ends[0].n.mgr.Tick()
}

// pingAll lets the alternates load and sends one zero-length WRITE on each
// QP: REARM -> ARMED needs a packet from the (re-armed) peer.
func pingAll(b *testing.B, w *world, ends []*end) {
	w.f.RunFor(sim.DefaultConfig.ArmDelay + time.Microsecond)
	for _, e := range ends {
		_, err := e.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.mr.Addr(), RKey: e.mr.RKey()}})
		must(b, err)
	}
	w.f.RunFor(50 * time.Microsecond)
}

// BenchmarkArm measures the software cost to arm a connected QP: choose
// the alternate, load it with REARM (RTS->RTS), and observe ARMED.
func BenchmarkArm(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w, as, _ := benchWorld(b)
		b.StartTimer()
		t0 := time.Now()
		armAll(b, w, as)
		total += time.Since(t0)
		b.StopTimer()
		if st := as[0].n.mgr.Stats(); st.Armed != benchQPs {
			b.Fatalf("armed %d of %d", st.Armed, benchQPs)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*benchQPs), "ns/QP")
}

// BenchmarkRearmAfterMassMigration: 2048 armed QPs lose their primary port
// at once. The manager migrates every one proactively at PORT_ERR and loads
// the best remaining alternate (the LMC path of the other port); the
// figure is the manager's CPU time for all 2048 until they are ARMED again.
func BenchmarkRearmAfterMassMigration(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w, as, _ := benchWorld(b)
		armAll(b, w, as)
		mgr, ctx := as[0].n.mgr, as[0].ctx
		must(b, w.f.SetLink(w.nodes[0].host.HCA("mlx5_0").Port(1), false))
		ev, err := ctx.GetAsyncEvent()
		must(b, err)
		b.StartTimer()
		t0 := time.Now()
		mgr.HandleEvent(ctx, ev)
		el := time.Since(t0)
		b.StopTimer()
		ctx.AckAsyncEvent(ev)
		pingAll(b, w, as)
		b.StartTimer()
		t0 = time.Now()
		mgr.Tick()
		el += time.Since(t0)
		total += el
		b.StopTimer()
		st := mgr.Stats()
		if st.Migrations != benchQPs || st.Armed != 2*benchQPs {
			b.Fatalf("stats %+v: want %d migrations and every QP re-armed", st, benchQPs)
		}
		for _, s := range mgr.Status() {
			if s.State != fsm.APMArmed || s.Primary.Port != 2 || s.Alternate != (fsm.PathRef{Port: 2, Bits: 1}) {
				b.Fatalf("QP %#x: %+v", s.QPN, s)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/2048QPs")
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*benchQPs), "ns/QP")
}
