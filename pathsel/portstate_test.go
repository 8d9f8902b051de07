package pathsel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// copyFixture copies a fixture tree (symlinks kept) so a test may change
// it, and returns the root of the copy.
func copyFixture(tb testing.TB, name string) string {
	tb.Helper()
	root := filepath.Join(tb.TempDir(), name)
	if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", "sysfs", name))); err != nil {
		tb.Fatal(err)
	}
	return root
}

func writeAttr(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// lightOf is what ReadPortStates must read of a full inventory.
func lightOf(inv []HCAInfo) []DevicePorts {
	out := make([]DevicePorts, 0, len(inv))
	for _, h := range inv {
		d := DevicePorts{Name: h.Name, NodeGUID: h.NodeGUID}
		for _, p := range h.Ports {
			d.Ports = append(d.Ports, p.Runtime())
		}
		out = append(out, d)
	}
	return out
}

func TestReadPortStatesFixtures(t *testing.T) {
	for _, tree := range []string{"mlx5-ib", "mlx4-dual", "rxe-two"} {
		t.Run(tree, func(t *testing.T) {
			inv, err := Discover(fixture(tree))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ReadPortStates(fixture(tree))
			if err != nil {
				t.Fatal(err)
			}
			if want := lightOf(inv); !reflect.DeepEqual(got, want) {
				t.Errorf("ReadPortStates(%s):\n got %+v\nwant %+v", tree, got, want)
			}
			if PortStatesDiffer(inv, got) {
				t.Errorf("the light read of %s differs from the full read of the same tree", tree)
			}
		})
	}
}

// TestReadPortStatesErrorTrees: the light read fails on the trees Discover
// fails on, except where the broken file is one it does not read (a GID).
func TestReadPortStatesErrorTrees(t *testing.T) {
	cases := []struct {
		tree string
		file string // the file the error must name; "" when the light read succeeds
		is   error
	}{
		{"bad-state", "mlx5_1/ports/1/state", ErrMalformed},
		{"missing-lid", "mlx5_0/ports/1/lid", fs.ErrNotExist},
		{"bad-port-dir", "mlx5_0/ports", ErrMalformed},
		{"bad-gid", "", nil},
	}
	for _, c := range cases {
		t.Run(c.tree, func(t *testing.T) {
			got, err := ReadPortStates(fixture(c.tree))
			if c.file == "" {
				if err != nil || len(got) != 2 {
					t.Fatalf("ReadPortStates(%s) = %+v, %v; want both devices: it reads no GID", c.tree, got, err)
				}
				return
			}
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.file) {
				t.Fatalf("error %v: want one naming %s and wrapping %v", err, c.file, c.is)
			}
			dev, _, _ := strings.Cut(c.file, "/")
			if !strings.Contains(err.Error(), "read port states "+dev+":") {
				t.Errorf("error %q does not name device %s", err, dev)
			}
			if len(got) != 1 || got[0].Name == dev {
				t.Errorf("devices read beside the broken one: %+v", got)
			}
		})
	}
}

// TestReadPortStatesReadsNoGIDs: with the GID tables and their attributes
// gone, Discover fails and the light read still reads the same thing.
// Replacing the directories by dangling symlinks works as root too, where
// permissions are no obstacle; chmod 000 is tried as well when not root.
func TestReadPortStatesReadsNoGIDs(t *testing.T) {
	root := copyFixture(t, "rxe-two")
	opts := DiscoverOptions{SysfsRoot: root}
	inv, err := Discover(opts)
	if err != nil {
		t.Fatal(err)
	}
	ports, _ := filepath.Glob(filepath.Join(root, "class", "infiniband", "*", "ports", "*"))
	if len(ports) != 2 {
		t.Fatalf("ports %v", ports)
	}
	check := func(how string) {
		t.Helper()
		if _, err := Discover(opts); err == nil {
			t.Fatalf("%s: Discover did not fail: the GID tables are still readable", how)
		}
		got, err := ReadPortStates(opts)
		if err != nil {
			t.Fatalf("%s: ReadPortStates: %v", how, err)
		}
		if PortStatesDiffer(inv, got) || !reflect.DeepEqual(got, lightOf(inv)) {
			t.Fatalf("%s: ReadPortStates = %+v, want %+v", how, got, lightOf(inv))
		}
	}
	if os.Geteuid() != 0 {
		for _, p := range ports {
			for _, d := range []string{"gids", "gid_attrs"} {
				if err := os.Chmod(filepath.Join(p, d), 0); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Chmod(filepath.Join(p, d), 0o755) })
			}
		}
		check("gids/ and gid_attrs/ mode 000")
		for _, p := range ports {
			for _, d := range []string{"gids", "gid_attrs"} {
				if err := os.Chmod(filepath.Join(p, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, p := range ports {
		for _, d := range []string{"gids", "gid_attrs"} {
			if err := os.RemoveAll(filepath.Join(p, d)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("nowhere", filepath.Join(p, d)); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("gids/ and gid_attrs/ dangling symlinks")
}

// TestPortStatesDifferOnChange changes one thing in a copy of a tree and
// checks that the light read sees it exactly when DiffPorts over two full
// reads reports a change it can see.
func TestPortStatesDifferOnChange(t *testing.T) {
	rxePort := filepath.Join("class", "infiniband", "rxe1", "ports", "1")
	mlxPort := filepath.Join("class", "infiniband", "mlx4_0", "ports", "2")
	cases := []struct {
		name   string
		tree   string
		change func(t *testing.T, root string)
		differ bool
	}{
		{"nothing", "rxe-two", func(*testing.T, string) {}, false},
		{"rewritten unchanged", "rxe-two", func(t *testing.T, root string) {
			writeAttr(t, filepath.Join(root, rxePort, "state"), "4: ACTIVE")
		}, false},
		{"state", "rxe-two", func(t *testing.T, root string) {
			writeAttr(t, filepath.Join(root, rxePort, "state"), "1: DOWN")
		}, true},
		{"phys_state", "rxe-two", func(t *testing.T, root string) {
			writeAttr(t, filepath.Join(root, rxePort, "phys_state"), "3: Disabled")
		}, true},
		{"lid", "mlx4-dual", func(t *testing.T, root string) {
			writeAttr(t, filepath.Join(root, mlxPort, "lid"), "0x2b")
		}, true},
		{"lid_mask_count", "mlx4-dual", func(t *testing.T, root string) {
			writeAttr(t, filepath.Join(root, mlxPort, "lid_mask_count"), "3")
		}, true},
		{"sm_lid", "mlx4-dual", func(t *testing.T, root string) {
			writeAttr(t, filepath.Join(root, mlxPort, "sm_lid"), "0x7")
		}, true},
		{"rate", "mlx4-dual", func(t *testing.T, root string) {
			writeAttr(t, filepath.Join(root, mlxPort, "rate"), "40 Gb/sec (4X QDR)")
		}, true},
		{"node_guid (device replaced)", "rxe-two", func(t *testing.T, root string) {
			writeAttr(t, filepath.Join(root, "class", "infiniband", "rxe1", "node_guid"), "5054:00ff:fe12:9999")
		}, true},
		{"device removed", "rxe-two", func(t *testing.T, root string) {
			if err := os.RemoveAll(filepath.Join(root, "class", "infiniband", "rxe1")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"device added", "rxe-two", func(t *testing.T, root string) {
			cls := filepath.Join(root, "class", "infiniband")
			if err := os.CopyFS(filepath.Join(cls, "rxe2"), os.DirFS(filepath.Join(cls, "rxe1"))); err != nil {
				t.Fatal(err)
			}
			writeAttr(t, filepath.Join(cls, "rxe2", "node_guid"), "5054:00ff:fe12:3458")
		}, true},
		{"port removed", "mlx4-dual", func(t *testing.T, root string) {
			if err := os.RemoveAll(filepath.Join(root, mlxPort)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"port added", "rxe-two", func(t *testing.T, root string) {
			if err := os.CopyFS(filepath.Join(root, rxePort, "..", "2"), os.DirFS(filepath.Join(root, rxePort))); err != nil {
				t.Fatal(err)
			}
		}, true},
		// What the light read does not see: a full read now and then
		// picks it up (the daemon's safety net).
		{"GID (not read)", "rxe-two", func(t *testing.T, root string) {
			writeAttr(t, filepath.Join(root, rxePort, "gids", "2"), "0000:0000:0000:0000:0000:ffff:c0a8:7b63")
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := copyFixture(t, c.tree)
			opts := DiscoverOptions{SysfsRoot: root}
			before, err := Discover(opts)
			if err != nil {
				t.Fatal(err)
			}
			c.change(t, root)
			light, err := ReadPortStates(opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := PortStatesDiffer(before, light); got != c.differ {
				t.Fatalf("PortStatesDiffer after %s = %v, want %v", c.name, got, c.differ)
			}
			after, err := Discover(opts)
			if err != nil {
				t.Fatal(err)
			}
			// The light read agrees with the full read it stands for.
			if PortStatesDiffer(after, light) {
				t.Errorf("the light read differs from a full read of the same tree")
			}
			changes := DiffPorts(before, after)
			visible := 0
			for _, ch := range changes {
				if ch.Kind != PortChanged || ch.Fields&^FieldGIDs != 0 {
					visible++
				}
			}
			if (visible > 0) != c.differ {
				t.Errorf("DiffPorts over full reads: %v; the light read says differ=%v", changes, c.differ)
			}
		})
	}
}

func TestPortStatesDifferMatching(t *testing.T) {
	inv, err := Discover(fixture("mlx4-dual"))
	if err != nil {
		t.Fatal(err)
	}
	two, err := Discover(fixture("rxe-two"))
	if err != nil {
		t.Fatal(err)
	}
	light := lightOf(two)
	// Order does not matter: devices by name, ports by number.
	swapped := []DevicePorts{light[1], light[0]}
	if PortStatesDiffer(two, swapped) {
		t.Error("devices in another order differ")
	}
	rev := lightOf(inv)
	rev[0].Ports = []PortRuntime{rev[0].Ports[1], rev[0].Ports[0]}
	if PortStatesDiffer(inv, rev) {
		t.Error("ports in another order differ")
	}
	for name, l := range map[string][]DevicePorts{
		"no devices":       nil,
		"one device twice": {light[0], light[0]},
		"other devices":    lightOf(inv),
		"one device fewer": light[:1],
	} {
		if !PortStatesDiffer(two, l) {
			t.Errorf("%s: no difference", name)
		}
	}
	if PortStatesDiffer(nil, []DevicePorts{}) || PortStatesDiffer([]HCAInfo{}, nil) {
		t.Error("no devices differs from no devices")
	}
}

func TestReadPortStatesNoDevices(t *testing.T) {
	got, err := ReadPortStates(DiscoverOptions{SysfsRoot: t.TempDir()})
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("ReadPortStates(empty tree) = %v, %v; want an empty list and no error", got, err)
	}
	if _, err := os.Stat("/sys/class/infiniband"); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	got, err = ReadPortStates(DiscoverOptions{})
	if err != nil || len(got) != 0 {
		t.Errorf("ReadPortStates(running system without RDMA) = %v, %v", got, err)
	}
}

// gidTableTree is rxe-two with a GID table the size of rdma_rxe's: 1024
// GID files a port, the first four non-zero (with their gid_attrs), the
// rest zero as the kernel shows unused entries.
func gidTableTree(tb testing.TB) string {
	tb.Helper()
	root := copyFixture(tb, "rxe-two")
	ports, _ := filepath.Glob(filepath.Join(root, "class", "infiniband", "*", "ports", "*"))
	const zero = "0000:0000:0000:0000:0000:0000:0000:0000"
	for _, p := range ports {
		for i := 4; i < 1024; i++ {
			writeAttr(tb, filepath.Join(p, "gids", fmt.Sprint(i)), zero)
		}
	}
	return root
}

// BenchmarkPortPoll times, in the same loop, what a port poll cost before
// (a full Discover) and what it costs now when nothing changed (the light
// read and the comparison with the last inventory), on a tree of two rxe
// devices with 1024 GID files each.
//
//	go test -run '^$' -bench PortPoll ./pathsel
func BenchmarkPortPoll(b *testing.B) {
	opts := DiscoverOptions{SysfsRoot: gidTableTree(b)}
	var full, light time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		inv, err := Discover(opts)
		t1 := time.Now()
		st, lerr := ReadPortStates(opts)
		differ := PortStatesDiffer(inv, st)
		t2 := time.Now()
		if err != nil || lerr != nil || differ || len(inv) != 2 || len(inv[0].Ports[0].GIDs) != 4 {
			b.Fatalf("Discover %v, ReadPortStates %v, differ %v", err, lerr, differ)
		}
		full += t1.Sub(t0)
		light += t2.Sub(t1)
		n++
	}
	b.ReportMetric(float64(full.Nanoseconds())/float64(n), "discover-ns/call")
	b.ReportMetric(float64(light.Nanoseconds())/float64(n), "light-ns/call")
	b.ReportMetric(float64(full)/float64(light), "discover/light")
}
