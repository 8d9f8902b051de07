package store

import (
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkGetQP: an in-memory lookup among 10,000 entries (goal: under
// 1 us).
func BenchmarkGetQP(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "s.db"), Options{NoSync: true, MaxBatchDelay: time.Microsecond})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 10000
	for j := 0; j < n; j++ {
		if err := s.PutQP(alice, qpKey(j), qpVal(j)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := s.GetQP(qpKey(i % n)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutQPBatched: 64 parallel writers (GOMAXPROCS x
// SetParallelism) through DB.Batch with fsync on, for several batch
// delays; reports committed entries per second (ns/op is per entry, not a
// writer's latency).
func BenchmarkPutQPBatched(b *testing.B) {
	for _, d := range []time.Duration{10 * time.Millisecond, DefaultMaxBatchDelay, 100 * time.Microsecond} {
		b.Run("delay="+d.String(), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "s.db"), Options{MaxBatchDelay: d})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var next atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := int(next.Add(1))
					if err := s.PutQP(alice, qpKey(k), qpVal(k)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
