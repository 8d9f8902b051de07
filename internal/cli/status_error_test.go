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
