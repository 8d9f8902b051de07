package pathsel

import (
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

// tableCtx is a context whose port has a GID table of 1024 entries with
// only the first two populated, as rxe's.
type tableCtx struct {
	verbs.Context
	gids []verbs.GID
}

func (c tableCtx) Device() verbs.DeviceInfo { return verbs.DeviceInfo{Name: "rxe0"} }
func (c tableCtx) QueryDevice() (verbs.DeviceAttr, error) {
	return verbs.DeviceAttr{PhysPortCnt: 1}, nil
}
func (c tableCtx) QueryPort(uint8) (verbs.PortAttr, error) {
	return verbs.PortAttr{State: verbs.PortActive, LinkLayer: verbs.LinkLayerEthernet, GIDTblLen: 1024}, nil
}
func (c tableCtx) QueryGID(_ uint8, i int) (verbs.GID, error) {
	if i < len(c.gids) {
		return c.gids[i], nil
	}
	return verbs.GID{}, nil
}

func TestDescribeKeepsThePopulatedGIDs(t *testing.T) {
	ll, _ := verbs.ParseGID("fe80::5054:ff:fe00:100")
	v4, _ := verbs.ParseGID("10.77.0.1")
	h, err := Describe(tableCtx{gids: []verbs.GID{ll, v4}})
	if err != nil {
		t.Fatal(err)
	}
	if g := h.Ports[0].GIDs; len(g) != 2 || g[1] != v4 {
		t.Fatalf("GIDs %v: want the two populated entries, the RoCE v2 IPv4 one last", g)
	}
}
