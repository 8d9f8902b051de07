package sim_test

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// benchWR drives b.N RDMA WRITEs (4 KiB, every 16th signaled) through a
// connection, in batches of 64, and reports simulated WRs per second of
// wall time. With faults, both ports of the requester lose 1% of requests
// and responses and the primary port flaps, so APM migrates and the run
// includes retransmissions, timeouts and migrations.
func benchWR(b *testing.B, faults bool) {
	c := newConn(b, connOpts{spec: sim.RailSpec{Config: sim.Config{Seed: 1}, Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2},
		maxWR: 1024, timeout: 8})
	if faults {
		armBoth(b, c)
		must(b, c.f.SetLoss(c.a.hca.Port(1), 0.01, 0.01))
		must(b, c.f.SetLoss(c.a.hca.Port(2), 0.01, 0.01))
	}
	wrs := make([]verbs.SendWR, 64)
	for i := range wrs {
		wrs[i] = verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{c.a.sge(i*512, 4096)},
			RemoteAddr: c.b.mr.Addr() + uint64(i*512), RKey: c.b.mr.RKey()}
		if i%16 == 15 {
			wrs[i].SendFlags = verbs.SendSignaled
		}
	}
	wc := make([]verbs.WC, 64)
	flapped := false
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	done := 0
	for done < b.N {
		n := min(len(wrs), b.N-done)
		if _, err := c.a.qp.PostSend(wrs[:n]); err != nil {
			b.Fatal(err)
		}
		c.f.RunUntilIdle(0)
		for {
			k, err := c.a.cq.Poll(wc)
			if err != nil {
				b.Fatal(err)
			}
			for _, w := range wc[:k] {
				if w.Status != verbs.WCSuccess {
					b.Fatalf("completion %+v", w)
				}
			}
			if k == 0 {
				break
			}
		}
		done += n
		if faults && !flapped && done >= b.N/2 {
			// Half way: pull the primary cable; the next batch migrates.
			must(b, c.f.SetLink(c.a.hca.Port(1), false))
			flapped = true
		}
	}
	el := time.Since(start)
	b.StopTimer()
	st := c.f.Stats()
	b.ReportMetric(float64(b.N)/el.Seconds(), "wr/s")
	b.ReportMetric(float64(st.Events)/float64(b.N), "events/wr")
	b.ReportMetric(float64(st.Retransmits)/float64(b.N), "retx/wr")
}

func BenchmarkSimWRNoFaults(b *testing.B)   { benchWR(b, false) }
func BenchmarkSimWRWithFaults(b *testing.B) { benchWR(b, true) }
