package storedir_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/internal/storedir"
	"github.com/ibpath/ibpath/store"
)

func TestReopenResolves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dir.db")
	owner := store.Owner{Node: "node0", PID: 42, Incarnation: 7}
	st, err := store.Open(path, store.Options{})
	must(t, err)
	d := storedir.New(st, owner)
	ep := crossnic.Endpoint{LID: 3, QPN: 0x11}
	bk := crossnic.Backup{Device: "mlx5_1", Port: 1, LID: 4, QPN: 0x22}
	ref := crossnic.MRRef{LID: 3, RKey: 0x1234}
	must(t, d.PublishQP(ep, bk))
	must(t, d.PublishMR(ref, 0x5678))
	must(t, d.PublishQP(ep, bk)) // again: no-op
	other := storedir.New(st, store.Owner{Node: "node1", PID: 1, Incarnation: 1})
	if err := other.PublishMR(ref, 0x9999); !errors.Is(err, crossnic.ErrConflict) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("conflict: %v", err)
	}
	must(t, st.Close())
	if _, ok := d.LookupQP(ep); ok {
		t.Fatal("lookup on a closed store succeeded")
	}

	st, err = store.Open(path, store.Options{})
	must(t, err)
	defer st.Close()
	d = storedir.New(st, owner)
	if got, ok := d.LookupQP(ep); !ok || got != bk {
		t.Fatalf("LookupQP after reopen = %+v, %v", got, ok)
	}
	if rk, ok := d.LookupMR(ref); !ok || rk != 0x5678 {
		t.Fatalf("LookupMR after reopen = %#x, %v", rk, ok)
	}
	if v, o, err := st.GetMR(store.MRKey{LID: 3, RKey: 0x1234}); err != nil || o != owner || v != (store.MRBackup{RKey: 0x5678}) {
		t.Fatalf("stored MR %+v %v %v", v, o, err)
	}
	if _, ok := d.LookupMR(crossnic.MRRef{LID: 3, RKey: 1}); ok {
		t.Fatal("unknown MR resolved")
	}
	if n, err := st.RemoveOwner(owner); err != nil || n != 2 {
		t.Fatalf("RemoveOwner = %d, %v", n, err)
	}
	if _, ok := d.LookupQP(ep); ok {
		t.Fatal("removed mapping still resolves")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
