package daemon

import (
	"net"
	"testing"

	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// TestFillPath: a path shows its source LID on InfiniBand (the port's
// LID plus the path bits), its source GID on RoCE (the port's entry at
// the path's GID index), and its port's state; what the owner claimed of
// a port is replaced, and a port this node lacks shows nothing.
func TestFillPath(t *testing.T) {
	gid := func(s string) verbs.GID {
		var g verbs.GID
		copy(g[:], net.ParseIP(s).To16())
		return g
	}
	inv := []pathsel.HCAInfo{
		{Name: "mlx5_0", Ports: []pathsel.PortInfo{
			{Num: 1, State: verbs.PortActive, LinkLayer: verbs.LinkLayerInfiniBand, LID: 16, LMC: 2},
			{Num: 2, State: verbs.PortDown, LinkLayer: verbs.LinkLayerInfiniBand},
		}},
		{Name: "rxe0", Ports: []pathsel.PortInfo{
			{Num: 1, State: verbs.PortActive, LinkLayer: verbs.LinkLayerEthernet, GIDs: []pathsel.GIDEntry{
				{Index: 0, GID: gid("fe80::1")}, {Index: 1, GID: gid("::ffff:10.0.0.1")}}},
		}},
	}
	ports := pathPorts(inv)
	for _, c := range []struct {
		in, want status.Path
	}{
		{status.Path{Device: "mlx5_0", Port: 1, PathBits: 3, LID: 999, PortState: "DOWN"},
			status.Path{Device: "mlx5_0", Port: 1, PathBits: 3, LID: 19, PortState: "ACTIVE"}},
		{status.Path{Device: "mlx5_0", Port: 2}, status.Path{Device: "mlx5_0", Port: 2, PortState: "DOWN"}},
		{status.Path{Device: "rxe0", Port: 1, GIDIndex: 1}, status.Path{Device: "rxe0", Port: 1, GIDIndex: 1, GID: "10.0.0.1", PortState: "ACTIVE"}},
		{status.Path{Device: "rxe0", Port: 1}, status.Path{Device: "rxe0", Port: 1, GID: "fe80::1", PortState: "ACTIVE"}},
		{status.Path{Device: "mlx5_9", Port: 1, LID: 5, GID: "fe80::9", PortState: "ACTIVE"}, status.Path{Device: "mlx5_9", Port: 1}},
		{status.Path{}, status.Path{}},
	} {
		got := c.in
		fillPath(ports, &got)
		if got != c.want {
			t.Errorf("fillPath(%+v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}
