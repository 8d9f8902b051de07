package replica

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/store"
)

// startCluster starts n nodes on 127.0.0.1 with memberlist's LAN
// defaults (the daemon's), each joining node 1; fsync on.
func startCluster(b *testing.B, n int) []*testNode {
	b.Helper()
	dir := b.TempDir()
	lan := func(c *Config) { c.tune = func(*memberlist.Config) {} }
	nodes := []*testNode{startNode(b, dir, 1, "127.0.0.1", nil, lan)}
	for i := 2; i <= n; i++ {
		nodes = append(nodes, startNode(b, dir, i, "127.0.0.1", []string{nodes[0].r.Addr()}, lan))
	}
	return nodes
}

func reopenSynced(b *testing.B, nodes []*testNode) {
	// startNode opens stores with NoSync; measure with fsync on.
	for _, tn := range nodes {
		tn.stop()
		st, err := store.Open(tn.path, store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		r, err := Start(st, tn.cfg)
		if err != nil {
			b.Fatal(err)
		}
		tn.st, tn.r = st, r
	}
}

// pushesPerOp is how many publications one benchmark iteration makes, so
// that a few iterations (-benchtime 3x, shared with the convergence
// benchmark) give enough lag samples.
const pushesPerOp = 500

// BenchmarkReplicationLag: publication j is made by node j%n for a QP
// whose remote end is on the next node; the lag is measured by the
// receiver from the origin's commit to its own (fsync on both). Reports
// p50 and p99 over b.N × pushesPerOp pushes; ns/op is per iteration.
func BenchmarkReplicationLag(b *testing.B) {
	for _, n := range []int{3, 20} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := startCluster(b, n)
			reopenSynced(b, nodes)
			for _, tn := range nodes[1:] {
				if _, err := tn.r.ml.Join([]string{nodes[0].r.Addr()}); err != nil {
					b.Fatal(err)
				}
			}
			waitMembers(b, nodes...)
			b.ResetTimer()
			j := 0
			for b.Loop() {
				for range pushesPerOp {
					src, dst := j%n, (j+1)%n
					if err := nodes[src].r.PublishQP(owner(src+1), qpOn(src+1, j), backup(j), routeOf(dst+1)); err != nil {
						b.Fatal(err)
					}
					j++
				}
			}
			b.StopTimer()
			var got uint64
			eventually(b, 30*time.Second, "every push received", func() bool {
				got = 0
				for _, tn := range nodes {
					got += tn.r.Stats().PushesReceived
				}
				return got == uint64(j)
			})
			var lags []time.Duration
			for _, tn := range nodes {
				tn.r.stats.mu.Lock()
				lags = append(lags, tn.r.stats.lags...)
				tn.r.stats.mu.Unlock()
			}
			sortDurations(lags)
			b.ReportMetric(float64(percentile(lags, 50).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(lags, 99).Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkMembershipConvergence: time from starting n nodes (each
// joining the first as soon as it starts) until every node sees all n
// alive, with memberlist's LAN defaults.
func BenchmarkMembershipConvergence(b *testing.B) {
	for _, n := range []int{3, 20} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				t0 := time.Now()
				nodes := startCluster(b, n)
				waitMembers(b, nodes...)
				total += time.Since(t0)
				for _, tn := range nodes {
					tn.stop()
				}
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "converge-ms")
		})
	}
}
