package pathsel

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

func cloneHCAs(hs []HCAInfo) []HCAInfo {
	out := slices.Clone(hs)
	for i := range out {
		out[i].Ports = slices.Clone(out[i].Ports)
		for j := range out[i].Ports {
			out[i].Ports[j].GIDs = slices.Clone(out[i].Ports[j].GIDs)
		}
	}
	return out
}

// change is a PortChange without the port snapshots, for comparison.
type change struct {
	Device string
	Port   uint8
	Kind   ChangeKind
	Fields Field
}

func summarize(cs []PortChange) []change {
	var out []change
	for _, c := range cs {
		out = append(out, change{c.Device, c.Port, c.Kind, c.Fields})
	}
	return out
}

func TestDiffPorts(t *testing.T) {
	base, err := Discover(fixture("mlx5-ib"))
	if err != nil {
		t.Fatal(err)
	}
	mlx4, err := Discover(fixture("mlx4-dual"))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(hs []HCAInfo) []HCAInfo) []HCAInfo { return f(cloneHCAs(base)) }
	cases := []struct {
		name  string
		after []HCAInfo
		want  []change
	}{
		{"nothing changed", edit(func(hs []HCAInfo) []HCAInfo { return hs }), nil},
		{"port down", edit(func(hs []HCAInfo) []HCAInfo {
			hs[1].Ports[0].State, hs[1].Ports[0].PhysState = verbs.PortDown, verbs.PhysPolling
			return hs
		}), []change{{"mlx5_1", 1, PortChanged, FieldState | FieldPhysState}}},
		{"SM reassigns LIDs", edit(func(hs []HCAInfo) []HCAInfo {
			hs[0].Ports[0].LID, hs[0].Ports[0].LMC = 0x40, 1
			return hs
		}), []change{{"mlx5_0", 1, PortChanged, FieldLID | FieldLMC}}},
		{"SM moves", edit(func(hs []HCAInfo) []HCAInfo {
			hs[0].Ports[0].SMLID, hs[1].Ports[0].SMLID = 2, 2
			return hs
		}), []change{{"mlx5_0", 1, PortChanged, FieldSMLID}, {"mlx5_1", 1, PortChanged, FieldSMLID}}},
		{"rate and GID", edit(func(hs []HCAInfo) []HCAInfo {
			hs[0].Ports[0].Rate = "100 Gb/sec (4X EDR)"
			hs[0].Ports[0].GIDs = append(hs[0].Ports[0].GIDs, GIDEntry{Index: 1, GID: verbs.GID{0xfe, 0x80, 15: 9}})
			return hs
		}), []change{{"mlx5_0", 1, PortChanged, FieldRate | FieldGIDs}}},
		{"GID netdev", edit(func(hs []HCAInfo) []HCAInfo {
			hs[0].Ports[0].GIDs[0].Netdev = "ib0"
			return hs
		}), []change{{"mlx5_0", 1, PortChanged, FieldGIDs}}},
		{"device gone", edit(func(hs []HCAInfo) []HCAInfo { return hs[:1] }),
			[]change{{"mlx5_1", 1, PortRemoved, 0}, {"mlx5_1", 0, DeviceRemoved, 0}}},
		{"device appears, in name order", edit(func(hs []HCAInfo) []HCAInfo { return append(cloneHCAs(mlx4), hs...) }),
			[]change{{"mlx4_0", 0, DeviceAdded, 0}, {"mlx4_0", 1, PortAdded, 0}, {"mlx4_0", 2, PortAdded, 0}}},
		{"device replaced under its name", edit(func(hs []HCAInfo) []HCAInfo {
			hs[0].NodeGUID++
			return hs
		}), []change{{"mlx5_0", 1, PortRemoved, 0}, {"mlx5_0", 0, DeviceRemoved, 0}, {"mlx5_0", 0, DeviceAdded, 0}, {"mlx5_0", 1, PortAdded, 0}}},
		{"port added and removed", edit(func(hs []HCAInfo) []HCAInfo {
			p := hs[0].Ports[0]
			p.Num = 2
			hs[0].Ports = append(hs[0].Ports, p)
			hs[1].Ports = nil
			return hs
		}), []change{{"mlx5_0", 2, PortAdded, 0}, {"mlx5_1", 1, PortRemoved, 0}}},
		{"numeric device order", edit(func(hs []HCAInfo) []HCAInfo {
			hs[0].Name, hs[1].Name = "mlx5_10", "mlx5_2"
			return hs
		}), []change{{"mlx5_0", 1, PortRemoved, 0}, {"mlx5_0", 0, DeviceRemoved, 0},
			{"mlx5_1", 1, PortRemoved, 0}, {"mlx5_1", 0, DeviceRemoved, 0},
			{"mlx5_2", 0, DeviceAdded, 0}, {"mlx5_2", 1, PortAdded, 0},
			{"mlx5_10", 0, DeviceAdded, 0}, {"mlx5_10", 1, PortAdded, 0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := DiffPorts(base, c.after)
			if s := summarize(got); !reflect.DeepEqual(s, c.want) {
				t.Errorf("DiffPorts:\n got %v\nwant %v", s, c.want)
			}
		})
	}
}

func TestDiffPortsCarriesSnapshots(t *testing.T) {
	before, err := Discover(fixture("mlx4-dual"))
	if err != nil {
		t.Fatal(err)
	}
	after := cloneHCAs(before)
	after[0].Ports[1].State = verbs.PortActive
	got := DiffPorts(before, after)
	if len(got) != 1 || got[0].Old.State != verbs.PortDown || got[0].New.State != verbs.PortActive ||
		got[0].Old.Num != 2 || got[0].New.Num != 2 {
		t.Fatalf("DiffPorts = %+v", got)
	}
	if s := got[0].String(); s != "mlx4_0/2: port-changed (state): DOWN -> ACTIVE" {
		t.Errorf("String() = %q", s)
	}
	added := DiffPorts(nil, before)
	if len(added) != 3 || added[1].New.LID != 0x1a || added[1].Old.Num != 0 {
		t.Errorf("DiffPorts(nil, mlx4) = %+v", added)
	}
	if DiffPorts(nil, nil) != nil {
		t.Error("no devices on either side made changes")
	}
}

// TestDiffPortsOverRediscovery is what the daemon's poll does: discover,
// let sysfs change, discover again, diff.
func TestDiffPortsOverRediscovery(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", "sysfs", "rxe-two"))); err != nil {
		t.Fatal(err)
	}
	before, err := Discover(DiscoverOptions{SysfsRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	port := filepath.Join(root, "class", "infiniband", "rxe1", "ports", "1")
	for file, content := range map[string]string{"state": "1: DOWN\n", "phys_state": "3: Disabled\n"} {
		if err := os.WriteFile(filepath.Join(port, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	after, err := Discover(DiscoverOptions{SysfsRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	got := summarize(DiffPorts(before, after))
	want := []change{{"rxe1", 1, PortChanged, FieldState | FieldPhysState}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changes %v, want %v", got, want)
	}
}

func TestFieldString(t *testing.T) {
	if s := (FieldState | FieldGIDs).String(); s != "state,gids" {
		t.Errorf("String() = %q", s)
	}
	if s := Field(1 << 12).String(); s != "Field(0x1000)" {
		t.Errorf("String() = %q", s)
	}
	if s := ChangeKind(9).String(); s != "ChangeKind(9)" {
		t.Errorf("String() = %q", s)
	}
}
