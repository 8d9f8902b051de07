package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/ibpath/ibpath/internal/status"
)

// Status returns the node's status.
func (c *Client) Status(ctx context.Context) (status.Node, error) {
	var n status.Node
	_, err := c.do(ctx, http.MethodGet, PathStatus, nil, &n)
	return n, err
}

// StatusQPs returns the node's status with at most rows QP rows (every
// QP when rows < 0); Node.QPsTotal and Node.Layers count them all.
func (c *Client) StatusQPs(ctx context.Context, rows int) (status.Node, error) {
	var n status.Node
	_, err := c.do(ctx, http.MethodGet, PathStatus+rowsQuery(rows), nil, &n)
	return n, err
}

func rowsQuery(rows int) string {
	if rows < 0 {
		return ""
	}
	return "?qps=" + strconv.Itoa(rows)
}

// Peers returns the replication peers.
func (c *Client) Peers(ctx context.Context) ([]status.Peer, error) {
	var p []status.Peer
	_, err := c.do(ctx, http.MethodGet, PathPeers, nil, &p)
	return p, err
}

// Arm re-arms the target's QPs.
func (c *Client) Arm(ctx context.Context, t Target) (ActionResult, error) {
	var r ActionResult
	_, err := c.do(ctx, http.MethodPost, PathArm, ActionRequest{Target: t}, &r)
	return r, err
}

// Migrate migrates the target's QPs to their alternate path (or, with
// dryRun, reports what would move).
func (c *Client) Migrate(ctx context.Context, t Target, dryRun bool) (ActionResult, error) {
	var r ActionResult
	_, err := c.do(ctx, http.MethodPost, PathMigrate, ActionRequest{Target: t, DryRun: dryRun}, &r)
	return r, err
}

// StoreQPs lists the store's QP entries, of one owner node when node is
// not empty.
func (c *Client) StoreQPs(ctx context.Context, node string) ([]StoreQP, error) {
	var out []StoreQP
	_, err := c.do(ctx, http.MethodGet, PathStoreQPs+query(node), nil, &out)
	return out, err
}

// StoreMRs lists the store's MR entries, of one owner node when node is
// not empty.
func (c *Client) StoreMRs(ctx context.Context, node string) ([]StoreMR, error) {
	var out []StoreMR
	_, err := c.do(ctx, http.MethodGet, PathStoreMRs+query(node), nil, &out)
	return out, err
}

// Metrics returns the Prometheus text exposition.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var s string
	_, err := c.do(ctx, http.MethodGet, PathMetrics, nil, &s)
	return s, err
}

func query(node string) string {
	if node == "" {
		return ""
	}
	return "?node=" + url.QueryEscape(node)
}

// StatusRaw returns the status document exactly as the daemon sent it, so
// a tool sees fields newer than this client.
func (c *Client) StatusRaw(ctx context.Context) ([]byte, error) { return c.StatusRawQPs(ctx, -1) }

// StatusRawQPs is StatusRaw with at most rows QP rows (every QP when
// rows < 0).
func (c *Client) StatusRawQPs(ctx context.Context, rows int) ([]byte, error) {
	var s string
	if _, err := c.do(ctx, http.MethodGet, PathStatus+rowsQuery(rows), nil, &s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}
