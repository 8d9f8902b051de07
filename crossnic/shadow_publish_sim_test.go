package crossnic_test

import (
	"testing"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/verbs"
)

// publishLog is a directory that records the default rkeys published.
type publishLog struct {
	*crossnic.MemDirectory
	rkeys map[uint32]int
}

func (d *publishLog) PublishMR(def crossnic.MRRef, backupRKey uint32) error {
	d.rkeys[def.RKey]++
	return d.MemDirectory.PublishMR(def, backupRKey)
}

// TestShadowPublishesRemoteRegionsOnly: a region the peers can reach
// (remote read, write or atomic access) has its backup rkey published; a
// local-only one is mirrored for replays (its lkey mapped) and publishes
// nothing, since no peer can name it. rdma_rxe gives every local-only
// region rkey 0, so publishing them put one default key on several backup
// keys: the directory's second one is a conflict.
func TestShadowPublishesRemoteRegionsOnly(t *testing.T) {
	_, def, bak := twoHCAs(t, 9)
	dir := &publishLog{crossnic.NewMemDirectory(), map[uint32]int{}}
	sh, err := crossnic.NewShadow(def, bak, dir)
	must(t, err)
	pd, err := def.AllocPD()
	must(t, err)
	for _, c := range []struct {
		access verbs.AccessFlags
		remote bool
	}{
		{verbs.AccessLocalWrite, false},
		{0, false},
		{verbs.AccessLocalWrite | verbs.AccessMWBind, false},
		{verbs.AccessLocalWrite | verbs.AccessRemoteWrite, true},
		{verbs.AccessRemoteRead, true},
		{verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic, true},
	} {
		buf := make([]byte, 4096)
		mr, err := pd.RegMR(buf, c.access)
		must(t, err)
		must(t, sh.RegMR(pd, mr, buf))
		if _, ok := sh.BackupLKey(mr.LKey()); !ok {
			t.Errorf("access %#x: no backup lkey", c.access)
		}
		if got := dir.rkeys[mr.RKey()] > 0; got != c.remote {
			t.Errorf("access %#x: rkey %#x published %v, want %v", c.access, mr.RKey(), got, c.remote)
		}
	}
}
