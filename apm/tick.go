package apm

import (
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// Tick does the timed work that is due: ARMED polls after REARM (with
// backoff), the migration poll of ARMED QPs, probes for a better
// alternate, and auto failback once the home path has been armed for the
// hold-down time. It returns how long until
// more work is due, and whether any is scheduled at all (when not, the
// caller may sleep until the next event).
func (m *Manager) Tick() (wait time.Duration, pending bool) {
	now := m.clock.Now()
	next := time.Duration(-1)
	due := func(t time.Duration) {
		if next < 0 || t < next {
			next = t
		}
	}
	for _, d := range m.devs {
		for _, e := range append([]*entry(nil), d.entries...) {
			switch e.m.State {
			case fsm.APMRearming:
				if now >= e.nextPoll {
					m.pollArmed(e, now)
				}
			case fsm.APMUnprotected:
				if now >= e.nextProbe {
					e.nextProbe = now + m.cfg.ProbeInterval
					m.step(e, fsm.APMEvent{Kind: fsm.EvProbe})
				}
			case fsm.APMArmed:
				if now >= e.nextMig {
					m.pollMigrated(e, now)
				}
				if e.m.State == fsm.APMArmed {
					m.armedWork(e, now)
				}
			case fsm.APMAwaitPeer:
				if now >= e.peerUntil {
					m.step(e, fsm.APMEvent{Kind: fsm.EvProbe})
				}
			}
			switch e.m.State {
			case fsm.APMRearming:
				due(e.nextPoll)
			case fsm.APMUnprotected:
				due(e.nextProbe)
			case fsm.APMAwaitPeer:
				due(e.peerUntil)
			case fsm.APMArmed:
				due(e.nextMig)
				if e.m.WantsFailback() {
					due(max(e.armedAt+m.cfg.FailbackHold, m.reuseAt(e, now)))
				} else if e.m.Primary != e.m.Home {
					due(e.nextProbe)
				}
			}
		}
	}
	if next < 0 {
		return 0, false
	}
	return max(next-now, 0), true
}

// pollArmed queries a QP in REARM; Linux verbs has no ARMED event. The
// period doubles from PollMin up to PollMax, and with Config.RearmIdle,
// once the QP has been idle that long, up to MigrationPollMax (idleGap).
func (m *Manager) pollArmed(e *entry, now time.Duration) {
	m.stats.RearmPolls++
	attr, _, err := e.qp.Query(verbs.QPAttrState | verbs.QPAttrPathMigState)
	switch {
	case err != nil:
		m.step(e, fsm.APMEvent{Kind: fsm.EvQPError, Reason: "ibv_query_qp: " + err.Error()})
	case attr.QPState == verbs.QPSErr:
		m.step(e, fsm.APMEvent{Kind: fsm.EvQPError, Reason: "QP is in ERR"})
	case attr.PathMigState == verbs.MigArmed:
		e.armedAt = now
		e.migGap = m.cfg.MigrationPoll
		e.nextMig = now + e.migGap
		m.stats.Armed++
		m.step(e, fsm.APMEvent{Kind: fsm.EvArmedObserved})
	default:
		e.gap = min(2*e.gap, m.rearmGapMax(e, now))
		e.nextPoll = now + e.gap
	}
}

// rearmGapMax is the longest period of e's ARMED poll now: PollMax, or
// past Config.RearmIdle without traffic, MigrationPollMax.
func (m *Manager) rearmGapMax(e *entry, now time.Duration) time.Duration {
	if m.idleInRearm(e, now) {
		return max(m.cfg.PollMax, m.cfg.MigrationPollMax)
	}
	return m.cfg.PollMax
}

func (m *Manager) idleInRearm(e *entry, now time.Duration) bool {
	return e.m.State == fsm.APMRearming && m.cfg.RearmIdle > 0 && now-e.busyAt >= m.cfg.RearmIdle
}

// pollMigrated queries an ARMED QP for what only a QP event would have
// said: the HCA migrated it by itself (retries exhausted on the primary,
// or the peer's MigReq on the alternate), or it failed. A migration found
// this way is treated as one ibpath made: the QP waits for its peer to
// follow (PeerFollowed, or PeerWait) before it re-arms, since nothing
// says the peer has moved yet and re-arming would clear MigReq.
func (m *Manager) pollMigrated(e *entry, now time.Duration) {
	m.stats.MigrationPolls++
	attr, _, err := e.qp.Query(verbs.QPAttrState | verbs.QPAttrPathMigState | verbs.QPAttrPort | verbs.QPAttrAV)
	// Nothing new doubles the period (up to MigrationPollMax); a change
	// re-arms the QP, whose ARMED starts the period over.
	e.migGap = min(max(2*e.migGap, m.cfg.MigrationPoll), m.cfg.MigrationPollMax)
	e.nextMig = now + e.migGap
	switch {
	case err != nil:
		m.step(e, fsm.APMEvent{Kind: fsm.EvQPError, Reason: "ibv_query_qp: " + err.Error()})
	case attr.QPState == verbs.QPSErr:
		m.step(e, fsm.APMEvent{Kind: fsm.EvQPError, Reason: "QP is in ERR"})
	case attr.PathMigState != verbs.MigMigrated:
	case ref(attr) == e.m.Alt && e.m.HasAlt:
		m.stats.HWMigrations++
		m.stats.PolledMigrations++
		e.migrations++
		e.peerUntil = now + m.peerWait(e)
		m.stepFault(e, fsm.APMEvent{Kind: fsm.EvMigrated})
	default:
		// MIGRATED on a path the machine did not expect: take the QP's
		// word and re-arm from there.
		m.step(e, fsm.APMEvent{Kind: fsm.EvResync, Path: ref(attr)})
	}
}

// armedWork: failback when due; and, away from home with home not loaded,
// a periodic look whether home is usable again (the peer's port coming back
// raises no event here).
func (m *Manager) armedWork(e *entry, now time.Duration) {
	if e.m.WantsFailback() {
		if now < e.armedAt+m.cfg.FailbackHold {
			return
		}
		if m.damped(e, now) {
			// The home port or path flapped: traffic stays where it is
			// until its penalty has decayed (Config.Damping).
			if !e.damped {
				e.damped = true
				m.stats.FailbacksDamped++
			}
			return
		}
		e.damped = false
		if !m.homeUsable(e) {
			// The home path was armed from a description of the peer's
			// adapter taken before its port failed (descriptions are
			// cached), or the port failed since: failing back would move
			// the traffic onto a dead path. Wait another hold-down.
			e.armedAt = now
			m.stats.FailbacksHeld++
			return
		}
		m.step(e, fsm.APMEvent{Kind: fsm.EvFailbackDue})
		return
	}
	if e.m.Primary == e.m.Home || now < e.nextProbe {
		return
	}
	e.nextProbe = now + m.cfg.ProbeInterval
	if e.m.HasAlt && e.m.Alt == e.m.Home {
		return
	}
	attr, _, err := e.qp.Query(verbs.QPAttrPort | verbs.QPAttrAV | verbs.QPAttrTimeout)
	if err != nil {
		return
	}
	peer, err := m.peers.Peer(attr.AHAttr)
	if err != nil || e.dev.descErr != nil {
		return
	}
	cur := pathsel.Path{Port: attr.PortNum, AH: attr.AHAttr, PKeyIndex: attr.PKeyIndex, Timeout: attr.Timeout}
	if pathsel.Usable(e.dev.desc, peer, cur, pathsel.Ref{Port: e.m.Home.Port, Bits: e.m.Home.Bits}, m.cfg.Policy) {
		m.step(e, fsm.APMEvent{Kind: fsm.EvProbe})
	}
}

// homeUsable reports whether e's home path would be chosen now, by this
// adapter's and the peer's current descriptions (true when they cannot
// be had: the failback goes ahead as the hold-down said).
func (m *Manager) homeUsable(e *entry) bool {
	attr, _, err := e.qp.Query(verbs.QPAttrPort | verbs.QPAttrAV | verbs.QPAttrTimeout)
	if err != nil || e.dev.descErr != nil {
		return true
	}
	peer, err := m.peers.Peer(attr.AHAttr)
	if err != nil {
		return true
	}
	cur := pathsel.Path{Port: attr.PortNum, AH: attr.AHAttr, PKeyIndex: attr.PKeyIndex, Timeout: attr.Timeout}
	return pathsel.Usable(e.dev.desc, peer, cur, pathsel.Ref{Port: e.m.Home.Port, Bits: e.m.Home.Bits}, m.cfg.Policy)
}

// pollSoon starts the migration poll of d's ARMED QPs over: a port or
// device event on d may have moved or failed them without a QP event
// anyone read.
func (m *Manager) pollSoon(d *device) {
	now := m.clock.Now()
	for _, e := range d.entries {
		e.migGap = m.cfg.MigrationPoll
		e.nextMig = min(e.nextMig, now+e.migGap)
		if e.m.State == fsm.APMRearming {
			// and the ARMED poll of its QPs in REARM, backed off or not
			e.busyAt, e.gap = now, m.cfg.PollMin
			e.nextPoll = min(e.nextPoll, now+e.gap)
		}
	}
}
