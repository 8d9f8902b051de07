package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUnseenContexts: the watch counts the fd links to a context's
// character device against the contexts the shim saw opened, and warns
// once when there are more, at the first look that shows them; a count
// that moves while the links are read warns of nothing.
func TestUnseenContexts(t *testing.T) {
	dir := t.TempDir()
	link := func(name, to string) {
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	link("0", "/dev/null")
	link("3", "/dev/infiniband/uverbs0")
	link("4", "anon_inode:[infinibandevent]")
	link("5", "/dev/infiniband/rdma_cm")
	seen, calls := 1, 0
	var warned []string
	var slept []time.Duration
	u := Unseen{FDDir: dir, Prefix: UverbsPrefix, At: []time.Duration{time.Second, 10 * time.Second, time.Minute},
		Seen:  func() int { calls++; return seen },
		Warn:  func(m string) { warned = append(warned, m) },
		Sleep: func(d time.Duration) { slept = append(slept, d); link("6", "/dev/infiniband/uverbs1") }}
	u.Run()
	if len(warned) != 1 || !strings.Contains(warned[0], "1 RDMA device context(s)") {
		t.Fatalf("warned %q, want once of one context", warned)
	}
	if len(slept) != 1 || slept[0] != time.Second {
		t.Fatalf("slept %v: the watch went on after it warned, or did not wait for its first look", slept)
	}

	// every context came through the shim: no warning after the last look
	warned, slept = nil, nil
	seen = 2
	u.Sleep = func(d time.Duration) { slept = append(slept, d) }
	u.Run()
	if len(warned) != 0 || len(slept) != 3 || slept[1] != 9*time.Second {
		t.Fatalf("warned %q, slept %v", warned, slept)
	}

	// a context opened while the links were read: nothing said
	seen = 0
	u.Seen = func() int { calls++; return seen + calls%2 }
	u.Run()
	if len(warned) != 0 {
		t.Fatalf("warned %q while the count moved", warned)
	}

	// no fd directory: the watch ends quietly
	u.FDDir = filepath.Join(dir, "missing")
	u.Seen = func() int { return 0 }
	u.Run()
	if len(warned) != 0 {
		t.Fatalf("warned %q without fd links", warned)
	}
}
