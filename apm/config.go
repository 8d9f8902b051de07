package apm

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// Config tunes the manager. Zero fields take the defaults below.
type Config struct {
	// Failback: auto (default) or manual.
	Failback fsm.Failback
	// Policy is the order of alternate kinds (default other-port,lmc).
	Policy pathsel.Policy
	// PollMin and PollMax bound the backoff of the ARMED poll after REARM
	// (Linux verbs has no ARMED event). Defaults 20 us and 10 ms.
	PollMin, PollMax time.Duration
	// RearmIdle, when set, is how long a QP in REARM is polled every
	// PollMax at most after its load or its last traffic. The HCA arms a
	// QP with the first packet from the peer on the primary path
	// (docs/SIMULATOR.md rule 86): an idle QP stays in REARM, and at
	// PollMax that is 100 ibv_query_qp a second each, a firmware command
	// on mlx5. Past RearmIdle the poll backs off further, up to
	// MigrationPollMax. The embedder then owes the manager a Traffic call
	// whenever the QP's data path moves (the shim reads its shadow
	// rings); a port or device event starts the poll over too. Zero (the
	// default): PollMax for as long as the QP stays in REARM.
	RearmIdle time.Duration
	// ProbeInterval is how often a QP without an alternate, or away from
	// home while home is not its alternate, looks for a better one: a port
	// that came back on the peer raises no event here. Default 50 ms.
	ProbeInterval time.Duration
	// FailbackHold is how long the home path must have been armed before
	// auto failback moves traffic back, so the peer has re-armed too and
	// a flapping port does not bounce traffic. Default 200 ms.
	FailbackHold time.Duration
	// PeerWait bounds how long a QP that ibpath migrated stays MIGRATED
	// waiting for the peer to follow (PeerFollowed) before it re-arms.
	// 0: the QP's local ACK timeout, by when any WR in flight has been
	// resent on the new path and has moved the peer, plus the larger of
	// half the timeout and 20 ms for a timer that fires late (two kernel
	// ticks at HZ=100 on a software transport).
	PeerWait time.Duration
	// MigrationPoll is how often an ARMED QP is queried for a migration
	// the HCA made by itself, or an error, that no event told the manager
	// of: PATH_MIG and QP errors are QP events, delivered only to the
	// QP's own context, and a program that never reads its async events
	// (the shim's case: it sees only what the application reads) would
	// otherwise leave a migrated QP unprotected for good. One
	// ibv_query_qp per ARMED QP per period (on mlx5 a firmware command).
	// Default 100 ms.
	MigrationPoll time.Duration
	// MigrationPollMax bounds the migration poll's backoff: each poll of
	// a QP that finds nothing new doubles its period, from MigrationPoll
	// up to this; a port or device event on the QP's device, and the QP
	// turning ARMED again, start it over. A migration nobody reported
	// (the peer's cable, a spine) is then found within this long.
	// Default 10 s; equal to MigrationPoll: no backoff.
	MigrationPollMax time.Duration
	// Damping is the flap damping of the device's ports (pathsel's
	// Damper, RFC 2439's figure of merit): each PORT_ERR adds a penalty
	// that decays with a half-life; while a port's penalty keeps it
	// suppressed, QPs do not fail back onto it, whatever FailbackHold
	// says. Zero fields: pathsel.DefaultDamping; Off: no damping.
	Damping pathsel.DampingConfig
	// Nudge, when set, is called right after each migration ibpath made
	// (proactive, failback, operator, hop) to post a zero-length RDMA
	// WRITE, unsignaled, on the QP through the embedder's data path. It
	// leaves at once on the new path with MigReq: the peer follows at
	// once, and if packets were lost on the old path the peer's sequence
	// NAK makes the HCA resend them now instead of at its next local ACK
	// timeout (a whole timeout, 67 ms at timeout 14). The embedder must
	// keep the WR from the application (its slot, and any completion);
	// an error is counted and otherwise ignored. Nil: no nudge.
	Nudge func(qp verbs.QP) error
}

// DefaultConfig holds the defaults.
var DefaultConfig = Config{
	Failback:         fsm.FailbackAuto,
	Policy:           pathsel.DefaultPolicy,
	PollMin:          20 * time.Microsecond,
	PollMax:          10 * time.Millisecond,
	ProbeInterval:    50 * time.Millisecond,
	FailbackHold:     200 * time.Millisecond,
	MigrationPoll:    100 * time.Millisecond,
	MigrationPollMax: 10 * time.Second,
}

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig
	if c.Policy == nil {
		c.Policy = d.Policy
	}
	if c.PollMin == 0 {
		c.PollMin = d.PollMin
	}
	if c.PollMax == 0 {
		c.PollMax = d.PollMax
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = d.ProbeInterval
	}
	if c.FailbackHold == 0 {
		c.FailbackHold = d.FailbackHold
	}
	if c.MigrationPoll == 0 {
		c.MigrationPoll = d.MigrationPoll
	}
	if c.MigrationPollMax == 0 {
		c.MigrationPollMax = max(d.MigrationPollMax, c.MigrationPoll)
	}
	switch {
	case c.PollMin < 0 || c.PollMax < c.PollMin:
		return c, fmt.Errorf("apm: config: need 0 < poll-min <= poll-max, got %v and %v", c.PollMin, c.PollMax)
	case c.ProbeInterval < 0 || c.FailbackHold < 0 || c.PeerWait < 0 || c.MigrationPoll < 0 || c.RearmIdle < 0:
		return c, fmt.Errorf("apm: config: negative probe interval %v, failback hold %v, peer wait %v, migration poll %v or rearm idle %v",
			c.ProbeInterval, c.FailbackHold, c.PeerWait, c.MigrationPoll, c.RearmIdle)
	case c.MigrationPollMax < c.MigrationPoll:
		return c, fmt.Errorf("apm: config: need migration poll <= migration poll max, got %v and %v", c.MigrationPoll, c.MigrationPollMax)
	case c.Failback != fsm.FailbackAuto && c.Failback != fsm.FailbackManual:
		return c, fmt.Errorf("apm: config: unknown failback %d", c.Failback)
	case len(c.Policy) == 0:
		return c, fmt.Errorf("apm: config: empty policy")
	}
	return c, nil
}

// PeerResolver describes the adapter a path leads to, with its ports'
// current states. *pathsel.Catalog is one; the replicated store is another.
type PeerResolver interface {
	Peer(ah verbs.AHAttr) (pathsel.HCA, error)
}

// Handover is the next layer: it receives QPs that APM cannot protect any
// more (PATH_MIG_ERR, no alternate with the primary down, QP errors).
// Without one, the error reaches the application unchanged.
type Handover interface {
	HandOver(qp verbs.QP, reason string)
}
