package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ErrDaemonDown: nothing listens on the socket (ibpathd is not running, or
// the path is wrong).
var ErrDaemonDown = errors.New("ibpathd is not running")

// ErrDenied: the daemon refused the request (HTTP 403).
var ErrDenied = errors.New("permission denied")

// Client talks to ibpathd over its UNIX socket.
type Client struct {
	Socket string
	http   *http.Client
}

// NewClient returns a client of the daemon listening on socket.
func NewClient(socket string, timeout time.Duration) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{Socket: socket, http: &http.Client{Transport: tr, Timeout: timeout}}
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
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return 0, fmt.Errorf("%w (socket %s): %w", ErrDaemonDown, c.Socket, op.Err)
		}
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
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
		return resp.StatusCode, fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return resp.StatusCode, nil
}
