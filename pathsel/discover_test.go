package pathsel

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

func mustGID(t *testing.T, s string) verbs.GID {
	t.Helper()
	g, err := verbs.ParseGID(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func fixture(name string) DiscoverOptions {
	return DiscoverOptions{SysfsRoot: filepath.Join("testdata", "sysfs", name)}
}

func ibPort(t *testing.T, num uint8, lid uint16, lmc uint8, rate string, gbps float64, gid, typ string) PortInfo {
	return PortInfo{Num: num, State: verbs.PortActive, PhysState: verbs.PhysLinkUp,
		LinkLayer: verbs.LinkLayerInfiniBand, LID: lid, LMC: lmc, SMLID: 1, Rate: rate, RateGbps: gbps,
		GIDs: []GIDEntry{{Index: 0, GID: mustGID(t, gid), Type: typ}}}
}

func rxePort(t *testing.T, eth, linkLocal, v4 string) PortInfo {
	ll, ip := mustGID(t, linkLocal), mustGID(t, v4)
	return PortInfo{Num: 1, State: verbs.PortActive, PhysState: verbs.PhysLinkUp,
		LinkLayer: verbs.LinkLayerEthernet, Rate: "2.5 Gb/sec (1X SDR)", RateGbps: 2.5, Netdev: eth,
		GIDs: []GIDEntry{
			{Index: 0, GID: ll, Type: "IB/RoCE v1", Netdev: eth},
			{Index: 1, GID: ll, Type: "RoCE v2", Netdev: eth},
			{Index: 2, GID: ip, Type: "IB/RoCE v1", Netdev: eth},
			{Index: 3, GID: ip, Type: "RoCE v2", Netdev: eth},
		}}
}

func TestDiscoverFixtures(t *testing.T) {
	cases := []struct {
		tree string
		want []HCAInfo
	}{
		{"mlx5-ib", []HCAInfo{
			{Name: "mlx5_0", NodeGUID: 0xb8cef60300a1b2c0, NodeType: "CA", FW: "20.31.1014", Driver: "mlx5_core",
				APM: true, APMReason: "mlx5_core InfiniBand HCA", Uverbs: "/dev/infiniband/uverbs0",
				Ports: []PortInfo{ibPort(t, 1, 8, 2, "200 Gb/sec (4X HDR)", 200, "fe80::b8ce:f603:a1:b2c0", "IB/RoCE v1")}},
			{Name: "mlx5_1", NodeGUID: 0xb8cef60300a1b2c1, NodeType: "CA", FW: "20.31.1014", Driver: "mlx5_core",
				APM: true, APMReason: "mlx5_core InfiniBand HCA", Uverbs: "/dev/infiniband/uverbs1",
				Ports: []PortInfo{ibPort(t, 1, 12, 2, "200 Gb/sec (4X HDR)", 200, "fe80::b8ce:f603:a1:b2c1", "IB/RoCE v1")}},
		}},
		// mlx4-dual has no gid_attrs (older kernels): GID types stay empty.
		{"mlx4-dual", []HCAInfo{
			{Name: "mlx4_0", NodeGUID: 0x0002c9030010a7e0, NodeType: "CA", FW: "2.42.5000", Driver: "mlx4_core",
				APM: true, APMReason: "mlx4_core InfiniBand HCA", Uverbs: "/dev/infiniband/uverbs0",
				Ports: []PortInfo{
					ibPort(t, 1, 0x1a, 1, "56 Gb/sec (4X FDR)", 56, "fe80::2:c903:10:a7e1", ""),
					{Num: 2, State: verbs.PortDown, PhysState: verbs.PhysPolling, LinkLayer: verbs.LinkLayerInfiniBand,
						Rate: "10 Gb/sec (4X)", RateGbps: 10,
						GIDs: []GIDEntry{{Index: 0, GID: mustGID(t, "fe80::2:c903:10:a7e2")}}},
				}},
		}},
		{"rxe-two", []HCAInfo{
			{Name: "rxe0", NodeGUID: 0x505400fffe123456, NodeType: "CA", Driver: "rdma_rxe",
				APMReason: "rdma_rxe is soft RDMA over Ethernet: no APM", Uverbs: "/dev/infiniband/uverbs0",
				Ports: []PortInfo{rxePort(t, "eth0", "fe80::5054:ff:fe12:3456", "192.168.122.11")}},
			{Name: "rxe1", NodeGUID: 0x505400fffe123457, NodeType: "CA", Driver: "rdma_rxe",
				APMReason: "rdma_rxe is soft RDMA over Ethernet: no APM", Uverbs: "/dev/infiniband/uverbs1",
				Ports: []PortInfo{rxePort(t, "eth1", "fe80::5054:ff:fe12:3457", "192.168.123.11")}},
		}},
	}
	for _, c := range cases {
		t.Run(c.tree, func(t *testing.T) {
			got, err := Discover(fixture(c.tree))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Discover(%s):\n got %+v\nwant %+v", c.tree, got, c.want)
			}
			if d := DiffPorts(got, got); len(d) != 0 {
				t.Errorf("a discovery differs from itself: %v", d)
			}
		})
	}
}

func TestDiscoverErrorTrees(t *testing.T) {
	cases := []struct {
		tree    string
		file    string // the file the error must name
		is      error
		survive string // the device that is still returned
	}{
		{"bad-state", "mlx5_1/ports/1/state", ErrMalformed, "mlx5_0"},
		{"bad-gid", "mlx5_0/ports/1/gids/2", ErrMalformed, "mlx5_1"},
		{"missing-lid", "mlx5_0/ports/1/lid", fs.ErrNotExist, "mlx5_1"},
		{"bad-port-dir", "mlx5_0/ports", ErrMalformed, "mlx5_1"},
	}
	for _, c := range cases {
		t.Run(c.tree, func(t *testing.T) {
			got, err := Discover(fixture(c.tree))
			if err == nil {
				t.Fatalf("no error from a tree with a broken %s", c.file)
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %v does not wrap %v", err, c.is)
			}
			if !strings.Contains(err.Error(), c.file) {
				t.Errorf("error %q does not name %s", err, c.file)
			}
			dev, _, _ := strings.Cut(c.file, "/")
			if !strings.Contains(err.Error(), "discover "+dev+":") {
				t.Errorf("error %q does not name device %s", err, dev)
			}
			if len(got) != 1 || got[0].Name != c.survive {
				t.Errorf("devices read beside the broken one: %+v, want only %s", got, c.survive)
			}
		})
	}
}

func TestDiscoverNoDevices(t *testing.T) {
	empty := t.TempDir()
	if err := os.MkdirAll(filepath.Join(empty, "class", "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{t.TempDir(), empty} {
		got, err := Discover(DiscoverOptions{SysfsRoot: root})
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("Discover(%s) = %v, %v; want an empty list and no error", root, got, err)
		}
	}
}

func TestDiscoverRealSystemWithoutRDMA(t *testing.T) {
	if _, err := os.Stat("/sys/class/infiniband"); !errors.Is(err, fs.ErrNotExist) {
		t.Skip("this machine has /sys/class/infiniband")
	}
	for _, root := range []string{"", "/", "/sys"} {
		got, err := Discover(DiscoverOptions{SysfsRoot: root})
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("Discover(%q) = %v, %v; want an empty list and no error", root, got, err)
		}
	}
}

func TestSourceFor(t *testing.T) {
	for root, real := range map[string]bool{"": true, "/": true, "/sys": true, "/sys/": true, "testdata/sysfs/x": false, "/tmp/sys": false} {
		_, isReal := func() (source, bool) { s, _ := sourceFor(root); _, ok := s.(rdmamapSource); return s, ok }()
		if isReal != real {
			t.Errorf("sourceFor(%q) uses rdmamap: %v, want %v", root, isReal, real)
		}
	}
}

func TestAPMCapability(t *testing.T) {
	ib := []PortInfo{{Num: 1, LinkLayer: verbs.LinkLayerInfiniBand}, {Num: 2, LinkLayer: verbs.LinkLayerInfiniBand}}
	mixed := []PortInfo{{Num: 1, LinkLayer: verbs.LinkLayerInfiniBand}, {Num: 2, LinkLayer: verbs.LinkLayerEthernet}}
	cases := []struct {
		h      HCAInfo
		want   bool
		reason string
	}{
		{HCAInfo{Driver: "mlx5_core", NodeType: "CA", Ports: ib}, true, "mlx5_core InfiniBand HCA"},
		{HCAInfo{Driver: "hfi1", NodeType: "CA", Ports: ib[:1]}, true, "hfi1 InfiniBand HCA"},
		{HCAInfo{Driver: "mlx5_core", NodeType: "CA", Ports: mixed}, false, "port 2 is Ethernet: RoCE has no APM"},
		{HCAInfo{Driver: "mlx5_core", NodeType: "CA", Ports: []PortInfo{{Num: 1}}}, false, "port 1 link layer is Unspecified, not InfiniBand: no APM"},
		{HCAInfo{Driver: "rdma_rxe", NodeType: "CA", Ports: ib}, false, "rdma_rxe is soft RDMA over Ethernet: no APM"},
		{HCAInfo{Driver: "siw", NodeType: "RNIC", Ports: ib}, false, "siw is soft RDMA over Ethernet: no APM"},
		{HCAInfo{Driver: "cxgb4", NodeType: "RNIC", Ports: ib}, false, "iWARP (RNIC) has no APM"},
		{HCAInfo{Driver: "efa", NodeType: "CA", Ports: ib}, false, "driver efa not known to implement APM"},
		{HCAInfo{NodeType: "CA", Ports: ib}, false, "driver unknown (no device/driver link): APM not assumed"},
		{HCAInfo{Driver: "mlx5_core", NodeType: "CA"}, false, "no ports"},
	}
	for _, c := range cases {
		got, reason := apmCapability(c.h)
		if got != c.want || reason != c.reason {
			t.Errorf("apmCapability(%s %s %d ports) = %v %q, want %v %q", c.h.Driver, c.h.NodeType, len(c.h.Ports), got, reason, c.want, c.reason)
		}
	}
}

func TestInfoToPathDescription(t *testing.T) {
	hs, err := Discover(fixture("rxe-two"))
	if err != nil {
		t.Fatal(err)
	}
	// Drop GID 0 and 1: the table keeps the device's indexes.
	hs[0].Ports[0].GIDs = hs[0].Ports[0].GIDs[2:]
	d := hs[0].HCA()
	if d.Name != "rxe0" || d.GUID != 0x505400fffe123456 || d.APM || len(d.Ports) != 1 {
		t.Fatalf("HCA() = %+v", d)
	}
	p := d.Ports[0]
	ip := mustGID(t, "192.168.122.11")
	if len(p.GIDs) != 4 || !p.GIDs[0].IsZero() || !p.GIDs[1].IsZero() || p.GIDs[2] != ip || p.GIDs[3] != ip {
		t.Fatalf("GID table %v", p.GIDs)
	}
	if _, i, ok := d.PortByGID(ip); !ok || i != 2 {
		t.Errorf("PortByGID(%v) index %d %v, want 2", ip, i, ok)
	}
	if p.LinkLayer != verbs.LinkLayerEthernet || !p.Active() {
		t.Errorf("port %+v", p)
	}
	if (PortInfo{Num: 3}).Port().GIDs != nil {
		t.Error("a port without GIDs got a table")
	}
}

func TestCompareDeviceNames(t *testing.T) {
	names := []string{"mlx5_10", "rxe0", "mlx5_2", "mlx4_0", "mlx5_0", "ibp0s1", "mlx5_bond_0", "mlx5_1"}
	want := []string{"ibp0s1", "mlx4_0", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10", "mlx5_bond_0", "rxe0"}
	got := append([]string(nil), names...)
	slices.SortFunc(got, compareDeviceNames)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
