package shim

import (
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/status"
)

// Layer1Status is layer 1's view of one QP, in the fields of status.QP.
type Layer1Status struct {
	// Layer is status.LayerAPM while layer 1 protects the QP (armed,
	// rearming, awaiting the peer), else status.LayerNone (unprotected,
	// unsupported, handed over: layer 2 may protect it; the runtime
	// says so).
	Layer      string
	APM        string      // fsm.APMState's name: armed, rearming, unprotected, ...
	Port       uint8       // the primary path's port
	Primary    status.Path // on the QP's device
	Alternate  status.Path // zero when none is loaded
	Home       status.Path
	Migrations int
	Reason     string // why unprotected, handed over or unsupported
	// FailbackHeldUntil: flap damping keeps the QP off its home path
	// until then (apm.QPStatus.DampedUntil as a time of day); zero: not
	// held.
	FailbackHeldUntil time.Time
}

// status is layer1Status with the failback's hold as a time of day (the
// manager's clock mapped onto Layer1Options.Now, to the millisecond).
func (l *Layer1) status(s apm.QPStatus) Layer1Status {
	out := layer1Status(s)
	if s.DampedUntil > 0 {
		out.FailbackHeldUntil = l.hooks.Now().Add(s.DampedUntil - l.hooks.Clock.Now()).Round(time.Millisecond)
	}
	return out
}

func layer1Status(s apm.QPStatus) Layer1Status {
	out := Layer1Status{Layer: status.LayerAPM, APM: s.State.String(), Port: s.Primary.Port, Primary: l1Path(s.Device, s.Primary),
		Home: l1Path(s.Device, s.Home), Migrations: s.Migrations, Reason: s.Reason}
	if s.HasAlt {
		out.Alternate = l1Path(s.Device, s.Alternate)
	}
	switch s.State {
	case fsm.APMUnprotected, fsm.APMUnsupported, fsm.APMHandedOver:
		out.Layer = status.LayerNone
	}
	return out
}

// l1Path is a path of layer 1 on device dev; zero for none.
func l1Path(dev string, p fsm.PathRef) status.Path {
	if p.Port == 0 {
		return status.Path{}
	}
	return status.Path{Device: dev, Port: p.Port, PathBits: p.Bits}
}

// Apply writes s into q's layer-1 fields (Layer, APM, Port, Primary,
// Alternate, Home, Migrations, Reason, FailbackHeldUntil).
func (s Layer1Status) Apply(q *status.QP) {
	q.Layer, q.APM, q.Port, q.Primary, q.Alternate, q.Home, q.Migrations, q.Reason, q.FailbackHeldUntil =
		s.Layer, s.APM, s.Port, s.Primary, s.Alternate, s.Home, s.Migrations, s.Reason, s.FailbackHeldUntil
}

// Status returns layer 1's view of a QP; false when layer 1 does not
// protect it (not RC on InfiniBand, not connected yet, destroyed or
// reset by the application, or layer 1 closed).
func (l *Layer1) Status(dev string, qpn uint32) (Layer1Status, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.qps[l1Key{dev, qpn}]
	if q == nil {
		return Layer1Status{}, false
	}
	st, ok := l.mgr.QPStatus(q.qp)
	if !ok {
		return Layer1Status{}, false
	}
	return l.status(st), true
}

// Protects reports whether layer 1 protects a QP now: an alternate is
// armed or arming, or ibpath migrated it and waits for the peer. A port
// or device fault on such a QP is layer 1's to handle; layer 2 should
// act only on the QPs it does not protect (or hands over).
func (l *Layer1) Protects(dev string, qpn uint32) bool {
	s, ok := l.Status(dev, qpn)
	return ok && s.Layer == status.LayerAPM
}
