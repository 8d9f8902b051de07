package pathsel

import (
	"testing"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

func TestDiscoverContextOnTheSimulatedFabric(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2, LMC: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Host("node0").Open("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := DiscoverContext("mlx5_0", c)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "mlx5_0" || !h.APM || h.Driver != "sim" || len(h.Ports) != 2 {
		t.Fatalf("%+v", h)
	}
	p := h.Ports[0]
	if p.State != verbs.PortActive || p.LinkLayer != verbs.LinkLayerInfiniBand || p.LID == 0 || p.LMC != 1 || p.Rate != "100 Gb/sec (4X EDR)" || len(p.GIDs) == 0 {
		t.Fatalf("port %+v", p)
	}
	if rateOf(2, 16) != "56 Gb/sec (4X FDR)" || rateOf(0, 32) != "" || rateOf(1, 3) != "" {
		t.Fatal("rateOf")
	}
}
