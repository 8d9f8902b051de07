package cli

import (
	"testing"

	"github.com/ibpath/ibpath/internal/version"
)

// TestVersion: --version (and -v) prints the build's version and exits 0,
// without asking ibpathd.
func TestVersion(t *testing.T) {
	want := "ibpath version " + version.Get().String() + "\n"
	for _, flag := range []string{"--version", "-v"} {
		out, stderr, code := run("--socket", "/nonexistent/ibpathd.sock", flag)
		if code != ExitOK || out != want || stderr != "" {
			t.Errorf("ibpath %s: exit %d, stdout %q, stderr %q; want exit 0 and %q", flag, code, out, stderr, want)
		}
	}
}
