package apm

import (
	"github.com/ibpath/ibpath/fsm"
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
	if e.m.HasAlt {
		s.Alternate = e.m.Alt
	}
	return s
}
