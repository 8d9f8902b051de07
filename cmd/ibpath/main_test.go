package main

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestMain runs main itself when IBPATH_TEST_MAIN is set, so that the
// tests below can run ibpath as a process: its exit code and its
// completion candidates (which urfave/cli reads from os.Args) are those of
// the real command.
func TestMain(m *testing.M) {
	if os.Getenv("IBPATH_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ibpath runs this test binary as ibpath with args.
func ibpath(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "IBPATH_TEST_MAIN=1", "IBPATH_SOCKET=/nonexistent-ibpath-test/ibpathd.sock")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"sim", "--seed", "2"}, 0, ""},
		{[]string{"status"}, 3, "ibpath: ibpathd is not running (socket /nonexistent-ibpath-test/ibpathd.sock): connect: no such file or directory\n"},
		{[]string{"arm", "mlx5_0", "0xzz"}, 2, "ibpath: arm: bad QPN"},
		{[]string{"bogus"}, 2, "ibpath: unknown command \"bogus\""},
	} {
		out, stderr, code := ibpath(t, tc.args...)
		if code != tc.code || !strings.HasPrefix(stderr, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d, stderr starting %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
		if tc.code == 0 && !strings.Contains(out, "ibpath simulator demo") {
			t.Errorf("%v: output lacks the demo:\n%s", tc.args, out)
		}
	}
}

// TestGenerateCompletion: the candidates the bash and zsh scripts ask
// ibpath for.
func TestGenerateCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--generate-bash-completion"}, []string{"status", "arm", "migrate", "peers", "store", "metrics", "man", "completion", "sim"}},
		{[]string{"store", "--generate-bash-completion"}, []string{"qps", "mrs"}},
		{[]string{"migrate", "-", "--generate-bash-completion"}, []string{"--port", "--dry-run", "--json"}},
		{[]string{"-", "--generate-bash-completion"}, []string{"--socket", "--json", "--timeout"}},
	} {
		out, stderr, code := ibpath(t, tc.args...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s", tc.args, code, stderr)
		}
		got := strings.Fields(out)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%v: candidates %v lack %q", tc.args, got, w)
			}
		}
	}
}
