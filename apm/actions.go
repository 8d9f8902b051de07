package apm

import (
	"errors"
	"fmt"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// step feeds one event to e's machine and performs the actions, feeding
// their outcomes back until nothing is left to do.
func (m *Manager) step(e *entry, ev fsm.APMEvent) {
	queue := e.m.Step(ev)
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		var out *fsm.APMEvent
		switch a.Kind {
		case fsm.ActLoadAlternate:
			out = m.load(e, a)
		case fsm.ActPollArmed:
			e.gap = m.cfg.PollMin
			e.busyAt = m.clock.Now()
			e.nextPoll = e.busyAt + e.gap
		case fsm.ActMigrate:
			out = m.migrate(e, a)
		case fsm.ActHandOver:
			m.stats.Handovers++
			if m.next != nil {
				m.next.HandOver(e.qp, drainedReason(e.dev, e, a.Reason))
			}
		}
		if out != nil {
			queue = append(queue, e.m.Step(*out)...)
		}
	}
	m.cameHome(e)
}

// load chooses an alternate and loads it. Only a MIGRATED QP is re-armed
// (IBV_QP_ALT_PATH with REARM): rdmavt refuses REARM on an ARMED QP and
// strict devices on one in REARM too, so a QP in REARM takes the new
// alternate alone and keeps loading, and an ARMED QP is offered it alone.
// A device that takes no new alternate while ARMED keeps the armed one
// (EvAltKept). A QP whose primary is not the machine's (the HCA migrated
// and nobody told) is resynchronised first.
func (m *Manager) load(e *entry, a fsm.APMAction) *fsm.APMEvent {
	attr, _, err := e.qp.Query(verbs.QPAttrState | verbs.QPAttrPort | verbs.QPAttrAV | verbs.QPAttrTimeout |
		verbs.QPAttrPathMigState | verbs.QPAttrAltPath)
	if err != nil {
		return &fsm.APMEvent{Kind: fsm.EvQPError, Reason: fmt.Sprintf("ibv_query_qp: %v", err)}
	}
	switch attr.QPState {
	case verbs.QPSRTS, verbs.QPSSQD:
	case verbs.QPSErr:
		return &fsm.APMEvent{Kind: fsm.EvQPError, Reason: "QP is in ERR"}
	default:
		m.stats.NoAlternate++
		return &fsm.APMEvent{Kind: fsm.EvNoAlternate, Reason: fmt.Sprintf("QP is %v; arming waits for RTS", attr.QPState)}
	}
	if p := ref(attr); p != e.m.Primary {
		return &fsm.APMEvent{Kind: fsm.EvResync, Path: p}
	}
	var prefer *pathsel.Ref
	if a.HasPrefer {
		prefer = &pathsel.Ref{Port: a.Prefer.Port, Bits: a.Prefer.Bits}
	}
	cur := pathsel.Path{Port: attr.PortNum, AH: attr.AHAttr, PKeyIndex: attr.PKeyIndex, Timeout: attr.Timeout}
	alt, reason := m.choose(e, cur, prefer)
	armed := attr.PathMigState == verbs.MigArmed
	kept := fsm.PathRef{Port: attr.AltPortNum, Bits: attr.AltAHAttr.SrcPathBits}
	want := fsm.PathRef{Port: alt.Port, Bits: alt.Bits()}
	switch {
	case reason != "" && armed:
		// Nothing better to load; the armed alternate stays (it may be
		// the one that died: the machine judges it by its port).
		return &fsm.APMEvent{Kind: fsm.EvAltKept, Path: kept, Want: kept}
	case reason != "":
		m.stats.NoAlternate++
		return &fsm.APMEvent{Kind: fsm.EvNoAlternate, Reason: reason}
	case armed && want == kept:
		return &fsm.APMEvent{Kind: fsm.EvAltKept, Path: kept, Want: want}
	}
	na := verbs.QPAttr{AltAHAttr: alt.AH, AltPortNum: alt.Port, AltPKeyIndex: alt.PKeyIndex, AltTimeout: alt.Timeout}
	mask := verbs.QPAttrAltPath
	if attr.PathMigState == verbs.MigMigrated {
		na.PathMigState = verbs.MigRearm
		mask |= verbs.QPAttrPathMigState
	}
	err = e.qp.Modify(&na, mask)
	switch {
	case err != nil && armed && errors.Is(err, verbs.EINVAL):
		m.stats.AltKept++
		return &fsm.APMEvent{Kind: fsm.EvAltKept, Path: kept, Want: want}
	case err != nil:
		m.stats.NoAlternate++
		return &fsm.APMEvent{Kind: fsm.EvNoAlternate, Reason: fmt.Sprintf("load %v alternate on port %d: %v", alt.Kind, alt.Port, err)}
	}
	m.stats.Loads++
	return &fsm.APMEvent{Kind: fsm.EvAltLoaded, Path: want}
}

// timerSlack is what a local ACK timer may fire late by, beyond its
// period, for the default PeerWait: a software transport arms its retry
// timer in kernel ticks (rdmavt: jiffies + busy_jiffies), two ticks at
// HZ=100 are 20 ms; a hardware timer's coarseness is taken as half its
// period.
const timerSlack = 20 * time.Millisecond

// peerWait is how long e may stay MIGRATED waiting for its peer: one
// local ACK timeout, by when the HCA has resent what was in flight with
// MigReq (which moves the peer), plus the timer's slack.
func (m *Manager) peerWait(e *entry) time.Duration {
	if m.cfg.PeerWait > 0 {
		return m.cfg.PeerWait
	}
	attr, _, err := e.qp.Query(verbs.QPAttrTimeout)
	to := verbs.TimeoutDuration(attr.Timeout)
	if err != nil || to == 0 {
		return 100 * time.Millisecond
	}
	return to + max(to/2, timerSlack)
}

// migrate moves traffic to the armed alternate now.
func (m *Manager) migrate(e *entry, a fsm.APMAction) *fsm.APMEvent {
	err := e.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState)
	if err == nil {
		m.stats.Migrations++
		e.migrations++
		if e.m.WantsFailback() {
			m.stats.Failbacks++
		}
		e.peerUntil = m.clock.Now() + m.peerWait(e)
		m.nudge(e)
		return &fsm.APMEvent{Kind: fsm.EvMigrated}
	}
	// The HCA may have migrated on its own meanwhile: take the QP's word.
	attr, _, qerr := e.qp.Query(verbs.QPAttrPort | verbs.QPAttrAV)
	if qerr != nil {
		return &fsm.APMEvent{Kind: fsm.EvQPError, Reason: fmt.Sprintf("ibv_modify_qp(MIGRATED): %v; ibv_query_qp: %v", err, qerr)}
	}
	return &fsm.APMEvent{Kind: fsm.EvResync, Path: ref(attr)}
}

// nudge asks the embedder to post a zero-length WRITE on e's QP, which
// moves the peer and, through its sequence NAK, the resend of anything
// lost on the old path (Config.Nudge).
func (m *Manager) nudge(e *entry) {
	if m.cfg.Nudge == nil {
		return
	}
	if err := m.cfg.Nudge(e.qp); err != nil {
		m.stats.NudgeFailures++
		return
	}
	m.stats.Nudges++
}
