package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ibpath/ibpath/internal/api"
)

// Error codes of the JSON error object (`--json`), beside the daemon's
// own (api.Error.Code: bad-request, not-found, conflict, owner-gone,
// owner-timeout, internal), which pass through.
const (
	codeUsage      = "usage"           // exit 2
	codeNotRunning = "not-running"     // exit 3: nothing listens on the socket
	codeNotSocket  = "not-a-socket"    // exit 3: the socket's path is no socket
	codeNotIbpathd = "not-ibpathd"     // exit 3: what answers is not ibpathd
	codeSocketPerm = "socket-denied"   // exit 4: the socket's permissions keep this user out
	codeForbidden  = api.CodeForbidden // exit 4: ibpathd refused the request
	codePartial    = "partial"         // exit 5
	codeTimeout    = "timeout"         // exit 1: ibpathd did not answer within --timeout
	codeError      = "error"           // exit 1: anything else
)

// jsonError is what ibpath prints on stderr for an error under --json:
// {"error": {"code": ..., "message": ..., "hint": ...}}, on one line.
type jsonError struct {
	Error jsonErrorBody `json:"error"`
}

type jsonErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
}

// report prints err to w and returns the exit code: as lines prefixed
// "ibpath: " with a hint where one helps, or, when asJSON, as one JSON
// error object (stdout keeps only the document asked for, if any).
func report(w io.Writer, err error, asJSON bool) int {
	code := exitCode(err)
	if code == ExitOK {
		return code
	}
	h := hint(err, code)
	if asJSON {
		b, merr := json.Marshal(jsonError{jsonErrorBody{Code: errorCode(err, code), Message: err.Error(), Hint: h}})
		if merr != nil { // strings only: cannot happen; say both
			fmt.Fprintf(w, "ibpath: %v (and its JSON: %v)\n", err, merr)
			return code
		}
		fmt.Fprintf(w, "%s\n", b)
		return code
	}
	fmt.Fprintf(w, "ibpath: %v\n", err)
	if h != "" {
		fmt.Fprintf(w, "ibpath: %s\n", h)
	}
	return code
}

// errorCode is the JSON error object's code for err, which exits with
// code.
func errorCode(err error, code int) string {
	var ae *api.Error
	switch {
	case code == ExitUsage:
		return codeUsage
	case errors.Is(err, api.ErrNotSocket):
		return codeNotSocket
	case errors.Is(err, api.ErrNotIbpathd):
		return codeNotIbpathd
	case code == ExitDaemonDown:
		return codeNotRunning
	case errors.As(err, new(*socketDeniedError)):
		return codeSocketPerm
	case code == ExitDenied:
		return codeForbidden
	case code == ExitPartial:
		return codePartial
	case errors.Is(err, api.ErrTimeout):
		return codeTimeout
	case errors.As(err, &ae) && ae.Code != "":
		return ae.Code
	}
	return codeError
}

// hint says what to do about err, or "".
func hint(err error, code int) string {
	switch {
	case code == ExitUsage:
		return "run 'ibpath help' or 'ibpath COMMAND --help' for usage"
	case errors.Is(err, api.ErrNotSocket), errors.Is(err, api.ErrNotIbpathd):
		return "give ibpathd's socket with --socket or IBPATH_SOCKET (ibpathd listens on " + api.DefaultSocket +
			" unless its --socket says otherwise)"
	case code == ExitDaemonDown:
		return "start it with: ibpathd (or give its socket with --socket or IBPATH_SOCKET)"
	case errors.As(err, new(*socketDeniedError)):
		return "run as root or as a member of the socket's group"
	case errors.Is(err, api.ErrTimeout):
		return "give it longer with --timeout, or see in ibpathd's log what keeps it busy"
	}
	return ""
}

// jsonRequested: the command line asks for JSON (--json, or --json=BOOL
// true, the last one before a "--" deciding). It is read from the
// arguments themselves, so that an error of the command line itself is
// reported as JSON too.
func jsonRequested(args []string) bool {
	want := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		want = true
		if hasVal {
			v, err := strconv.ParseBool(val)
			want = err == nil && v
		}
	}
	return want
}
