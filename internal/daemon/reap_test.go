package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
)

// TestOwnersReapedAtStart: entries in the store when ibpathd starts, of
// a process of this node that ended meanwhile (its pid now names
// another incarnation), of one still alive and of another node's
// process. The dead one's go (and a new process may publish under its
// key: it used to get ErrConflict, its QP without layer 2); the others
// stay.
func TestOwnersReapedAtStart(t *testing.T) {
	dir := t.TempDir()
	inc, err := ownerproto.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	dead := store.Owner{Node: "node0", PID: os.Getpid(), Incarnation: inc + 1}
	alive := store.Owner{Node: "node0", PID: os.Getpid(), Incarnation: inc}
	other := store.Owner{Node: "node7", PID: 4242, Incarnation: 1}
	st, err := store.Open(filepath.Join(dir, "store.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	deadKey := store.QPKey{LID: 2, QPN: 0x900}
	for _, e := range []struct {
		o store.Owner
		k store.QPKey
	}{{dead, deadKey}, {alive, store.QPKey{LID: 2, QPN: 0x901}}, {other, store.QPKey{LID: 77, QPN: 0x902}}} {
		if err := st.PutQP(e.o, e.k, store.QPBackup{Device: "mlx5_1", Port: 1, LID: 6, QPN: e.k.QPN + 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutMR(dead, store.MRKey{LID: 2, RKey: 5}, store.MRBackup{RKey: 6}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	d, c := testDaemon(t, func(cfg *Config) { cfg.StateDir = dir })
	ctx := context.Background()
	qps, err := c.StoreQPs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	left := map[uint32]bool{}
	for _, q := range qps {
		left[q.QPN] = true
	}
	if len(qps) != 2 || !left[0x901] || !left[0x902] {
		t.Fatalf("store QPs after the start: %+v; want the live owner's and node7's", qps)
	}
	if mrs, _ := c.StoreMRs(ctx, ""); len(mrs) != 0 {
		t.Fatalf("the dead owner's region is still there: %+v", mrs)
	}
	// a new process (this one) reports the QP number and publishes under
	// the dead one's key
	_, s := dialOwner(t, d)
	if err := s.ReportQP(status.QP{Device: "mlx5_0", QPN: deadKey.QPN, Port: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishQP(ctx, ownerproto.PublishQP{Key: deadKey, Backup: store.QPBackup{Device: "mlx5_1", Port: 1, LID: 6, QPN: 0x999}}); err != nil {
		t.Fatalf("publish under a dead owner's key: %v", err)
	}
}
