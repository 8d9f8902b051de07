package store

import (
	"fmt"
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

// BenchmarkMRsSince: lookup_mrs's answer among n MR entries spread over
// 1,000 ports, for a query of 64 of them: idle (memory took nothing since
// the mark: what every scan of a settled process asks on a settled
// node), others (it took an entry of another port since: the whole map
// is scanned for nothing) and the first page of a port group (256 of its
// 64n/1000 entries from mark 0).
func BenchmarkMRsSince(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		s, err := Open(filepath.Join(b.TempDir(), "s.db"), Options{NoSync: true, MaxBatchDelay: time.Microsecond})
		if err != nil {
			b.Fatal(err)
		}
		port := func(i int) Port { return Port{LID: uint16(1 + i%1000)} }
		var recs []Record
		for j := range n {
			p := port(j)
			recs = append(recs, MREntry{Key: MRKey{LID: p.LID, RKey: uint32(j)}, Value: MRBackup{RKey: uint32(j) + 1}, Owner: bob, Version: uint64(j + 1)}.Record())
			if len(recs) == 1000 || j == n-1 {
				if _, err := s.Apply(recs); err != nil {
					b.Fatal(err)
				}
				recs = recs[:0]
			}
		}
		var ports []Port
		for i := range 64 {
			ports = append(ports, port(i))
		}
		_, head, _, err := s.MRsSince(ports, 0, 1<<30)
		if err != nil {
			b.Fatal(err)
		}
		runMRsSince(b, fmt.Sprintf("entries=%d/idle", n), s, ports, head, 0)
		if _, err := s.Apply([]Record{MREntry{Key: MRKey{LID: 999, RKey: uint32(n)}, Value: MRBackup{RKey: 1}, Owner: bob, Version: uint64(n + 1)}.Record()}); err != nil {
			b.Fatal(err)
		}
		runMRsSince(b, fmt.Sprintf("entries=%d/others", n), s, ports, head, 0)
		runMRsSince(b, fmt.Sprintf("entries=%d/first-page", n), s, ports, 0, 256)
		s.Close()
	}
}

// runMRsSince times MRsSince(ports, mark, 256), which must list want.
func runMRsSince(b *testing.B, name string, s *Store, ports []Port, mark uint64, want int) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if es, _, _, _ := s.MRsSince(ports, mark, 256); len(es) != want {
				b.Fatalf("listed %d, want %d", len(es), want)
			}
		}
	})
}
