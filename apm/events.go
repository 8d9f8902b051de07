package apm

import (
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// HandleEvent applies one async event read from ctx. Events for QPs the
// manager does not protect are ignored; the caller still forwards every
// event to the application.
func (m *Manager) HandleEvent(ctx verbs.Context, ev verbs.AsyncEvent) {
	var d *device
	for _, x := range m.devs {
		if x.ctx == ctx {
			d = x
		}
	}
	if d == nil {
		return
	}
	if ev.QP == nil {
		m.pollSoon(d) // a port or device event: look at its QPs soon
	}
	switch ev.Type {
	case verbs.EventPortErr:
		m.ports.Down(pathsel.PortKey{Device: d.ctx.Device().Name, Port: ev.Port}, m.clock.Now())
		d.refresh()
		// Every port the device now reports down, the alternates' before
		// the one of this event: a QP must not migrate onto a port whose
		// own PORT_ERR is still queued.
		for _, e := range append([]*entry(nil), d.entries...) {
			for _, p := range d.desc.Ports {
				if !p.Active() && p.Num != ev.Port && !e.m.PortDown(p.Num) {
					m.stepFault(e, fsm.APMEvent{Kind: fsm.EvPortDown, Port: p.Num})
				}
			}
			m.stepFault(e, fsm.APMEvent{Kind: fsm.EvPortDown, Port: ev.Port})
		}
	case verbs.EventPortActive:
		m.ports.Up(pathsel.PortKey{Device: d.ctx.Device().Name, Port: ev.Port}, m.clock.Now())
		d.refresh() // a drained port stays DOWN in desc: no path is chosen on it
		m.each(d, fsm.APMEvent{Kind: fsm.EvPortUp, Port: ev.Port})
	case verbs.EventLIDChange, verbs.EventSMChange, verbs.EventGIDChange, verbs.EventClientReregister:
		d.refresh()
	case verbs.EventDeviceFatal:
		m.each(d, fsm.APMEvent{Kind: fsm.EvQPError, Reason: "DEVICE_FATAL"})
	case verbs.EventPathMig:
		if e := m.byQP[ev.QP]; e != nil {
			attr, _, err := e.qp.Query(verbs.QPAttrPort | verbs.QPAttrAV)
			if err != nil {
				m.step(e, fsm.APMEvent{Kind: fsm.EvQPError, Reason: "ibv_query_qp after PATH_MIG: " + err.Error()})
				return
			}
			if p := ref(attr); p != e.m.Primary {
				m.stats.HWMigrations++
				e.migrations++
				// The machine waits for the peer (PeerFollowed) before
				// re-arming, PeerWait at most.
				e.peerUntil = m.clock.Now() + m.peerWait(e)
				m.stepFault(e, fsm.APMEvent{Kind: fsm.EvPathMigrated, Path: p})
			}
		}
	case verbs.EventPathMigErr:
		if e := m.byQP[ev.QP]; e != nil {
			m.step(e, fsm.APMEvent{Kind: fsm.EvPathMigErr})
		}
	case verbs.EventQPFatal, verbs.EventQPReqErr, verbs.EventQPAccessErr:
		if e := m.byQP[ev.QP]; e != nil {
			m.step(e, fsm.APMEvent{Kind: fsm.EvQPError, Reason: ev.Type.String()})
		}
	}
}

// PeerFollowed tells the manager that traffic on qp proves its peer has
// moved to the new path after a migration ibpath made: a successful
// completion of a WR posted after the migration, or of a probe. The QP
// then re-arms at once instead of after Config.PeerWait. The shim's data
// path calls it; it is cheap and ignored in any other state.
func (m *Manager) PeerFollowed(qp verbs.QP) {
	if e := m.byQP[qp]; e != nil && e.m.State == fsm.APMAwaitPeer {
		m.stats.PeerFollowed++
		m.step(e, fsm.APMEvent{Kind: fsm.EvPeerFollowed})
	}
}

// Traffic tells the manager that qp's data path moved (a send posted or
// completed): packets flow, and a QP in REARM arms with the first from
// its peer. Its ARMED poll comes back to PollMax at most, for
// Config.RearmIdle from now. Cheap, and ignored in any other state.
func (m *Manager) Traffic(qp verbs.QP) {
	e := m.byQP[qp]
	if e == nil || e.m.State != fsm.APMRearming {
		return
	}
	now := m.clock.Now()
	e.busyAt = now
	if e.gap > m.cfg.PollMax {
		e.gap = m.cfg.PollMax
		e.nextPoll = min(e.nextPoll, now+e.gap)
	}
}

// IdleInRearm reports whether qp is in REARM and idle past
// Config.RearmIdle: its ARMED poll is backed off beyond PollMax until
// Traffic says otherwise.
func (m *Manager) IdleInRearm(qp verbs.QP) bool {
	e := m.byQP[qp]
	return e != nil && m.idleInRearm(e, m.clock.Now())
}

// ErrorCompletion tells the manager the data path saw an error completion
// on qp: layer 1 can no longer help it.
func (m *Manager) ErrorCompletion(qp verbs.QP, st verbs.WCStatus) {
	if e := m.byQP[qp]; e != nil {
		m.step(e, fsm.APMEvent{Kind: fsm.EvQPError, Reason: "error completion: " + st.String()})
	}
}

// each steps every QP of d (a copy of the list: steps may unregister).
func (m *Manager) each(d *device, ev fsm.APMEvent) {
	for _, e := range append([]*entry(nil), d.entries...) {
		m.step(e, ev)
	}
}
