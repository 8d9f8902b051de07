package shim

import (
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/verbs"
)

// TestDmabufMR: a region the application registered with
// ibv_reg_dmabuf_mr is mirrored on the backup device by the same fd (its
// backup lkey known to layer 2); an fd the backup cannot register leaves
// it unmirrored, said at warn.
func TestDmabufMR(t *testing.T) {
	f := railFabric(t, 51)
	x := newL2Host(t, f, "node0", 0, shimtest.NewCluster(), l2opts{})
	gpu := make([]byte, 1<<16)
	fd := f.Host("node0").ExportDmabuf(gpu)
	mr, err := x.pd.RegMR(gpu[4096:], verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	x.rt.DmabufMR(x.id, x.pd, mr, 4096, fd)
	if _, ok := x.rt.shadows[x.id].sh.BackupLKey(mr.LKey()); !ok {
		t.Fatalf("no backup registration of the dma-buf region (lkey %#x)\n%s", mr.LKey(), x.log.String())
	}
	// an fd the host never exported: the backup refuses, the region stays unmirrored
	mr2, err := x.pd.RegMR(gpu[:4096], verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	x.rt.DmabufMR(x.id, x.pd, mr2, 0, fd+1)
	if _, ok := x.rt.shadows[x.id].sh.BackupLKey(mr2.LKey()); ok || !strings.Contains(x.log.String(), "mirror dma-buf MR on the backup") {
		t.Fatalf("a refused dma-buf mirror: mapped %v\n%s", ok, x.log.String())
	}
}

// TestReregMR: the mirror follows ibv_rereg_mr. A region moved to new
// memory (new keys) gets a new backup registration with the old access
// (or the new one when the call changed it) and loses the old; a call
// that changed nothing keeps it; one that left the region unusable
// releases it, said at warn.
func TestReregMR(t *testing.T) {
	f := railFabric(t, 52)
	x := newL2Host(t, f, "node0", 0, shimtest.NewCluster(), l2opts{})
	sh := x.rt.shadows[x.id].sh
	reg := func(n int, a verbs.AccessFlags) (verbs.MR, []byte) {
		b := make([]byte, n)
		m, err := x.pd.RegMR(b, a)
		if err != nil {
			t.Fatal(err)
		}
		return m, b
	}
	old, ob := reg(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	x.rt.MR(x.id, x.pd, old, ob)
	if _, ok := sh.BackupLKey(old.LKey()); !ok {
		t.Fatal("the region is not mirrored to begin with")
	}
	// moved: the region after the call is nw (new keys); the access stays
	nw, nb := reg(8192, verbs.AccessLocalWrite)
	x.rt.ReregMR(x.id, old.LKey(), x.pd, nw, false, nb, ReregNew)
	if _, ok := sh.BackupLKey(old.LKey()); ok {
		t.Error("the old translation's mirror survived the move")
	}
	if a, ok := sh.MRAccess(nw.LKey()); !ok || a != verbs.AccessLocalWrite|verbs.AccessRemoteWrite {
		t.Errorf("the moved region's mirror: %v, access %v (want the old access)", ok, a)
	}
	// access changed, same keys
	x.rt.ReregMR(x.id, nw.LKey(), x.pd, nw, true, nb, ReregNew)
	if a, ok := sh.MRAccess(nw.LKey()); !ok || a != verbs.AccessLocalWrite {
		t.Errorf("after a change of access: %v, access %v", ok, a)
	}
	// nothing changed: the mirror stays
	x.rt.ReregMR(x.id, nw.LKey(), nil, nil, false, nil, ReregOld)
	if _, ok := sh.BackupLKey(nw.LKey()); !ok {
		t.Error("a refused ibv_rereg_mr released the mirror")
	}
	// unusable: released
	x.rt.ReregMR(x.id, nw.LKey(), nil, nil, false, nil, ReregUnusable)
	if _, ok := sh.BackupLKey(nw.LKey()); ok || !strings.Contains(x.log.String(), "left the region unusable") {
		t.Errorf("an unusable region kept its mirror (%v)\n%s", ok, x.log.String())
	}
}

// TestImplicitODPMR: an implicit on-demand-paging region (the whole
// address space, no slice of it) is mirrored by an implicit registration
// on the backup device with its access; a change of access by
// ibv_rereg_mr re-registers it with the new one; its deregistration
// releases the mirror.
func TestImplicitODPMR(t *testing.T) {
	f := railFabric(t, 53)
	x := newL2Host(t, f, "node0", 0, shimtest.NewCluster(), l2opts{})
	sh := x.rt.shadows[x.id].sh
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessOnDemand
	mr, err := x.pd.(verbs.ImplicitODPRegistrar).RegImplicitODP(access)
	if err != nil {
		t.Fatal(err)
	}
	x.rt.MR(x.id, x.pd, mr, nil)
	if a, ok := sh.MRAccess(mr.LKey()); !ok || a != access {
		t.Fatalf("implicit region's mirror: %v, access %v\n%s", ok, a, x.log.String())
	}
	if !strings.Contains(x.log.String(), "implicit on-demand-paging region mirrored") {
		t.Errorf("the mirror is not said:\n%s", x.log.String())
	}
	x.rt.ReregMR(x.id, mr.LKey(), x.pd, reregMR{mr, access | verbs.AccessRemoteRead}, true, nil, ReregNew)
	if a, ok := sh.MRAccess(mr.LKey()); !ok || a != access|verbs.AccessRemoteRead {
		t.Fatalf("after a change of access: %v, access %v\n%s", ok, a, x.log.String())
	}
	x.rt.DeregMR(x.id, mr.LKey())
	if _, ok := sh.BackupLKey(mr.LKey()); ok {
		t.Fatal("the deregistered region kept its mirror")
	}
}
