package apm

import (
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// QPStatus is layer 1's view of one QP, for status output.
type QPStatus struct {
	Device     string
	QPN        uint32
	State      fsm.APMState
	Primary    fsm.PathRef
	Alternate  fsm.PathRef // zero when HasAlt is false
	HasAlt     bool
	Home       fsm.PathRef
	Reason     string // why unprotected, handed over or unsupported
	Migrations int
	// DampedUntil is when, on the manager's clock, its failback stops
	// being held because its home port or path flapped
	// (Config.Damping); 0 when it is not held. It moves only with a new
	// flap, so a status compared with the last one changes only then.
	DampedUntil time.Duration
}

// Status lists every registered QP, by device in registration order.
func (m *Manager) Status() []QPStatus {
	var out []QPStatus
	for _, d := range m.devs {
		for _, e := range d.entries {
			out = append(out, m.status(e))
		}
	}
	return out
}

// PortDamping lists the ports with a damping penalty now (Config.Damping),
// by device and port.
func (m *Manager) PortDamping() []pathsel.Damping[pathsel.PortKey] {
	return m.ports.States(m.clock.Now(), pathsel.ComparePortKeys)
}

// DampingConfig is the flap damping in force (Config.Damping, defaults
// filled in).
func (m *Manager) DampingConfig() pathsel.DampingConfig { return m.ports.Config() }

// QPStatus returns the status of one QP.
func (m *Manager) QPStatus(qp verbs.QP) (QPStatus, bool) {
	e := m.byQP[qp]
	if e == nil {
		return QPStatus{}, false
	}
	return m.status(e), true
}

func (m *Manager) status(e *entry) QPStatus {
	s := QPStatus{Device: e.dev.ctx.Device().Name, QPN: e.qp.QPN(), State: e.m.State, Primary: e.m.Primary,
		HasAlt: e.m.HasAlt, Home: e.m.Home, Reason: e.m.Reason, Migrations: e.migrations}
	if e.m.Primary != e.m.Home {
		s.DampedUntil = m.reuseAt(e, m.clock.Now())
	}
	if e.m.HasAlt {
		s.Alternate = e.m.Alt
	}
	return s
}
