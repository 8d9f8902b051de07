package pathsel

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadPortCounters reads the counters of the fixtures: an mlx5 port
// with counters/ and hw_counters/, an rxe port with hw_counters/ only, a
// port with neither; a counter file that does not parse is an error
// naming it.
func TestReadPortCounters(t *testing.T) {
	root := func(name string) DiscoverOptions {
		return DiscoverOptions{SysfsRoot: filepath.Join("testdata", "sysfs", name)}
	}
	c, ok, err := ReadPortCounters(root("mlx5-ib"), "mlx5_0", 1)
	// link errors 2+1+1+5; sequence errors 3+1+9 (no ACK timeout, not
	// duplicate_request's 50); congestion 777+11+4+2
	if want := (PortCounters{LinkErrors: 9, SeqErrors: 13, XmitPkts: 123456, Congestion: 794}); err != nil || !ok || c != want {
		t.Fatalf("mlx5_0: %+v %v %v; want %+v", c, ok, err, want)
	}
	c, ok, err = ReadPortCounters(root("rxe-two"), "rxe0", 1)
	// link_downed 1300; rcvd_seq_err 700, out_of_seq_request 400 (not
	// duplicate_request 300, nor completer_retry_err); sent_pkts 100
	if want := (PortCounters{LinkErrors: 1300, SeqErrors: 1100, XmitPkts: 100}); err != nil || !ok || c != want {
		t.Fatalf("rxe0: %+v %v %v; want %+v", c, ok, err, want)
	}
	if c, ok, err := ReadPortCounters(root("rxe-two"), "rxe1", 1); err != nil || ok || c != (PortCounters{}) {
		t.Fatalf("rxe1 (no counters): %+v %v %v", c, ok, err)
	}
	dir := filepath.Join(t.TempDir(), "sysfs")
	if out, err := exec.Command("cp", "-a", filepath.Join("testdata", "sysfs", "rxe-two"), dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	bad := filepath.Join(dir, "class", "infiniband", "rxe0", "ports", "1", "hw_counters", "rcvd_seq_err")
	if err := os.WriteFile(bad, []byte("many\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadPortCounters(DiscoverOptions{SysfsRoot: dir}, "rxe0", 1); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("a counter that does not parse: %v; want ErrMalformed naming %s", err, bad)
	}
}

// BenchmarkReadPortCounters: one port's read, as ibpathd's counter poll
// makes it every --counter-poll: an mlx5 port of the fixture (12 files
// in counters/, 10 in hw_counters/, 15 of them read) and an rxe port
// (15 in hw_counters/, 4 read). docs/PERFORMANCE.md, "Port health".
func BenchmarkReadPortCounters(b *testing.B) {
	for _, c := range []struct{ fixture, dev string }{{"mlx5-ib", "mlx5_0"}, {"rxe-two", "rxe0"}} {
		b.Run(c.dev, func(b *testing.B) {
			o := DiscoverOptions{SysfsRoot: filepath.Join("testdata", "sysfs", c.fixture)}
			for b.Loop() {
				if _, _, err := ReadPortCounters(o, c.dev, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
