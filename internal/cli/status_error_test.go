package cli

import (
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/status"
)

func TestRenderStatusShowsDiscoveryError(t *testing.T) {
	var b strings.Builder
	n := status.Node{Fabric: status.Fabric{Kind: status.FabricHardware, Reason: "1 RDMA device(s)",
		Error: "mlx4_0: ports/1/state: malformed"}}
	if err := renderStatus(&b, n); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "fabric error: mlx4_0: ports/1/state: malformed\n") {
		t.Fatalf("status output lacks the discovery error:\n%s", b.String())
	}
}

// TestRenderStatusSaysWhatItLeftOut: a status that lists fewer QPs than
// the node has (ibpath status --qps N) says how many it left out, with
// the counts by layer.
func TestRenderStatusSaysWhatItLeftOut(t *testing.T) {
	var b strings.Builder
	n := status.Node{QPs: []status.QP{{Device: "mlx5_0", QPN: 1, Layer: status.LayerAPM}}, QPsTotal: 100000,
		Layers: map[string]int{status.LayerAPM: 99000, status.LayerCrossNIC: 900, status.LayerNone: 100}}
	if err := renderStatus(&b, n); err != nil {
		t.Fatal(err)
	}
	if want := "  ... 1 of 100000 QPs listed (apm 99000, crossnic 900, none 100); --qps N lists more, --qps -1 every one\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("status output lacks %q:\n%s", want, b.String())
	}
}
