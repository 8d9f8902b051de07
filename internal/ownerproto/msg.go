package ownerproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
)

// Proto is the protocol version of this package (2: QP paths, backup and
// remote end, and command results' states are objects; the drain and
// undrain commands; 3: the port_view command; 4: lookup_mrs); Upgrade is the token of
// the HTTP upgrade. ProtoMin is
// the oldest protocol ibpathd still serves: a process that loaded an
// older libibpath before an upgrade keeps its session (its protocol 1
// messages decode: status.Path and its kin read the strings protocol 1
// wrote, compat.go; it is sent no drain command, which it does not know).
const (
	Proto    = 4
	ProtoMin = 1
	Upgrade  = "ibpath-owner/1"
	// MaxLine bounds one message, newline included.
	MaxLine = 64 << 10
)

// Message types.
const (
	TypeHello     = "hello"      // owner -> daemon, first
	TypeWelcome   = "welcome"    // daemon -> owner
	TypeError     = "error"      // daemon -> owner, then close
	TypeQP        = "qp"         // owner -> daemon: a QP appeared or changed
	TypeQPGone    = "qp_gone"    // owner -> daemon: a QP was destroyed
	TypeEvent     = "event"      // owner -> daemon: migration, failover, switch-back
	TypePublishQP = "publish_qp" // owner -> daemon, acked: a backup QP entry
	TypePublishMR = "publish_mr" // owner -> daemon, acked: a backup MR entry
	TypeAck       = "ack"        // daemon -> owner: reply to a publish
	TypeLookupQP  = "lookup_qp"  // owner -> daemon: the backup of a peer's QP
	TypeLookupMR  = "lookup_mr"  // owner -> daemon: the backup rkey of a peer's MR
	TypeLookupHCA = "lookup_hca" // owner -> daemon: the adapter holding a route, with its ports' states
	TypeLookupMRs = "lookup_mrs" // owner -> daemon: the peers' MR entries of some routes (protocol 4)
	TypeFound     = "found"      // daemon -> owner: reply to a lookup
	TypeCommand   = "command"    // daemon -> owner: arm or migrate
	TypeResult    = "result"     // owner -> daemon: reply to a command
)

// Hello opens a session. PID must be the connecting process (the daemon
// compares it with SO_PEERCRED); Incarnation tells two lives of one pid
// apart (the shim uses the process start time from /proc/self/stat).
type Hello struct {
	Proto       int    `json:"proto"`
	PID         int    `json:"pid"`
	Incarnation uint64 `json:"incarnation"`
	Comm        string `json:"comm,omitempty"`
}

// Welcome accepts a session.
type Welcome struct {
	Proto int    `json:"proto"`
	Node  string `json:"node"`
}

// QPRef names one QP of the owner.
type QPRef struct {
	Device string `json:"device"`
	QPN    uint32 `json:"qpn"`
}

// Route is how a peer reaches a port: its GID, or its LID.
type Route struct {
	GID verbs.GID `json:"gid"`
	LID uint16    `json:"lid,omitempty"`
}

// String names the route as messages do: "GID fe80::1" when it has a
// GID, else "LID 5".
func (r Route) String() string {
	if !r.GID.IsZero() {
		return "GID " + r.GID.String()
	}
	return fmt.Sprintf("LID %d", r.LID)
}

// PublishQP asks the daemon to store (and replicate towards Remote, the
// other end of the QP) a backup QP entry.
type PublishQP struct {
	Key    store.QPKey    `json:"key"`
	Backup store.QPBackup `json:"backup"`
	Remote Route          `json:"remote"`
}

// PublishMR asks the daemon to store a backup MR entry and replicate it
// towards Remotes (the ends of the owner's QPs).
type PublishMR struct {
	Key     store.MRKey    `json:"key"`
	Backup  store.MRBackup `json:"backup"`
	Remotes []Route        `json:"remotes,omitempty"`
}

// Ack replies to a publish: Error is empty when the entry is durable.
type Ack struct {
	Error string `json:"error,omitempty"`
}

// Lookup asks for the backup of a peer's QP (QP set) or region (MR
// set): from the daemon's memory, else pulled from the node that holds
// the key's route. The shim looks up when a QP connects, so a failover
// never waits for it. With HCA set it asks for the description of the
// adapter that holds that route (lookup_hca): described by the daemon
// itself when the route is local, else by the node whose metadata holds
// it (cached there for a second).
type Lookup struct {
	QP  *store.QPKey `json:"qp,omitempty"`
	MR  *store.MRKey `json:"mr,omitempty"`
	HCA *Route       `json:"hca,omitempty"`
	MRs *MRQuery     `json:"mrs,omitempty"`
}

// LookupMRsProto is the first protocol with lookup_mrs.
const LookupMRsProto = 4

// MaxQueryRoutes bounds the routes of one lookup_mrs; MaxPageMRs the
// entries of one answer (about 150 bytes each on the line).
const (
	MaxQueryRoutes = 64
	MaxPageMRs     = 256
)

// MRQuery (lookup_mrs) asks for the MR entries of the given routes (the
// peers' ports the owner's QPs are connected to) that the daemon's memory
// took after Since (0: all), from memory only: the owner keeps them, so
// that a failover finds the peers' backup rkeys without asking. Since is
// the Next of the answer before; it counts from the daemon's start, so
// an owner asks from 0 again on a new session.
type MRQuery struct {
	Routes []Route `json:"routes"`
	Since  uint64  `json:"since,omitempty"`
}

// MRPage answers lookup_mrs: at most MaxPageMRs entries, oldest first,
// and the Since of the next query; More says the page was cut short
// (ask again at once).
type MRPage struct {
	MRs  []PeerMR `json:"mrs,omitempty"`
	Next uint64   `json:"next"`
	More bool     `json:"more,omitempty"`
}

// PeerMR is one MR entry of a peer: its default key and backup.
type PeerMR struct {
	Key    store.MRKey    `json:"key"`
	Backup store.MRBackup `json:"backup"`
}

// Found replies to a lookup: the entry (or adapter), or Error ("not
// found: ...").
type Found struct {
	QP    *store.QPBackup `json:"qp,omitempty"`
	MR    *store.MRBackup `json:"mr,omitempty"`
	HCA   *HCA            `json:"hca,omitempty"`
	MRs   *MRPage         `json:"mrs,omitempty"`
	Error string          `json:"error,omitempty"`
}

// Command ops.
const (
	OpArm     = "arm"
	OpMigrate = "migrate"
	// OpDrain and OpUndrain take Port of Device out of service, or put it
	// back, for every QP of the owner, present and future (QPN 0). From
	// protocol 2 on.
	OpDrain   = "drain"
	OpUndrain = "undrain"
	// OpDrainProto is the first protocol with OpDrain and OpUndrain.
	OpDrainProto = 2
	// OpPortView gives the owner ibpathd's view of Port of Device (View)
	// for its choice of a backup device: flap damping over every flap
	// ibpathd saw, and the port's congestion. QPN 0. From protocol 3.
	OpPortView      = "port_view"
	OpPortViewProto = 3
)

// PortView is ibpathd's view of a port for the owners' choices: whether
// flap damping suppresses it (node-wide: every flap since ibpathd
// started, where a process's own damper knows only those since the
// process did), and its congestion signs per second over the health
// rule's window (ECN-marked packets received, CNPs sent and handled,
// PortXmitWait ticks: pathsel.PortCounters' Congestion class), 0 when
// none or not read.
type PortView struct {
	Suppressed bool    `json:"suppressed,omitempty"`
	Congestion float64 `json:"congestion_per_second,omitempty"`
}

// Command asks the owner to act on one of its QPs, or on a port.
type Command struct {
	Op     string `json:"op"`
	Device string `json:"device"`
	QPN    uint32 `json:"qpn,omitempty"`
	Port   uint8  `json:"port,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
	// View is OpPortView's.
	View *PortView `json:"view,omitempty"`
}

// Result replies to a command. Before and After are the QP's layer-1 state
// and primary path before and after it; After of a dry run is the path
// the QP would move to.
type Result struct {
	OK     bool           `json:"ok"`
	Before status.QPState `json:"before,omitzero"`
	After  status.QPState `json:"after,omitzero"`
	Error  string         `json:"error,omitempty"`
	// Note says what a drain or undrain did ("drained; QPs moving off:
	// 2"); Before and After are for a QP's commands.
	Note string `json:"note,omitempty"`
}

// Msg is one line of the protocol. Type says which one payload field is
// set.
type Msg struct {
	Type      string        `json:"type"`
	ID        uint64        `json:"id,omitempty"`
	Hello     *Hello        `json:"hello,omitempty"`
	Welcome   *Welcome      `json:"welcome,omitempty"`
	Error     string        `json:"error,omitempty"`
	QP        *status.QP    `json:"qp,omitempty"`
	QPGone    *QPRef        `json:"qp_gone,omitempty"`
	Event     *status.Event `json:"event,omitempty"`
	PublishQP *PublishQP    `json:"publish_qp,omitempty"`
	PublishMR *PublishMR    `json:"publish_mr,omitempty"`
	Ack       *Ack          `json:"ack,omitempty"`
	Lookup    *Lookup       `json:"lookup,omitempty"`
	Found     *Found        `json:"found,omitempty"`
	Command   *Command      `json:"command,omitempty"`
	Result    *Result       `json:"result,omitempty"`
}

// ErrBadMessage wraps every decoding and validation failure.
var ErrBadMessage = errors.New("ownerproto: bad message")

// Encode renders m as one line (with its newline), after validating it.
func Encode(m Msg) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("ownerproto: encode %s: %w", m.Type, err)
	}
	if len(b)+1 > MaxLine {
		return nil, fmt.Errorf("%w: %s of %d bytes exceeds %d", ErrBadMessage, m.Type, len(b)+1, MaxLine)
	}
	return append(b, '\n'), nil
}

// Decode parses one line (with or without its newline) and validates it.
// Unknown fields are refused, so a typo is an error rather than a silent
// default.
func Decode(line []byte) (Msg, error) {
	var m Msg
	if len(line) > MaxLine {
		return m, fmt.Errorf("%w: line of %d bytes exceeds %d", ErrBadMessage, len(line), MaxLine)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Msg{}, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	if dec.More() {
		return Msg{}, fmt.Errorf("%w: trailing data after the message", ErrBadMessage)
	}
	if err := m.Validate(); err != nil {
		return Msg{}, err
	}
	return m, nil
}
