package apm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

const benchQPs = 2048

// benchWorld connects benchQPs QP pairs with plain verbs (no manager yet)
// and registers node1's ends with node1's manager (untimed: the figures
// are node0's manager's work).
func benchWorld(b *testing.B) (*world, []*end, []*end) {
	w := newWorld(b, sim.RailSpec{Config: sim.Config{Seed: 1}, Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2, LMC: 1}, apm.Config{})
	w.maxWR = 4
	var as, bs []*end
	for i := 0; i < benchQPs; i++ {
		a, bb := w.pair("mlx5_0", rcOpts{plain: true})
		as, bs = append(as, a), append(bs, bb)
	}
	for _, e := range bs {
		must(b, e.n.mgr.Register(e.ctx, e.qp))
	}
	return w, as, bs
}

// pingAll lets alternates load and sends one zero-length WRITE on each QP
// of ends (REARM -> ARMED needs a packet from the re-armed peer; after a
// migration the packet's MigReq moves the peer), then lets node1's
// manager handle what that caused.
func pingAll(b *testing.B, w *world, ends []*end) {
	w.f.RunFor(sim.DefaultConfig.ArmDelay + time.Microsecond)
	for _, e := range ends {
		_, err := e.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.mr.Addr(), RKey: e.mr.RKey()}})
		must(b, err)
	}
	w.f.RunFor(50 * time.Microsecond)
	n1 := w.nodes[1]
	for _, c := range n1.ctxs {
		for {
			ev, err := c.GetAsyncEvent()
			if errors.Is(err, verbs.EAGAIN) {
				break
			}
			must(b, err)
			n1.mgr.HandleEvent(c, ev)
			c.AckAsyncEvent(ev)
		}
	}
	n1.mgr.Tick()
}

// BenchmarkArm measures the software cost to arm a connected QP: choose
// the alternate, load it with REARM (RTS->RTS), and observe ARMED.
func BenchmarkArm(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w, as, bs := benchWorld(b)
		mgr := as[0].n.mgr
		b.StartTimer()
		t0 := time.Now()
		for _, e := range as {
			must(b, mgr.Register(e.ctx, e.qp))
		}
		el := time.Since(t0)
		b.StopTimer()
		pingAll(b, w, as)
		pingAll(b, w, bs)
		b.StartTimer()
		t0 = time.Now()
		mgr.Tick()
		total += el + time.Since(t0)
		b.StopTimer()
		if st := mgr.Stats(); st.Armed != benchQPs {
			b.Fatalf("armed %d of %d", st.Armed, benchQPs)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*benchQPs), "ns/QP")
}

// BenchmarkRearmAfterMassMigration: 2048 armed QPs lose their primary port
// at once. The manager migrates every one proactively at PORT_ERR, and once
// the peer has followed (PeerFollowed, reported by the data path) loads the
// best remaining alternate (the LMC path of the other port). The figure is
// the manager's CPU time for all 2048 until they are ARMED again.
func BenchmarkRearmAfterMassMigration(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w, as, bs := benchWorld(b)
		mgr, ctx := as[0].n.mgr, as[0].ctx
		for _, e := range as {
			must(b, mgr.Register(e.ctx, e.qp))
		}
		pingAll(b, w, as)
		pingAll(b, w, bs)
		mgr.Tick()
		must(b, w.f.SetLink(w.nodes[0].host.HCA("mlx5_0").Port(1), false))
		ev, err := ctx.GetAsyncEvent()
		must(b, err)

		b.StartTimer()
		t0 := time.Now()
		mgr.HandleEvent(ctx, ev) // 2048 proactive migrations
		el := time.Since(t0)
		b.StopTimer()
		ctx.AckAsyncEvent(ev)
		for {
			ev, err := ctx.GetAsyncEvent() // the local PATH_MIG of each migration
			if err != nil {
				break
			}
			mgr.HandleEvent(ctx, ev)
			ctx.AckAsyncEvent(ev)
		}
		pingAll(b, w, as) // MigReq moves every peer to port 2
		b.StartTimer()
		t0 = time.Now()
		for _, e := range as {
			mgr.PeerFollowed(e.qp) // load the LMC alternates
		}
		el += time.Since(t0)
		b.StopTimer()
		pingAll(b, w, as)
		pingAll(b, w, bs)
		b.StartTimer()
		t0 = time.Now()
		mgr.Tick() // observe ARMED
		total += el + time.Since(t0)
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
