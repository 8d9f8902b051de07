package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/version"
)

// TestVersion: ibpathd --version prints the build (internal/version) and
// exits; a running ibpathd reports the same build in its status and its
// ibpath_build_info metric.
func TestVersion(t *testing.T) {
	b := version.Get()
	out, err := runOnce(t, "--version")
	if want := "ibpathd version " + b.String() + "\n"; err != nil || out != want {
		t.Errorf("ibpathd --version: %q, %v; want %q", out, err, want)
	}
	p := startDaemon(t, "node0", t.TempDir(), "--fabric", "sim", "--no-replication")
	ctx := context.Background()
	n, err := p.client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Version != b.Version {
		t.Errorf("status version %q, want %q", n.Version, b.Version)
	}
	m, err := p.client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("ibpath_build_info{goversion=%q,revision=%q,version=%q} 1\n", b.GoVersion, b.Revision, b.Version); !strings.Contains(m, want) {
		t.Errorf("metrics lack %q:\n%s", want, m)
	}
}
