package crossnic_test

import (
	"hash/fnv"
	"testing"

	"github.com/ibpath/ibpath/verbs/sim"
)

// traceHash runs schedule seed and hashes the simulator's whole trace.
func traceHash(t *testing.T, seed uint64) uint64 {
	h := fnv.New64a()
	traceHook = func(f *sim.Fabric) {
		f.SetTracer(func(r sim.TraceRecord) { h.Write([]byte(r.String())) })
	}
	defer func() { traceHook = nil }()
	var tl tally
	if _, err := schedule(t, seed, &tl); err != nil {
		t.Fatalf("schedule %d: %v", seed, err)
	}
	return h.Sum64()
}

// TestScheduleDeterministic: a schedule does the same whatever ran before
// it in the process (its seed reproduces it alone): the trace of each of
// a few seeds is the same run first, and run again after the others.
func TestScheduleDeterministic(t *testing.T) {
	seeds := []uint64{763, 1546, 22, 45, 397, 10}
	first := map[uint64]uint64{}
	for _, s := range seeds {
		first[s] = traceHash(t, s)
	}
	for i := len(seeds) - 1; i >= 0; i-- {
		if h := traceHash(t, seeds[i]); h != first[seeds[i]] {
			t.Errorf("schedule %d: a different trace on its second run", seeds[i])
		}
	}
}
