package crossnic_test

import (
	"fmt"
	"runtime"
	"testing"
)

// seedWorkers runs fn for the seeds 1..runs (only the seed only, when it
// is set, whatever runs says) on one parallel subtest per CPU, worker k taking the seeds k+1,
// k+1+workers, ... in turn. Every seed builds a world of its own (fabric,
// Conns, Directory), so a schedule does what it does alone: its seed
// reproduces it. A worker stops at its first failure.
func seedWorkers(t *testing.T, runs int, only uint64, fn func(t *testing.T, seed uint64)) {
	if only != 0 { // that seed, whatever the run count
		t.Run(fmt.Sprint(only), func(t *testing.T) { fn(t, only) })
		return
	}
	workers := uint64(runtime.GOMAXPROCS(0))
	t.Run("workers", func(t *testing.T) {
		for k := uint64(0); k < workers; k++ {
			t.Run(fmt.Sprint(k), func(t *testing.T) {
				t.Parallel()
				for s := k + 1; s <= uint64(runs) && !t.Failed(); s += workers {
					fn(t, s)
				}
			})
		}
	})
}
