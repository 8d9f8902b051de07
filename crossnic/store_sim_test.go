package crossnic_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/storedir"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs/sim"
)

// TestFailoverThroughTheStore: the sender's HCA dies while every backup
// rkey the replay needs is looked up in the node's bbolt-backed store
// (fsync on) through storedir, not in memory handed over by the test.
func TestFailoverThroughTheStore(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		st, err := store.Open(filepath.Join(t.TempDir(), "ibpath.db"), store.Options{})
		must(t, err)
		defer st.Close()
		w := newWorldWith(t, [2]crossnic.Directory{
			storedir.New(st, store.Owner{Node: "node0", PID: 1, Incarnation: 1}),
			storedir.New(st, store.Owner{Node: "node1", PID: 1, Incarnation: 1}),
		}, worldOpts{cfg: sim.Config{Seed: 11, Profile: p}, retry: 3})
		if qps, mrs := st.Entries(); qps != 0 || mrs != 2 {
			t.Fatalf("store holds %d QPs and %d MRs, want the 2 published MRs", qps, mrs)
		}
		w.run(300*time.Microsecond, 0)
		must(t, w.f.KillHCA(w.n[0].hca))
		w.run(2*time.Millisecond, 0)
		w.run(20 * time.Millisecond)
		if sq, rq := w.n[0].conn.State(); sq != fsm.SQFallback || rq != fsm.RQFallback {
			t.Fatalf("node0 %v/%v, want fallback", sq, rq)
		}
		if err := w.delivered(0); err != nil {
			t.Fatal(err)
		}
		if w.sent[0] < 40 || w.n[0].conn.Stats().Replayed == 0 {
			t.Fatalf("%d rounds, stats %+v: too little traffic or nothing replayed", w.sent[0], w.n[0].conn.Stats())
		}
	})
}
