package pathsel_test

import (
	"testing"

	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

func TestDescribeReadsTheDevice(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2, LMC: 2})
	if err != nil {
		t.Fatal(err)
	}
	h := f.Host("node1")
	ctx, err := h.Open("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetLink(h.HCA("mlx5_0").Port(2), false); err != nil {
		t.Fatal(err)
	}
	d, err := pathsel.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "mlx5_0" || !d.APM || len(d.Ports) != 2 {
		t.Fatalf("description %+v", d)
	}
	p1, p2 := d.Ports[0], d.Ports[1]
	if p1.LID != h.HCA("mlx5_0").Port(1).LID() || p1.LMC != 2 || !p1.Active() || p2.Active() ||
		p1.LinkLayer != verbs.LinkLayerInfiniBand || len(p1.GIDs) != 1 || p1.GIDs[0] != h.HCA("mlx5_0").Port(1).GID(0) {
		t.Fatalf("ports %+v", d.Ports)
	}
	if p, ok := d.PortByLID(p1.LID + 3); !ok || p.Num != 1 {
		t.Fatal("LID base+3 is in port 1's LMC range")
	}
	if _, ok := d.PortByLID(p1.LID + 4); ok && p1.LID+4 != p2.LID {
		t.Fatal("LID beyond the LMC range matched port 1")
	}
	if err := f.KillHCA(h.HCA("mlx5_0")); err != nil {
		t.Fatal(err)
	}
	if _, err := pathsel.Describe(ctx); verbs.ErrnoOf(err) != verbs.EIO {
		t.Fatalf("describe on a dead device: %v, want EIO", err)
	}
}
