package api

import (
	"fmt"

	"github.com/ibpath/ibpath/internal/status"
)

// Version is the path prefix of this API.
const Version = "v1"

// Paths.
const (
	PathStatus   = "/v1/status"
	PathPeers    = "/v1/peers"
	PathArm      = "/v1/arm"
	PathMigrate  = "/v1/migrate"
	PathStoreQPs = "/v1/store/qps"
	PathStoreMRs = "/v1/store/mrs"
	PathMetrics  = "/v1/metrics"
	PathOwner    = "/v1/owner"
)

// DefaultSocket is where ibpathd listens unless configured otherwise.
const DefaultSocket = "/run/ibpath/ibpathd.sock"

// Target selects the QPs an action applies to: exactly one of QP, Port or
// All.
type Target struct {
	// Device and QPN name one QP (QPN != 0), or with Port != 0 every QP
	// whose primary path is on that port of Device.
	Device string `json:"device,omitempty"`
	QPN    uint32 `json:"qpn,omitempty"`
	Port   uint8  `json:"port,omitempty"`
	// All: every QP of the node.
	All bool `json:"all,omitempty"`
}

// Validate rejects a target that names nothing or more than one thing.
func (t Target) Validate() error {
	switch {
	case t.All && (t.Device != "" || t.QPN != 0 || t.Port != 0):
		return fmt.Errorf("target: all excludes a device, QPN or port")
	case t.All:
		return nil
	case t.Device == "":
		return fmt.Errorf("target: a device is required (or all)")
	case t.QPN != 0 && t.Port != 0:
		return fmt.Errorf("target: give a QPN or a port, not both")
	case t.QPN == 0 && t.Port == 0:
		return fmt.Errorf("target: give a QPN or a port of %s", t.Device)
	}
	return nil
}

func (t Target) String() string {
	switch {
	case t.All:
		return "all QPs"
	case t.QPN != 0:
		return fmt.Sprintf("%s QP %#x", t.Device, t.QPN)
	default:
		return fmt.Sprintf("%s port %d", t.Device, t.Port)
	}
}

// ActionRequest is the body of POST /v1/arm and /v1/migrate. DryRun
// (migrate only) reports what would move without moving anything.
type ActionRequest struct {
	Target Target `json:"target"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// QPResult is what an action did to one QP.
type QPResult struct {
	Device   string `json:"device"`
	QPN      uint32 `json:"qpn"`
	OwnerPID int    `json:"owner_pid"`
	OK       bool   `json:"ok"`
	// Before and After are the layer-1 state and primary path before and
	// after the action; After of a dry run is the path the QP would move
	// to (its state is not known in advance).
	Before status.QPState `json:"before,omitzero"`
	After  status.QPState `json:"after,omitzero"`
	Error  string         `json:"error,omitempty"`
}

// ActionResult is the response of an action. The HTTP status is 200 when
// every QP succeeded, 207 when some failed (see Results), and an Error
// body when the request as a whole was refused.
type ActionResult struct {
	Action  string     `json:"action"` // "arm" or "migrate"
	Target  Target     `json:"target"`
	DryRun  bool       `json:"dry_run,omitempty"`
	Results []QPResult `json:"results"`
}

// Failed counts the results that did not succeed.
func (r ActionResult) Failed() int {
	n := 0
	for _, q := range r.Results {
		if !q.OK {
			n++
		}
	}
	return n
}

// StoreQP is one QP entry of the store.
type StoreQP struct {
	GID     string `json:"gid,omitempty"`
	LID     uint16 `json:"lid,omitempty"`
	QPN     uint32 `json:"qpn"`
	Device  string `json:"backup_device"`
	Port    uint8  `json:"backup_port"`
	BGID    string `json:"backup_gid,omitempty"`
	BLID    uint16 `json:"backup_lid,omitempty"`
	BQPN    uint32 `json:"backup_qpn"`
	Owner   string `json:"owner"` // node/pid/incarnation
	Version uint64 `json:"version"`
}

// StoreMR is one MR entry of the store.
type StoreMR struct {
	GID    string `json:"gid,omitempty"`
	LID    uint16 `json:"lid,omitempty"`
	RKey   uint32 `json:"rkey"`
	BRKey  uint32 `json:"backup_rkey"`
	Addr   uint64 `json:"addr,omitempty"`
	Length uint64 `json:"length_bytes,omitempty"` // the region's length in bytes
	Owner  string `json:"owner"`
	// Version orders writes of one key (a hybrid logical clock).
	Version uint64 `json:"version"`
}

// Error is the body of every error response.
type Error struct {
	// Code is a stable word for scripts: bad-request, forbidden,
	// not-found, conflict, owner-gone, owner-timeout, internal.
	Code    string `json:"code"`
	Message string `json:"error"`
}

func (e *Error) Error() string { return e.Message }

// Error codes.
const (
	CodeBadRequest   = "bad-request"
	CodeForbidden    = "forbidden"
	CodeNotFound     = "not-found"
	CodeConflict     = "conflict"
	CodeOwnerGone    = "owner-gone"
	CodeOwnerTimeout = "owner-timeout"
	CodeInternal     = "internal"
)
