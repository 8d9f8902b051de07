package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/version"
)

// TestBuildInStatusAndMetrics: the daemon's build shows as the status's
// version and as ibpath_build_info on the metrics.
func TestBuildInStatusAndMetrics(t *testing.T) {
	b := version.Info{Version: "1.2.3-dev.4+g0123456789ab", Revision: "0123456789abcdef", GoVersion: "go1.99"}
	_, c := testDaemon(t, func(cfg *Config) { cfg.Build = b })
	ctx := context.Background()
	n, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Version != b.Version {
		t.Errorf("status version %q, want %q", n.Version, b.Version)
	}
	out, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# TYPE ibpath_build_info gauge\n",
		`ibpath_build_info{goversion="go1.99",revision="0123456789abcdef",version="1.2.3-dev.4+g0123456789ab"} 1` + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}
