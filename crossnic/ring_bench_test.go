package crossnic

import (
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

// A QP as NCCL's IB transport creates them: 256 send and receive WRs,
// one SGE, no inline data beyond the default.
var ncclCap = verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}

// BenchmarkShadowRing: the cost the shadow ring adds to each posted send
// WR (record at post time, retire at its signaled completion; every 16th
// WR signaled), and the memory per protected QP.
func BenchmarkShadowRing(b *testing.B) {
	r, err := NewSendRing(ncclCap, false)
	if err != nil {
		b.Fatal(err)
	}
	rr, err := NewRecvRing(ncclCap)
	if err != nil {
		b.Fatal(err)
	}
	wrs := make([]verbs.SendWR, 16)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, RKey: 7, RemoteAddr: 0x1000,
			SGList: []verbs.SGE{{Addr: 0x2000, Length: 4096, LKey: 3}}}
	}
	wrs[15].Opcode, wrs[15].SendFlags = verbs.WRRDMAWriteWithImm, verbs.SendSignaled
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := r.Record(&wrs[i&15], nil); err != nil {
			b.Fatal(err)
		}
		if i&15 == 15 {
			r.CompleteSignaled()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(r.Footprint()+rr.Footprint()), "bytes/QP")
}
