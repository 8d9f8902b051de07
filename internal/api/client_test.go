package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

// serve runs handler on a UNIX socket until the test ends and returns a
// client of it.
func serve(t *testing.T, handler http.Handler) *api.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "ibpapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return api.NewClient(socket, 5*time.Second)
}

func TestClientDaemonDown(t *testing.T) {
	c := api.NewClient(filepath.Join(t.TempDir(), "none.sock"), time.Second)
	_, err := c.Status(context.Background())
	if !errors.Is(err, api.ErrDaemonDown) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want ErrDaemonDown wrapping ENOENT", err)
	}
	if !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("err %q does not name the socket", err)
	}
}

func TestClientDenied(t *testing.T) {
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"code":"forbidden","error":"uid 1001 may not arm"}`)
	}))
	_, err := c.Arm(context.Background(), api.Target{All: true})
	var e *api.Error
	if !errors.Is(err, api.ErrDenied) || !errors.As(err, &e) || e.Code != api.CodeForbidden {
		t.Fatalf("err %v, want ErrDenied wrapping a forbidden *Error", err)
	}
	if !strings.Contains(err.Error(), "uid 1001 may not arm") {
		t.Errorf("err %q lacks the daemon's message", err)
	}
}

func TestClientErrorBodies(t *testing.T) {
	for _, tc := range []struct {
		code     int
		body     string
		wantCode string
		wantMsg  string
	}{
		{http.StatusConflict, `{"code":"conflict","error":"QP busy"}`, api.CodeConflict, "QP busy"},
		{http.StatusInternalServerError, "boom\n", api.CodeInternal, "HTTP 500: boom"},
		{http.StatusNotFound, `{"code":"not-found"}`, api.CodeInternal, "HTTP 404"},
	} {
		c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.code)
			io.WriteString(w, tc.body)
		}))
		_, err := c.Peers(context.Background())
		var e *api.Error
		if !errors.As(err, &e) || e.Code != tc.wantCode || !strings.Contains(e.Message, tc.wantMsg) {
			t.Errorf("HTTP %d %q: err %v, want code %s and %q", tc.code, tc.body, err, tc.wantCode, tc.wantMsg)
		}
		if errors.Is(err, api.ErrDenied) || errors.Is(err, api.ErrDaemonDown) {
			t.Errorf("HTTP %d: err %v is a denial or a daemon down", tc.code, err)
		}
	}
}

// TestClientCalls: every call uses its path and method, sends its body and
// decodes the answer; a 207 is a result, not an error.
func TestClientCalls(t *testing.T) {
	type seen struct{ method, path, query, body string }
	var got []seen
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{r.Method, r.URL.Path, r.URL.RawQuery, string(b)})
		switch r.URL.Path {
		case api.PathStatus:
			io.WriteString(w, `{"schema":1,"node":"n0","future_field":true}`)
		case api.PathPeers:
			io.WriteString(w, `[{"name":"n1","state":"alive","entries":3}]`)
		case api.PathArm, api.PathMigrate:
			var req api.ActionRequest
			json.Unmarshal(b, &req)
			w.WriteHeader(http.StatusMultiStatus)
			json.NewEncoder(w).Encode(api.ActionResult{Action: "x", Target: req.Target, DryRun: req.DryRun,
				Results: []api.QPResult{{Device: "d", QPN: 1, OK: true}, {Device: "d", QPN: 2, Error: "no"}}})
		case api.PathStoreQPs:
			io.WriteString(w, `[{"qpn":7,"backup_device":"mlx5_1","backup_qpn":8,"owner":"n0/1/1","version":2}]`)
		case api.PathStoreMRs:
			io.WriteString(w, `[{"rkey":7,"backup_rkey":8,"owner":"n0/1/1","version":2}]`)
		case api.PathMetrics:
			io.WriteString(w, "m 1\n")
		}
	}))
	ctx := context.Background()
	n, err := c.Status(ctx)
	if err != nil || n.Schema != 1 || n.Node != "n0" {
		t.Errorf("Status: %+v, %v", n, err)
	}
	p, err := c.Peers(ctx)
	if err != nil || !reflect.DeepEqual(p, []status.Peer{{Name: "n1", State: "alive", Entries: 3}}) {
		t.Errorf("Peers: %+v, %v", p, err)
	}
	r, err := c.Arm(ctx, api.Target{Device: "d", Port: 1})
	if err != nil || r.Failed() != 1 || r.Target.Port != 1 {
		t.Errorf("Arm: %+v, %v", r, err)
	}
	r, err = c.Migrate(ctx, api.Target{Device: "d", QPN: 0x1c3}, true)
	if err != nil || !r.DryRun || r.Failed() != 1 {
		t.Errorf("Migrate: %+v, %v", r, err)
	}
	qps, err := c.StoreQPs(ctx, "node 1")
	if err != nil || len(qps) != 1 || qps[0].BQPN != 8 || qps[0].Device != "mlx5_1" {
		t.Errorf("StoreQPs: %+v, %v", qps, err)
	}
	mrs, err := c.StoreMRs(ctx, "")
	if err != nil || len(mrs) != 1 || mrs[0].BRKey != 8 {
		t.Errorf("StoreMRs: %+v, %v", mrs, err)
	}
	m, err := c.Metrics(ctx)
	if err != nil || m != "m 1\n" {
		t.Errorf("Metrics: %q, %v", m, err)
	}
	want := []seen{
		{"GET", api.PathStatus, "", ""},
		{"GET", api.PathPeers, "", ""},
		{"POST", api.PathArm, "", `{"target":{"device":"d","port":1}}`},
		{"POST", api.PathMigrate, "", `{"target":{"device":"d","qpn":451},"dry_run":true}`},
		{"GET", api.PathStoreQPs, "node=node+1", ""},
		{"GET", api.PathStoreMRs, "", ""},
		{"GET", api.PathMetrics, "", ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests:\n%+v\nwant\n%+v", got, want)
	}
}

func TestTargetValidate(t *testing.T) {
	for _, tc := range []struct {
		t  api.Target
		ok bool
	}{
		{api.Target{All: true}, true},
		{api.Target{Device: "d", QPN: 1}, true},
		{api.Target{Device: "d", Port: 1}, true},
		{api.Target{}, false},
		{api.Target{Device: "d"}, false},
		{api.Target{QPN: 1}, false},
		{api.Target{Device: "d", QPN: 1, Port: 1}, false},
		{api.Target{All: true, Device: "d"}, false},
	} {
		if err := tc.t.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v.Validate() = %v, want ok %v", tc.t, err, tc.ok)
		}
	}
}

// TestClientNotASocket: a socket path naming a directory or a regular
// file says so, rather than that ibpathd is not running.
func TestClientNotASocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, kind := range map[string]string{dir: "a directory", file: "a regular file"} {
		_, err := api.NewClient(path, time.Second).Status(context.Background())
		if !errors.Is(err, api.ErrNotSocket) || errors.Is(err, api.ErrDaemonDown) {
			t.Fatalf("%s: err %v, want ErrNotSocket", path, err)
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), kind) {
			t.Errorf("err %q does not say that %s is %s", err, path, kind)
		}
	}
}

// TestClientNotIbpathd: a socket that answers, but not with HTTP or not
// with this API's JSON, is not taken for ibpathd.
func TestClientNotIbpathd(t *testing.T) {
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	if _, err := c.Peers(context.Background()); !errors.Is(err, api.ErrNotIbpathd) || !strings.Contains(err.Error(), c.Socket) {
		t.Errorf("a plain text answer: err %v, want ErrNotIbpathd naming the socket", err)
	}

	dir, err := os.MkdirTemp("", "ibpapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "ssh.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// as sshd does: its banner, then it waits for the client's
			// (closing at once raced the client's request: broken pipe)
			conn.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
			go func() {
				io.Copy(io.Discard, conn)
				conn.Close()
			}()
		}
	}()
	_, err = api.NewClient(socket, 5*time.Second).Status(context.Background())
	if !errors.Is(err, api.ErrNotIbpathd) || errors.Is(err, api.ErrDaemonDown) {
		t.Errorf("a server that is not HTTP: err %v, want ErrNotIbpathd", err)
	}

	// one that closes the connection at once, before or after the
	// request was written
	closer := filepath.Join(dir, "closer.sock")
	ln2, err := net.Listen("unix", closer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln2.Close() })
	go func() {
		for {
			conn, err := ln2.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	for i := 0; i < 20; i++ {
		_, err = api.NewClient(closer, 5*time.Second).Status(context.Background())
		if !errors.Is(err, api.ErrNotIbpathd) || !strings.Contains(err.Error(), "closed") && !strings.Contains(err.Error(), "not HTTP") {
			t.Fatalf("a server that closes at once: err %v, want ErrNotIbpathd", err)
		}
	}
}

// TestClientTimeout: a daemon that does not answer in time is a timeout
// that says how long the client waited.
func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	c := api.NewClient(slow.Socket, 50*time.Millisecond)
	_, err := c.Status(context.Background())
	if !errors.Is(err, api.ErrTimeout) || !strings.Contains(err.Error(), "within 50ms") {
		t.Fatalf("err %v, want ErrTimeout saying within 50ms", err)
	}
	if strings.Contains(err.Error(), "Client.Timeout") || strings.Contains(err.Error(), "context deadline") {
		t.Errorf("err %q shows Go's own words", err)
	}
	// 1ns: whether the dial or the request gives up first, it is a timeout
	_, err = api.NewClient(slow.Socket, time.Nanosecond).Status(context.Background())
	if !errors.Is(err, api.ErrTimeout) || errors.Is(err, api.ErrDaemonDown) {
		t.Fatalf("1ns: err %v, want ErrTimeout", err)
	}
}
