package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/verbs"
)

// handler routes the local API. Every handler reads the connection's peer
// credentials; a connection whose credentials could not be read gets
// nothing.
func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api.PathStatus, d.status)
	mux.HandleFunc("GET "+api.PathPeers, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, d.Status().Peers) })
	mux.HandleFunc("POST "+api.PathArm, d.action(d.Arm))
	mux.HandleFunc("POST "+api.PathMigrate, d.action(d.Migrate))
	mux.HandleFunc("POST "+api.PathDrain, d.portAction(d.Drain))
	mux.HandleFunc("POST "+api.PathUndrain, d.portAction(d.Undrain))
	mux.HandleFunc("GET "+api.PathStoreQPs, d.storeQPs)
	mux.HandleFunc("GET "+api.PathStoreMRs, d.storeMRs)
	mux.HandleFunc("GET "+api.PathMetrics, d.serveMetrics)
	mux.HandleFunc("GET "+api.PathOwner, d.ownerUpgrade)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allowed, ok := knownPaths[r.URL.Path]; ok {
			w.Header().Set("Allow", allowed)
			writeJSON(w, http.StatusMethodNotAllowed, &api.Error{Code: api.CodeBadRequest,
				Message: fmt.Sprintf("%s %s: method not allowed (use %s)", r.Method, r.URL.Path, allowed)})
			return
		}
		writeError(w, notFound("%s %s: no such path (this ibpathd serves API %s)", r.Method, r.URL.Path, api.Version))
	})
	return withCaller(mux)
}

// knownPaths maps each path to its method, for 405 answers.
var knownPaths = map[string]string{
	api.PathStatus: "GET", api.PathPeers: "GET", api.PathArm: "POST", api.PathMigrate: "POST", api.PathDrain: "POST", api.PathUndrain: "POST",
	api.PathStoreQPs: "GET", api.PathStoreMRs: "GET", api.PathMetrics: "GET", api.PathOwner: "GET",
}

// withCaller refuses requests on a connection without credentials.
func withCaller(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := callerOf(r.Context()); err != nil {
			writeError(w, forbidden("%v", err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeError(w, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

var codeStatus = map[string]int{
	api.CodeBadRequest:   http.StatusBadRequest,
	api.CodeForbidden:    http.StatusForbidden,
	api.CodeNotFound:     http.StatusNotFound,
	api.CodeConflict:     http.StatusConflict,
	api.CodeOwnerGone:    http.StatusBadGateway,
	api.CodeOwnerTimeout: http.StatusGatewayTimeout,
	api.CodeInternal:     http.StatusInternalServerError,
}

func writeError(w http.ResponseWriter, err error) {
	var e *api.Error
	if !errors.As(err, &e) {
		e = &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	code, ok := codeStatus[e.Code]
	if !ok {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, e)
}

// maxBody bounds a request body.
const maxBody = 64 << 10

// decodeRequest reads a JSON body strictly: unknown fields and trailing
// data are errors, never ignored.
func decodeRequest(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("%s %s: body: %v", r.Method, r.URL.Path, err)
	}
	if dec.More() {
		return badRequest("%s %s: body: trailing data after the JSON object", r.Method, r.URL.Path)
	}
	return nil
}

// DecodeActionRequest parses the body of /v1/arm and /v1/migrate.
func DecodeActionRequest(body []byte) (api.ActionRequest, error) {
	r, _ := http.NewRequest(http.MethodPost, api.PathArm, strings.NewReader(string(body)))
	var req api.ActionRequest
	if err := decodeRequest(r, &req); err != nil {
		return api.ActionRequest{}, err
	}
	if err := req.Target.Validate(); err != nil {
		return api.ActionRequest{}, badRequest("%v", err)
	}
	return req, nil
}

type actionFunc func(ctx context.Context, c api.Caller, req api.ActionRequest) (api.ActionResult, error)

func (d *Daemon) action(fn actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, _ := callerOf(r.Context())
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			writeError(w, badRequest("read body: %v", err))
			return
		}
		if len(body) > maxBody {
			writeError(w, badRequest("body exceeds %d bytes", maxBody))
			return
		}
		req, err := DecodeActionRequest(body)
		if err != nil {
			writeError(w, err)
			return
		}
		res, err := fn(r.Context(), c, req)
		if err != nil {
			writeError(w, err)
			return
		}
		code := http.StatusOK
		if res.Failed() > 0 {
			code = http.StatusMultiStatus
		}
		writeJSON(w, code, res)
	}
}

func (d *Daemon) storeQPs(w http.ResponseWriter, r *http.Request) {
	node := r.URL.Query().Get("node")
	out := []api.StoreQP{}
	for _, e := range d.repl.Store().QPEntries() {
		if node != "" && e.Owner.Node != node {
			continue
		}
		out = append(out, api.StoreQP{GID: gidText(e.Key.GID), LID: e.Key.LID, QPN: e.Key.QPN, Device: e.Value.Device,
			Port: e.Value.Port, BGID: gidText(e.Value.GID), BLID: e.Value.LID, BQPN: e.Value.QPN, Owner: e.Owner.String(), Version: e.Version})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Owner != out[j].Owner {
			return out[i].Owner < out[j].Owner
		}
		return out[i].QPN < out[j].QPN
	})
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) storeMRs(w http.ResponseWriter, r *http.Request) {
	node := r.URL.Query().Get("node")
	out := []api.StoreMR{}
	for _, e := range d.repl.Store().MREntries() {
		if node != "" && e.Owner.Node != node {
			continue
		}
		out = append(out, api.StoreMR{GID: gidText(e.Key.GID), LID: e.Key.LID, RKey: e.Key.RKey, BRKey: e.Value.RKey,
			Addr: e.Value.Addr, Length: e.Value.Length, Owner: e.Owner.String(), Version: e.Version})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Owner != out[j].Owner {
			return out[i].Owner < out[j].Owner
		}
		return out[i].RKey < out[j].RKey
	})
	writeJSON(w, http.StatusOK, out)
}

func gidText(g verbs.GID) string {
	if g.IsZero() {
		return ""
	}
	return g.String()
}

// ownerUpgrade switches a connection to the owner protocol.
func (d *Daemon) ownerUpgrade(w http.ResponseWriter, r *http.Request) {
	c, _ := callerOf(r.Context())
	if !strings.EqualFold(r.Header.Get("Upgrade"), ownerproto.Upgrade) {
		writeError(w, badRequest("%s needs Connection: Upgrade and Upgrade: %s", api.PathOwner, ownerproto.Upgrade))
		return
	}
	d.life.Lock()
	if d.closing {
		d.life.Unlock()
		writeError(w, &api.Error{Code: api.CodeOwnerGone, Message: "ibpathd is stopping"})
		return
	}
	d.wg.Add(1)
	d.life.Unlock()
	defer d.wg.Done()
	hj, ok := w.(http.Hijacker)
	if !ok {
		writeError(w, fmt.Errorf("owner upgrade: the connection cannot be taken over"))
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		writeError(w, fmt.Errorf("owner upgrade: hijack: %w", err))
		return
	}
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + ownerproto.Upgrade + "\r\n\r\n"); err == nil {
		err = brw.Flush()
	}
	if err != nil {
		conn.Close()
		d.log.Warn("owner upgrade: write 101", "err", err)
		return
	}
	defer d.conns.release(conn)
	// the server's deadlines were for one request; the session has its own
	if err := conn.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		d.log.Warn("owner upgrade: clear the deadlines", "err", err)
		return
	}
	d.serveOwner(ownerproto.NewConn(conn, brw.Reader), c)
}

// status answers GET /v1/status: every QP, or with ?qps=N at most N QP
// rows (QPsTotal and Layers still count them all).
func (d *Daemon) status(w http.ResponseWriter, r *http.Request) {
	rows := -1
	if v := r.URL.Query().Get("qps"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, badRequest("%s?qps=%q: want the number of QP rows, 0 or more", api.PathStatus, v))
			return
		}
		rows = n
	}
	writeJSON(w, http.StatusOK, d.StatusOf(rows))
}

type portFunc func(ctx context.Context, c api.Caller, req api.PortRequest) (api.DrainResult, error)

// portAction serves /v1/drain and /v1/undrain: 200 when every process
// answered, 207 when some did not (see Owners).
func (d *Daemon) portAction(fn portFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, _ := callerOf(r.Context())
		var req api.PortRequest
		if err := decodeRequest(r, &req); err != nil {
			writeError(w, err)
			return
		}
		res, err := fn(r.Context(), c, req)
		if err != nil {
			writeError(w, err)
			return
		}
		code := http.StatusOK
		for _, o := range res.Owners {
			if !o.OK {
				code = http.StatusMultiStatus
			}
		}
		writeJSON(w, code, res)
	}
}
