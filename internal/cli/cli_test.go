package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/api"
)

var update = flag.Bool("update", false, "rewrite the golden files (testdata/*.golden, docs/man/ibpath.1)")

// downSocket is a socket path nothing listens on.
const downSocket = "/nonexistent-ibpath-test/ibpathd.sock"

// run runs ibpath with args and returns its output and exit code.
func run(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = Run(append([]string{"ibpath"}, args...), &out, &errOut)
	return out.String(), errOut.String(), code
}

// transcript is what a golden file holds: the command line, its output,
// its error output and its exit code.
func transcript(args []string, stdout, stderr string, code int) string {
	var b strings.Builder
	line := []string{"$", "ibpath"}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$") {
			a = strconv.Quote(a)
		}
		line = append(line, a)
	}
	fmt.Fprintf(&b, "%s\n%s", strings.Join(line, " "), stdout)
	if stderr != "" {
		fmt.Fprintf(&b, "-- stderr --\n%s", stderr)
	}
	fmt.Fprintf(&b, "-- exit %d --\n", code)
	return b.String()
}

// checkGolden compares got with testdata/name.golden (or rewrites it with
// -update).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/cli -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run go test ./internal/cli -update to accept):\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

type goldenCase struct {
	name    string   // testdata/NAME.golden
	args    []string // after "ibpath" (the test adds --socket)
	replies map[string]reply
	code    int
	// sent: the action request the fake must have received; query: the
	// query of the request it must have received.
	sent  *api.ActionRequest
	query *string
	// down: no daemon (the socket does not exist); none: the command
	// must not reach the daemon.
	down, none bool
	// socket: the --socket given instead of a daemon's (a path that is
	// no socket).
	socket string
}

func str(s string) *string { return &s }

func goldenCases() []goldenCase {
	armQP := &api.ActionRequest{Target: api.Target{Device: "mlx5_0", QPN: 0x1c4}}
	migQP := &api.ActionRequest{Target: api.Target{Device: "mlx5_0", QPN: 0x1c3}}
	migPort := &api.ActionRequest{Target: api.Target{Device: "mlx5_0", Port: 1}}
	return []goldenCase{
		{name: "status", args: []string{"status"}},
		{name: "status-json", args: []string{"--json", "status"}},
		{name: "status-sim", args: []string{"status"}, replies: map[string]reply{api.PathStatus: {http.StatusOK, "status-sim.json"}}},
		{name: "peers", args: []string{"peers"}},
		{name: "peers-json", args: []string{"peers", "--json"}},
		{name: "store-qps", args: []string{"store", "qps"}, query: str("")},
		{name: "store-qps-json", args: []string{"--json", "store", "qps"}},
		{name: "store-qps-node", args: []string{"store", "qps", "--node", "node1"}, query: str("node=node1")},
		{name: "store-mrs", args: []string{"store", "mrs"}},
		{name: "store-mrs-json", args: []string{"store", "mrs", "--json", "--node", "node 0"}, query: str("node=node+0")},
		{name: "metrics", args: []string{"metrics"}},
		{name: "metrics-json", args: []string{"metrics", "--json"}},

		{name: "arm-qp", args: []string{"arm", "mlx5_0", "0x1c4"}, sent: armQP,
			replies: map[string]reply{api.PathArm: {http.StatusOK, "arm-qp.json"}}},
		{name: "arm-qp-decimal", args: []string{"arm", "mlx5_0", "452"}, sent: armQP,
			replies: map[string]reply{api.PathArm: {http.StatusOK, "arm-qp.json"}}},
		{name: "arm-qp-json", args: []string{"arm", "--json", "mlx5_0", "0X1C4"}, sent: armQP,
			replies: map[string]reply{api.PathArm: {http.StatusOK, "arm-qp.json"}}},
		{name: "arm-port", args: []string{"arm", "--port", "mlx5_0:1"},
			sent:    &api.ActionRequest{Target: api.Target{Device: "mlx5_0", Port: 1}},
			replies: map[string]reply{api.PathArm: {http.StatusOK, "arm-port.json"}}},
		{name: "arm-all", args: []string{"arm", "--all"}, sent: &api.ActionRequest{Target: api.Target{All: true}},
			replies: map[string]reply{api.PathArm: {http.StatusOK, "arm-all.json"}}},
		{name: "arm-all-json", args: []string{"--json", "arm", "--all"}, sent: &api.ActionRequest{Target: api.Target{All: true}},
			replies: map[string]reply{api.PathArm: {http.StatusOK, "arm-all.json"}}},
		{name: "migrate-qp", args: []string{"migrate", "mlx5_0", "0x1c3"}, sent: migQP,
			replies: map[string]reply{api.PathMigrate: {http.StatusOK, "migrate-qp.json"}}},
		{name: "migrate-qp-json", args: []string{"migrate", "--json", "mlx5_0", "451"}, sent: migQP,
			replies: map[string]reply{api.PathMigrate: {http.StatusOK, "migrate-qp.json"}}},
		{name: "migrate-port-dry-run", args: []string{"migrate", "--dry-run", "--port", "mlx5_0:1"},
			sent:    &api.ActionRequest{Target: migPort.Target, DryRun: true},
			replies: map[string]reply{api.PathMigrate: {http.StatusOK, "migrate-port-dry.json"}}},
		{name: "migrate-port-dry-run-json", args: []string{"--json", "migrate", "-n", "--port", "mlx5_0:1"},
			sent:    &api.ActionRequest{Target: migPort.Target, DryRun: true},
			replies: map[string]reply{api.PathMigrate: {http.StatusOK, "migrate-port-dry.json"}}},
		{name: "migrate-partial", args: []string{"migrate", "--port", "mlx5_0:1"}, sent: migPort, code: ExitPartial,
			replies: map[string]reply{api.PathMigrate: {http.StatusMultiStatus, "migrate-port-partial.json"}}},
		{name: "migrate-partial-json", args: []string{"migrate", "--json", "--port", "mlx5_0:1"}, sent: migPort, code: ExitPartial,
			replies: map[string]reply{api.PathMigrate: {http.StatusMultiStatus, "migrate-port-partial.json"}}},
		{name: "migrate-none", args: []string{"migrate", "--port", "mlx5_1:1"},
			sent:    &api.ActionRequest{Target: api.Target{Device: "mlx5_1", Port: 1}},
			replies: map[string]reply{api.PathMigrate: {http.StatusOK, "migrate-none.json"}}},

		{name: "daemon-down", args: []string{"status"}, down: true, code: ExitDaemonDown},
		{name: "daemon-down-json", args: []string{"--json", "status"}, down: true, code: ExitDaemonDown},
		{name: "socket-directory", args: []string{"status"}, socket: "/", code: ExitDaemonDown},
		{name: "socket-file", args: []string{"peers", "--json"}, socket: "testdata/peers.json", code: ExitDaemonDown},
		{name: "daemon-down-arm", args: []string{"arm", "--all"}, down: true, code: ExitDaemonDown},
		{name: "denied", args: []string{"arm", "mlx5_0", "0x1c3"}, code: ExitDenied,
			sent:    &api.ActionRequest{Target: migQP.Target},
			replies: map[string]reply{api.PathArm: {http.StatusForbidden, "forbidden.json"}}},
		{name: "denied-json", args: []string{"arm", "--json", "mlx5_0", "0x1c3"}, code: ExitDenied,
			sent:    &api.ActionRequest{Target: migQP.Target},
			replies: map[string]reply{api.PathArm: {http.StatusForbidden, "forbidden.json"}}},
		{name: "daemon-error", args: []string{"migrate", "mlx5_0", "0x1c3"}, code: ExitError, sent: migQP,
			replies: map[string]reply{api.PathMigrate: {http.StatusConflict, "internal.json"}}},
		{name: "daemon-error-json", args: []string{"--json", "migrate", "mlx5_0", "0x1c3"}, code: ExitError, sent: migQP,
			replies: map[string]reply{api.PathMigrate: {http.StatusConflict, "internal.json"}}},

		{name: "usage-bad-qpn", args: []string{"arm", "mlx5_0", "0xzz"}, code: ExitUsage, none: true},
		{name: "usage-qpn-zero", args: []string{"migrate", "mlx5_0", "0"}, code: ExitUsage, none: true},
		{name: "usage-qpn-too-big", args: []string{"migrate", "mlx5_0", "0x1000000"}, code: ExitUsage, none: true},
		{name: "usage-qpn-negative", args: []string{"arm", "mlx5_0", "-1"}, code: ExitUsage, none: true},
		{name: "usage-missing-qpn", args: []string{"arm", "mlx5_0"}, code: ExitUsage, none: true},
		{name: "usage-no-target", args: []string{"migrate"}, code: ExitUsage, none: true},
		{name: "usage-two-targets", args: []string{"arm", "--all", "--port", "mlx5_0:1"}, code: ExitUsage, none: true},
		{name: "usage-extra-arg", args: []string{"arm", "mlx5_0", "0x1c3", "0x1c4"}, code: ExitUsage, none: true},
		{name: "usage-bad-port", args: []string{"arm", "--port", "mlx5_0"}, code: ExitUsage, none: true},
		{name: "usage-bad-port-number", args: []string{"migrate", "--port", "mlx5_0:0"}, code: ExitUsage, none: true},
		{name: "usage-flag-after-args", args: []string{"migrate", "mlx5_0", "0x1c3", "--dry-run"}, code: ExitUsage, none: true},
		{name: "usage-migrate-all", args: []string{"migrate", "--all"}, code: ExitUsage, none: true},
		{name: "usage-unknown-command", args: []string{"stauts"}, code: ExitUsage, none: true},
		{name: "usage-no-command", args: []string{}, code: ExitUsage, none: true},
		{name: "usage-store-no-subcommand", args: []string{"store"}, code: ExitUsage, none: true},
		{name: "usage-store-unknown", args: []string{"store", "keys"}, code: ExitUsage, none: true},
		{name: "usage-unknown-flag", args: []string{"status", "--verbose"}, code: ExitUsage, none: true},
		{name: "usage-bad-timeout", args: []string{"--timeout", "soon", "status"}, code: ExitUsage, none: true},
		{name: "usage-status-arg", args: []string{"status", "mlx5_0"}, code: ExitUsage, none: true},
		{name: "usage-completion-shell", args: []string{"completion", "tcsh"}, code: ExitUsage, none: true},
		{name: "usage-completion-missing", args: []string{"completion"}, code: ExitUsage, none: true},
		{name: "usage-help-topic", args: []string{"help", "stauts"}, code: ExitUsage, none: true},
		{name: "usage-json", args: []string{"--json", "stauts"}, code: ExitUsage, none: true},
		{name: "usage-json-after-args", args: []string{"migrate", "mlx5_0", "0x1c3", "--json"}, code: ExitUsage, none: true},
	}
}

// TestGolden runs every command against the fake daemon and compares the
// transcript with its golden file; it also checks the request the command
// sent and its exit code.
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			socket := downSocket
			var f *fakeDaemon
			switch {
			case tc.socket != "":
				socket = tc.socket
			case !tc.down:
				f = startFake(t, tc.replies)
				socket = f.socket
			}
			stdout, stderr, code := run(append([]string{"--socket", socket}, tc.args...)...)
			checkGolden(t, tc.name, transcript(tc.args, stdout, stderr, code))
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			if (code == ExitOK) != (stderr == "") {
				t.Errorf("exit %d with error output %q", code, stderr)
			}
			switch {
			case code == ExitOK:
			case jsonRequested(tc.args):
				checkJSONError(t, stderr, code)
			case !strings.HasPrefix(stderr, "ibpath: "):
				t.Errorf("error output %q not prefixed \"ibpath: \"", stderr)
			}
			if f == nil {
				return
			}
			reqs := f.requests()
			if tc.none {
				if len(reqs) != 0 {
					t.Errorf("a usage error reached the daemon: %+v", reqs)
				}
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("daemon got %d requests, want 1: %+v", len(reqs), reqs)
			}
			if tc.query != nil && reqs[0].Query != *tc.query {
				t.Errorf("query %q, want %q", reqs[0].Query, *tc.query)
			}
			if tc.sent != nil {
				var got api.ActionRequest
				if err := json.Unmarshal(reqs[0].Body, &got); err != nil {
					t.Fatalf("request body %q: %v", reqs[0].Body, err)
				}
				if !reflect.DeepEqual(got, *tc.sent) {
					t.Errorf("sent %+v (%s), want %+v", got, reqs[0].Body, *tc.sent)
				}
			}
		})
	}
}

// TestJSONFlagEitherPlace: --json before the command and after it print
// the same document, and that document is valid JSON.
func TestJSONFlagEitherPlace(t *testing.T) {
	replies := map[string]reply{
		api.PathArm:     {http.StatusOK, "arm-all.json"},
		api.PathMigrate: {http.StatusOK, "migrate-qp.json"},
	}
	f := startFake(t, replies)
	for _, cmd := range [][]string{{"status"}, {"peers"}, {"store", "qps"}, {"store", "mrs"}, {"metrics"},
		{"arm", "--all"}, {"migrate", "mlx5_0", "0x1c3"}} {
		before, _, code1 := run(append([]string{"--socket", f.socket, "--json"}, cmd...)...)
		withFlag := append(append(append([]string{"--socket", f.socket}, cmd[0]), "--json"), cmd[1:]...)
		if cmd[0] == "store" {
			withFlag = []string{"--socket", f.socket, "store", cmd[1], "--json"}
		}
		after, _, code2 := run(withFlag...)
		if code1 != ExitOK || code2 != ExitOK {
			t.Errorf("%v: exit %d and %d", cmd, code1, code2)
		}
		if before != after || before == "" {
			t.Errorf("%v: --json before and after the command differ:\n%s\n---\n%s", cmd, before, after)
		}
		if !json.Valid([]byte(before)) {
			t.Errorf("%v --json: not JSON:\n%s", cmd, before)
		}
	}
}

// TestStatusJSONRoundTrip: ibpath --json status prints the node the daemon
// sent, field for field.
func TestStatusJSONRoundTrip(t *testing.T) {
	f := startFake(t, nil)
	out, _, code := run("--socket", f.socket, "status", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	in, err := os.ReadFile("testdata/status.json")
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ibpath --json status changed the document:\n%s", out)
	}
}

// TestStatusJSONKeepsNewerFields: a field this ibpath does not know (a
// newer daemon's) is printed, not dropped; an answer that is not a status
// document is an error.
func TestStatusJSONKeepsNewerFields(t *testing.T) {
	f := startFake(t, map[string]reply{api.PathStatus: {http.StatusOK, "status-future.json"}})
	out, _, code := run("--socket", f.socket, "--json", "status")
	if code != ExitOK || !strings.Contains(out, `"cooling"`) || !strings.Contains(out, `"fans": 3`) {
		t.Fatalf("exit %d, output lacks the newer field:\n%s", code, out)
	}
	g := startFake(t, map[string]reply{api.PathStatus: {http.StatusOK, "metrics.txt"}})
	if _, errOut, code := run("--socket", g.socket, "--json", "status"); code != ExitDaemonDown || !strings.Contains(errOut, "not a status document") ||
		!strings.Contains(errOut, `"code":"not-ibpathd"`) {
		t.Fatalf("a non-JSON answer: exit %d, stderr %q", code, errOut)
	}
}

// TestSocketFromEnvironment: IBPATH_SOCKET names the socket; --socket
// overrides it.
func TestSocketFromEnvironment(t *testing.T) {
	f := startFake(t, nil)
	t.Setenv("IBPATH_SOCKET", f.socket)
	if _, stderr, code := run("peers"); code != ExitOK {
		t.Errorf("IBPATH_SOCKET ignored: exit %d: %s", code, stderr)
	}
	if _, _, code := run("--socket", downSocket, "peers"); code != ExitDaemonDown {
		t.Errorf("--socket does not override IBPATH_SOCKET: exit %d", code)
	}
}

// TestSocketPermission: a socket this user may not connect to is a
// denial (exit 4), not a daemon that is down.
func TestSocketPermission(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root connects to any socket")
	}
	f := startFake(t, nil)
	if err := os.Chmod(f.socket, 0); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run("--socket", f.socket, "status")
	if code != ExitDenied || !strings.Contains(stderr, "permission denied") {
		t.Errorf("exit %d, error output %q; want %d and permission denied", code, stderr, ExitDenied)
	}
}

// TestExitCodes maps errors to exit codes directly.
func TestExitCodes(t *testing.T) {
	down := fmt.Errorf("%w (socket /x): %w", api.ErrDaemonDown, os.ErrNotExist)
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{fmt.Errorf("x"), ExitError},
		{usagef("x"), ExitUsage},
		{fmt.Errorf("wrapped: %w", usagef("x")), ExitUsage},
		{down, ExitDaemonDown},
		{clientError("/x", fmt.Errorf("%w (socket /x): %w", api.ErrDaemonDown, os.ErrPermission)), ExitDenied},
		{clientError("/x", down), ExitDaemonDown},
		{fmt.Errorf("%w: %w", api.ErrDenied, &api.Error{Code: api.CodeForbidden, Message: "no"}), ExitDenied},
		{&partialError{action: "arm", failed: 1, total: 2}, ExitPartial},
		{&api.Error{Code: api.CodeInternal, Message: "boom"}, ExitError},
		{fmt.Errorf("socket /x: it is a directory, %w", api.ErrNotSocket), ExitDaemonDown},
		{fmt.Errorf("socket /x: %w: %w", api.ErrNotIbpathd, errors.New("bad JSON")), ExitDaemonDown},
		{fmt.Errorf("%w: no answer within 1ns", api.ErrTimeout), ExitError},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
