package apm

import (
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
)

// Flap damping (Config.Damping) holds a QP's failback while its home
// path is suppressed. Two things flap: a local port (each PORT_ERR of
// it, counted once per outage however many contexts report it), and a
// QP's home path, whose down event is the QP leaving home on a fault: a
// proactive migration on PORT_ERR, or a migration the HCA made by itself
// (PATH_MIG, or one the migration poll found), which is how the end
// whose own port did not fail sees its peer's port flap. The path comes
// back up when the QP is home again. An operator's migrate or drain is
// not a flap.

// stepFault steps e with a fault event and records a flap of e's home
// path if the event took the QP away from home.
func (m *Manager) stepFault(e *entry, ev fsm.APMEvent) {
	home := e.m.Primary == e.m.Home
	m.step(e, ev)
	if home && e.m.Primary != e.m.Home && m.byQP[e.qp] == e {
		m.paths.Down(e.qp, m.clock.Now())
	}
}

// cameHome records that e's home path is in use again (after step),
// however it came home (its failback, its peer's, an operator's): the
// next hold of its failback is counted anew (Stats.FailbacksDamped).
func (m *Manager) cameHome(e *entry) {
	if e.m.Primary == e.m.Home {
		e.damped = false
		m.paths.Up(e.qp, m.clock.Now())
	}
}

// homePort names e's home port.
func (m *Manager) homePort(e *entry) pathsel.PortKey {
	return pathsel.PortKey{Device: e.dev.ctx.Device().Name, Port: e.m.Home.Port}
}

// damped reports whether e's failback is held at now: its home port or
// its home path is suppressed.
func (m *Manager) damped(e *entry, now time.Duration) bool {
	return m.ports.Suppressed(m.homePort(e), now) || m.paths.Suppressed(e.qp, now)
}

// reuseAt is when e's failback is no longer held by damping (0: not held).
func (m *Manager) reuseAt(e *entry, now time.Duration) time.Duration {
	p, _ := m.ports.ReuseAt(m.homePort(e), now)
	q, _ := m.paths.ReuseAt(e.qp, now)
	return max(p, q)
}
