package crossnic_test

import (
	"testing"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// countingCtx is a backup device that counts the PDs made on it and not
// deallocated yet.
type countingCtx struct {
	verbs.Context
	live *int
}

type countingPD struct {
	verbs.PD
	live *int
}

func (c countingCtx) AllocPD() (verbs.PD, error) {
	pd, err := c.Context.AllocPD()
	if err == nil {
		*c.live++
	}
	return countingPD{pd, c.live}, err
}

func (p countingPD) Dealloc() error {
	err := p.PD.Dealloc()
	if err == nil {
		*p.live--
	}
	return err
}

// TestShadowClose: Close releases everything the shadow made on the
// backup device for a context the application closed: its QPs (the
// backup QP of a QP the application left behind), the memory
// registrations and the PDs; the backup context then closes with nothing
// of it alive, and a second Close finds nothing to do.
func TestShadowClose(t *testing.T) {
	_, def, bak := twoHCAs(t, 9)
	live := 0
	sh, err := crossnic.NewShadow(def, countingCtx{bak, &live}, crossnic.NewMemDirectory())
	must(t, err)
	buf := make([]byte, 4096)
	var lkeys []uint32
	for i := 0; i < 2; i++ { // two PDs, each with a region and a QP
		pd, err := def.AllocPD()
		must(t, err)
		mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
		must(t, err)
		must(t, sh.RegMR(pd, mr, buf))
		lkeys = append(lkeys, mr.LKey())
		cq, err := def.CreateCQ(64, nil, 0)
		must(t, err)
		init := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}
		qp, err := pd.CreateQP(init)
		must(t, err)
		must(t, sh.CreateQP(pd, qp, init))
	}
	if live != 2 {
		t.Fatalf("%d backup PDs, want one per default PD", live)
	}
	must(t, sh.Close())
	if live != 0 {
		t.Fatalf("%d backup PDs left after Close", live)
	}
	for _, k := range lkeys {
		if _, ok := sh.BackupLKey(k); ok {
			t.Fatalf("the backup registration of lkey %#x left after Close", k)
		}
	}
	must(t, sh.Close())
	must(t, bak.Close())
}

// twoHCAs opens both HCAs of a host of a one-host rail fabric (seed):
// the default device and its backup.
func twoHCAs(t *testing.T, seed uint64) (h *sim.Host, def, bak verbs.Context) {
	t.Helper()
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: seed}, Hosts: 1, HCAsPerHost: 2, PortsPerHCA: 1})
	must(t, err)
	h = f.Host("node0")
	def, err = h.Open("mlx5_0")
	must(t, err)
	bak, err = h.Open("mlx5_1")
	must(t, err)
	return h, def, bak
}
