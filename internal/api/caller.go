package api

import (
	"context"

	"github.com/ibpath/ibpath/internal/status"
)

// Caller is who asks: the peer credentials of a local API connection
// (SO_PEERCRED) or of a D-Bus sender (GetConnectionUnixUser and
// GetConnectionUnixProcessID).
type Caller struct {
	UID uint32
	GID uint32
	PID int
}

// Backend is what the daemon offers to its front ends (the HTTP server of
// this package's paths and the D-Bus facade). Implementations check the
// caller's rights and return an *Error with CodeForbidden when it has
// none; they never let a front end touch a state machine directly.
type Backend interface {
	// Status returns a snapshot of the node's status.
	Status() status.Node
	// StatusOf is Status with at most rows QP rows (every QP when rows <
	// 0); Node.QPsTotal, Node.Layers and the totals count them all.
	StatusOf(rows int) status.Node
	// Arm and Migrate act on the request's target for caller.
	Arm(ctx context.Context, caller Caller, req ActionRequest) (ActionResult, error)
	Migrate(ctx context.Context, caller Caller, req ActionRequest) (ActionResult, error)
	// Drain and Undrain take a port out of service, or put it back.
	Drain(ctx context.Context, caller Caller, req PortRequest) (DrainResult, error)
	Undrain(ctx context.Context, caller Caller, req PortRequest) (DrainResult, error)
	// Subscribe returns a channel of status events and a function that
	// cancels the subscription and closes the channel. A subscriber that
	// does not keep up loses events (the channel never blocks the daemon);
	// buf is the channel's capacity.
	Subscribe(buf int) (<-chan status.Event, func())
}
