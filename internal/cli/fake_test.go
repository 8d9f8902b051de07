package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ibpath/ibpath/internal/api"
)

// reply is what the fake daemon answers on one path: the HTTP status and
// a file of testdata as the body.
type reply struct {
	code int
	file string
}

// request is a request the fake daemon received.
type request struct {
	Method, Path, Query string
	Body                []byte
}

// fakeDaemon serves canned JSON at the api paths on a UNIX socket, and
// records the requests it receives.
type fakeDaemon struct {
	socket  string
	replies map[string]reply // by path

	mu   sync.Mutex
	reqs []request
}

// defaultReplies: the canned answer of every GET path.
func defaultReplies() map[string]reply {
	return map[string]reply{
		api.PathStatus:   {http.StatusOK, "status.json"},
		api.PathPeers:    {http.StatusOK, "peers.json"},
		api.PathStoreQPs: {http.StatusOK, "store-qps.json"},
		api.PathStoreMRs: {http.StatusOK, "store-mrs.json"},
		api.PathMetrics:  {http.StatusOK, "metrics.txt"},
	}
}

// startFake starts a fake daemon answering replies (on top of
// defaultReplies) and stops it when the test ends.
func startFake(t *testing.T, replies map[string]reply) *fakeDaemon {
	t.Helper()
	// t.TempDir can exceed the 108 bytes of a UNIX socket path.
	dir, err := os.MkdirTemp("", "ibpcli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeDaemon{socket: filepath.Join(dir, "d.sock"), replies: defaultReplies()}
	for p, r := range replies {
		f.replies[p] = r
	}
	ln, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("fake daemon: %v", err)
		}
	})
	return f
}

func (f *fakeDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer
	body.ReadFrom(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body.Bytes()})
	f.mu.Unlock()

	rep, ok := f.replies[r.URL.Path]
	if !ok {
		rep = reply{http.StatusNotFound, ""}
	}
	want := http.MethodGet
	if r.URL.Path == api.PathArm || r.URL.Path == api.PathMigrate {
		want = http.MethodPost
		var req api.ActionRequest
		dec := json.NewDecoder(bytes.NewReader(body.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.Target.Validate() != nil {
			writeError(w, http.StatusBadRequest, api.Error{Code: api.CodeBadRequest, Message: "bad action request"})
			return
		}
	}
	if r.URL.Path == api.PathDrain || r.URL.Path == api.PathUndrain {
		want = http.MethodPost
		var req api.PortRequest
		dec := json.NewDecoder(bytes.NewReader(body.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.Validate() != nil {
			writeError(w, http.StatusBadRequest, api.Error{Code: api.CodeBadRequest, Message: "bad port request"})
			return
		}
	}
	if r.Method != want {
		writeError(w, http.StatusMethodNotAllowed, api.Error{Code: api.CodeBadRequest, Message: "method not allowed"})
		return
	}
	if rep.file == "" {
		writeError(w, rep.code, api.Error{Code: api.CodeNotFound, Message: "no such path " + r.URL.Path})
		return
	}
	data, err := os.ReadFile(filepath.Join("testdata", rep.file))
	if err != nil {
		writeError(w, http.StatusInternalServerError, api.Error{Code: api.CodeInternal, Message: err.Error()})
		return
	}
	if filepath.Ext(rep.file) == ".json" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(rep.code)
	w.Write(data)
}

func writeError(w http.ResponseWriter, code int, e api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(e)
}

// requests returns what the fake received so far.
func (f *fakeDaemon) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}
