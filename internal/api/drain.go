package api

import (
	"context"
	"fmt"
	"net/http"
)

// Paths of the drain.
const (
	PathDrain   = "/v1/drain"
	PathUndrain = "/v1/undrain"
)

// PortRequest is the body of POST /v1/drain and /v1/undrain: one port of
// one device.
type PortRequest struct {
	Device string `json:"device"`
	Port   uint8  `json:"port"`
}

// Validate rejects a request that names no device or no port.
func (p PortRequest) Validate() error {
	if p.Device == "" || p.Port == 0 {
		return fmt.Errorf("a device and a port are required (DEV:PORT, e.g. mlx5_0:1), got %q port %d", p.Device, p.Port)
	}
	return nil
}

func (p PortRequest) String() string { return fmt.Sprintf("%s:%d", p.Device, p.Port) }

// OwnerAnswer is what one process answered a drain or undrain.
type OwnerAnswer struct {
	PID   int    `json:"pid"`
	OK    bool   `json:"ok"`
	After string `json:"after,omitempty"`
	Error string `json:"error,omitempty"`
}

// DrainResult is the response of a drain or undrain: whether the port is
// drained now, whether the call changed that, and what every process
// holding QPs answered (ibpathd's own simulated workload is pid 0).
type DrainResult struct {
	Action  string        `json:"action"` // "drain" or "undrain"
	Device  string        `json:"device"`
	Port    uint8         `json:"port"`
	Drained bool          `json:"drained"`
	Changed bool          `json:"changed"`
	Owners  []OwnerAnswer `json:"owners"`
	// Note says what else holds the port: an undrained port that ibpathd
	// keeps out of service for its health.
	Note string `json:"note,omitempty"`
}

// Drain takes a port out of service until Undrain.
func (c *Client) Drain(ctx context.Context, p PortRequest) (DrainResult, error) {
	var r DrainResult
	_, err := c.do(ctx, http.MethodPost, PathDrain, p, &r)
	return r, err
}

// Undrain puts a drained port back in service.
func (c *Client) Undrain(ctx context.Context, p PortRequest) (DrainResult, error) {
	var r DrainResult
	_, err := c.do(ctx, http.MethodPost, PathUndrain, p, &r)
	return r, err
}
