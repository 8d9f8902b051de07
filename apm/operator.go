package apm

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// ErrNotRegistered: the QP is not protected by this manager.
var ErrNotRegistered = errors.New("apm: QP not registered")

// Arm asks to arm one QP now (an operator's `ibpath arm`). It fails when
// APM cannot protect the QP; arming an armed QP is not an error.
func (m *Manager) Arm(qp verbs.QP) error {
	e := m.byQP[qp]
	if e == nil {
		return fmt.Errorf("arm QP %#x: %w", qp.QPN(), ErrNotRegistered)
	}
	switch e.m.State {
	case fsm.APMUnsupported, fsm.APMHandedOver:
		return fmt.Errorf("arm QP %#x: %v: %s", qp.QPN(), e.m.State, e.m.Reason)
	}
	m.step(e, fsm.APMEvent{Kind: fsm.EvArmRequested})
	return nil
}

// ArmPort arms every QP whose primary path uses port of ctx (port 0: every
// QP of ctx) and returns how many it asked to arm.
func (m *Manager) ArmPort(ctx verbs.Context, port uint8) int {
	n := 0
	for _, d := range m.devs {
		if d.ctx != ctx {
			continue
		}
		for _, e := range append([]*entry(nil), d.entries...) {
			if (port == 0 || e.m.Primary.Port == port) && m.Arm(e.qp) == nil {
				n++
			}
		}
	}
	return n
}

// Migrate moves one ARMED QP to its alternate now (an operator's
// `ibpath migrate`).
func (m *Manager) Migrate(qp verbs.QP) error {
	e := m.byQP[qp]
	if e == nil {
		return fmt.Errorf("migrate QP %#x: %w", qp.QPN(), ErrNotRegistered)
	}
	if e.m.State != fsm.APMArmed {
		why := e.m.Reason
		if why == "" {
			why = "the alternate is still loading"
		}
		return fmt.Errorf("migrate QP %#x: not armed (%v: %s)", qp.QPN(), e.m.State, why)
	}
	before := e.migrations
	m.step(e, fsm.APMEvent{Kind: fsm.EvMigrateRequested})
	if e.migrations == before {
		return fmt.Errorf("migrate QP %#x: the HCA refused; QP resynchronised at %v", qp.QPN(), e.m.Primary)
	}
	return nil
}

// MigratePort moves every QP whose primary path uses port of ctx off it,
// for maintenance. With dryRun it changes nothing and reports what it would
// do. It returns the status of each QP concerned (after the move) and an
// error naming the QPs that could not move.
func (m *Manager) MigratePort(ctx verbs.Context, port uint8, dryRun bool) ([]QPStatus, error) {
	var out []QPStatus
	var failed []error
	for _, d := range m.devs {
		if d.ctx != ctx {
			continue
		}
		for _, e := range append([]*entry(nil), d.entries...) {
			if e.m.Primary.Port != port {
				continue
			}
			if !dryRun {
				if err := m.Migrate(e.qp); err != nil {
					failed = append(failed, err)
				}
			}
			out = append(out, m.status(e))
		}
	}
	return out, errors.Join(failed...)
}
