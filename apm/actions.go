package apm

import (
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
			e.nextPoll = m.clock.Now() + e.gap
		case fsm.ActMigrate:
			out = m.migrate(e, a)
		case fsm.ActHandOver:
			m.stats.Handovers++
			if m.next != nil {
				m.next.HandOver(e.qp, a.Reason)
			}
		}
		if out != nil {
			queue = append(queue, e.m.Step(*out)...)
		}
	}
}

// load chooses and loads an alternate with REARM.
func (m *Manager) load(e *entry, a fsm.APMAction) *fsm.APMEvent {
	attr, _, err := e.qp.Query(verbs.QPAttrState | verbs.QPAttrPort | verbs.QPAttrAV | verbs.QPAttrTimeout)
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
	var prefer *pathsel.Ref
	if a.HasPrefer {
		prefer = &pathsel.Ref{Port: a.Prefer.Port, Bits: a.Prefer.Bits}
	}
	cur := pathsel.Path{Port: attr.PortNum, AH: attr.AHAttr, PKeyIndex: attr.PKeyIndex, Timeout: attr.Timeout}
	alt, reason := m.choose(e, cur, prefer)
	if reason != "" {
		m.stats.NoAlternate++
		return &fsm.APMEvent{Kind: fsm.EvNoAlternate, Reason: reason}
	}
	err = e.qp.Modify(&verbs.QPAttr{AltAHAttr: alt.AH, AltPortNum: alt.Port, AltPKeyIndex: alt.PKeyIndex,
		AltTimeout: alt.Timeout, PathMigState: verbs.MigRearm}, verbs.QPAttrAltPath|verbs.QPAttrPathMigState)
	if err != nil {
		m.stats.NoAlternate++
		return &fsm.APMEvent{Kind: fsm.EvNoAlternate, Reason: fmt.Sprintf("load %v alternate on port %d: %v", alt.Kind, alt.Port, err)}
	}
	m.stats.Loads++
	return &fsm.APMEvent{Kind: fsm.EvAltLoaded, Path: fsm.PathRef{Port: alt.Port, Bits: alt.Bits()}}
}

// peerWait is how long e may stay MIGRATED waiting for its peer.
func (m *Manager) peerWait(e *entry) time.Duration {
	if m.cfg.PeerWait > 0 {
		return m.cfg.PeerWait
	}
	attr, _, err := e.qp.Query(verbs.QPAttrTimeout)
	to := verbs.TimeoutDuration(attr.Timeout)
	if err != nil || to == 0 {
		return 100 * time.Millisecond
	}
	return max(to*3/2, time.Millisecond)
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
		return &fsm.APMEvent{Kind: fsm.EvMigrated}
	}
	// The HCA may have migrated on its own meanwhile: take the QP's word.
	attr, _, qerr := e.qp.Query(verbs.QPAttrPort | verbs.QPAttrAV)
	if qerr != nil {
		return &fsm.APMEvent{Kind: fsm.EvQPError, Reason: fmt.Sprintf("ibv_modify_qp(MIGRATED): %v; ibv_query_qp: %v", err, qerr)}
	}
	return &fsm.APMEvent{Kind: fsm.EvResync, Path: ref(attr)}
}
