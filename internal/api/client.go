package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// ErrDaemonDown: nothing listens on the socket (ibpathd is not running, or
// the path is wrong).
var ErrDaemonDown = errors.New("ibpathd is not running")

// ErrNotSocket: the socket's path names something that is not a socket
// (a directory, a regular file).
var ErrNotSocket = errors.New("not a socket")

// ErrNotIbpathd: something answered on the socket, but not as ibpathd
// does (not HTTP, or not the JSON of this API).
var ErrNotIbpathd = errors.New("the socket answered, but not as ibpathd does")

// ErrTimeout: ibpathd did not answer within the client's timeout.
var ErrTimeout = errors.New("ibpathd did not answer in time")

// ErrDenied: the daemon refused the request (HTTP 403).
var ErrDenied = errors.New("permission denied")

// Client talks to ibpathd over its UNIX socket.
type Client struct {
	Socket string
	http   *http.Client
}

// NewClient returns a client of the daemon listening on socket. Every
// call gives up after timeout (none when 0).
func NewClient(socket string, timeout time.Duration) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{Socket: socket, http: &http.Client{Transport: tr, Timeout: timeout}}
}

// callError says why a request got no answer: the daemon did not answer
// in time (ErrTimeout), nothing listens on the socket (ErrDaemonDown),
// its path is no socket (ErrNotSocket), or what answered does not speak
// HTTP (ErrNotIbpathd).
func (c *Client) callError(ctx context.Context, method, path string, err error) error {
	var ue *url.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ue) && ue.Timeout()) {
		within := "within the caller's deadline"
		if c.http.Timeout > 0 && ctx.Err() == nil {
			within = "within " + c.http.Timeout.String()
		}
		return fmt.Errorf("%w: no answer %s (%s %s, socket %s)", ErrTimeout, within, method, path, c.Socket)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		if fi, serr := os.Stat(c.Socket); serr == nil && fi.Mode().Type() != fs.ModeSocket {
			return fmt.Errorf("socket %s: it is %s, %w", c.Socket, fileKind(fi.Mode()), ErrNotSocket)
		}
		return fmt.Errorf("%w (socket %s): %w", ErrDaemonDown, c.Socket, op.Err)
	}
	// Connected, but no HTTP answer: bytes that are not HTTP (read as an
	// answer, or sent before the request, as sshd does: net/http's
	// "unsolicited response"), or the connection closed without one.
	if msg := err.Error(); strings.Contains(msg, "malformed HTTP") || strings.Contains(msg, "readLoopPeekFailLocked") {
		return fmt.Errorf("socket %s: %w (%s %s: the answer is not HTTP): %w", c.Socket, ErrNotIbpathd, method, path, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(err.Error(), "server closed idle connection") { // net/http's unexported errServerClosedIdle
		return fmt.Errorf("socket %s: %w (%s %s: the connection was closed without an HTTP answer): %w",
			c.Socket, ErrNotIbpathd, method, path, err)
	}
	return fmt.Errorf("%s %s: %w", method, path, err)
}

// fileKind names what a path that is no socket is.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	case m.Type()&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.Type()&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m.Type()&fs.ModeDevice != 0:
		return "a device"
	}
	return "of mode " + m.Type().String()
}

// do sends a request and decodes a JSON response into out (when not nil).
// It returns the HTTP status code.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://ibpathd"+path, body)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, c.callError(ctx, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if cerr := c.callError(ctx, method, path, err); errors.Is(cerr, ErrTimeout) {
			return resp.StatusCode, cerr
		}
		return resp.StatusCode, fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		var e Error
		if json.Unmarshal(data, &e) != nil || e.Message == "" {
			e = Error{Code: CodeInternal, Message: fmt.Sprintf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(data))}
		}
		if resp.StatusCode == http.StatusForbidden {
			return resp.StatusCode, fmt.Errorf("%w: %w", ErrDenied, &e)
		}
		return resp.StatusCode, &e
	}
	if out == nil {
		return resp.StatusCode, nil
	}
	if s, ok := out.(*string); ok {
		*s = string(data)
		return resp.StatusCode, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.StatusCode, fmt.Errorf("socket %s: %w (%s %s: the answer is not this API's JSON): %w", c.Socket, ErrNotIbpathd, method, path, err)
	}
	return resp.StatusCode, nil
}
