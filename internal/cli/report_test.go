package cli

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
)

// checkJSONError checks that stderr is one line holding one JSON error
// object whose code is that of the exit code.
func checkJSONError(t *testing.T, stderr string, exit int) jsonErrorBody {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Fatalf("JSON error output %q: want one line", stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stderr))
	dec.DisallowUnknownFields()
	var e jsonError
	if err := dec.Decode(&e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("JSON error output %q: %v; want {\"error\": {\"code\", \"message\"}}", stderr, err)
	}
	want := map[int][]string{
		ExitError:      {codeError, codeTimeout, api.CodeBadRequest, api.CodeNotFound, api.CodeConflict, api.CodeOwnerGone, api.CodeOwnerTimeout, api.CodeInternal},
		ExitUsage:      {codeUsage},
		ExitDaemonDown: {codeNotRunning, codeNotSocket, codeNotIbpathd},
		ExitDenied:     {codeForbidden, codeSocketPerm},
		ExitPartial:    {codePartial},
	}[exit]
	found := false
	for _, c := range want {
		found = found || c == e.Error.Code
	}
	if !found {
		t.Errorf("exit %d with code %q, want one of %v", exit, e.Error.Code, want)
	}
	return e.Error
}

// TestJSONErrors: with --json every error is one JSON object on stderr,
// with the exit code's code and a hint where the text has one; stdout
// holds the document asked for or nothing.
func TestJSONErrors(t *testing.T) {
	f := startFake(t, map[string]reply{api.PathMigrate: {http.StatusMultiStatus, "migrate-port-partial.json"}})
	for _, c := range []struct {
		args      []string
		exit      int
		code      string
		hint      string
		outputDoc bool
	}{
		{[]string{"--socket", downSocket, "--json", "status"}, ExitDaemonDown, codeNotRunning, "start it with: ibpathd", false},
		{[]string{"--socket", "/", "status", "--json"}, ExitDaemonDown, codeNotSocket, "--socket or IBPATH_SOCKET", false},
		{[]string{"--json=true", "stauts"}, ExitUsage, codeUsage, "ibpath help", false},
		{[]string{"--socket", f.socket, "--json", "migrate", "--port", "mlx5_0:1"}, ExitPartial, codePartial, "", true},
	} {
		stdout, stderr, exit := run(c.args...)
		if exit != c.exit {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, exit, c.exit, stderr)
			continue
		}
		e := checkJSONError(t, stderr, exit)
		if e.Code != c.code || !strings.Contains(e.Hint, c.hint) || (c.hint == "") != (e.Hint == "") {
			t.Errorf("%v: error %+v, want code %q and hint %q", c.args, e, c.code, c.hint)
		}
		if c.outputDoc != (stdout != "") || (stdout != "" && !json.Valid([]byte(stdout))) {
			t.Errorf("%v: stdout %q", c.args, stdout)
		}
	}
	// without --json (or with --json=false) errors stay text
	for _, args := range [][]string{{"--socket", downSocket, "status"}, {"--socket", downSocket, "--json=false", "status"}} {
		if _, stderr, _ := run(args...); !strings.HasPrefix(stderr, "ibpath: ibpathd is not running") {
			t.Errorf("%v: error output %q, want text", args, stderr)
		}
	}
}

func TestJSONRequested(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"status"}, false},
		{[]string{"--json", "status"}, true},
		{[]string{"status", "-json"}, true},
		{[]string{"--json=false", "status"}, false},
		{[]string{"--json=1", "status"}, true},
		{[]string{"--json", "status", "--json=false"}, false},
		{[]string{"--json=maybe", "status"}, false},
		{[]string{"status", "--", "--json"}, false},
		{[]string{"--jsonx", "status"}, false},
		{[]string{"json"}, false},
	} {
		if got := jsonRequested(c.args); got != c.want {
			t.Errorf("jsonRequested(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// socketServing serves handler on a UNIX socket of its own until the
// test ends.
func socketServing(t *testing.T, handler http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ibpcli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "x.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return socket
}

// TestNotIbpathdSays: a socket that answers, but not as ibpathd does,
// says so (exit 3) and what to do, rather than showing a JSON decoding
// error.
func TestNotIbpathdSays(t *testing.T) {
	socket := socketServing(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) }))
	_, stderr, code := run("--socket", socket, "peers")
	if code != ExitDaemonDown || !strings.Contains(stderr, "socket "+socket+": the socket answered, but not as ibpathd does") ||
		!strings.Contains(stderr, "ibpath: give ibpathd's socket with --socket") {
		t.Fatalf("exit %d, error output:\n%s", code, stderr)
	}
	_, stderr, code = run("--socket", socket, "--json", "status")
	if e := checkJSONError(t, stderr, code); code != ExitDaemonDown || e.Code != codeNotIbpathd {
		t.Fatalf("--json: exit %d, error %+v", code, e)
	}
}

// TestTimeoutSays: a daemon that does not answer within --timeout is a
// sentence with the value, not Go's error.
func TestTimeoutSays(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	socket := socketServing(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	start := time.Now()
	_, stderr, code := run("--socket", socket, "--timeout", "100ms", "status")
	if code != ExitError || !strings.HasPrefix(stderr, "ibpath: ibpathd did not answer in time: no answer within 100ms (GET /v1/status") ||
		!strings.Contains(stderr, "ibpath: give it longer with --timeout") || strings.Contains(stderr, "deadline") {
		t.Fatalf("exit %d, error output:\n%s", code, stderr)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("--timeout 100ms took %v", time.Since(start))
	}
	_, stderr, code = run("--socket", socket, "--timeout", "1ns", "--json", "peers")
	if e := checkJSONError(t, stderr, code); code != ExitError || e.Code != codeTimeout || !strings.Contains(e.Message, "within 1ns") {
		t.Fatalf("--timeout 1ns --json: exit %d, error %+v", code, e)
	}
}
