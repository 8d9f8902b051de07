package shim

import (
	"log/slog"
	"time"

	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
)

// Flap damping in layer 2 (Config.Damping, the same settings as layer
// 1's; the switch back's only with Config.SwitchBackDamping): every PORT_ERR the shim's contexts see adds a penalty to the
// port (one outage counts once however many contexts report it), which
// decays with the half-life; PORT_ACTIVE ends the outage. While a port
// is suppressed:
//   - a QP that failed over off it does not switch back to it (portUp
//     says down: its default QP is neither reset nor probed), and its
//     status says until when (SwitchbackHeldUntil), unless a port of the
//     backup device went down: then any path beats none, and it
//     switches back at once;
//   - no backup is chosen on it (chooseBackup), when another device has
//     an ACTIVE port that is not.
//
// The damper knows only what this process saw: a process that starts
// after a port flapped starts with no penalty (ibpathd's node-wide view
// is in its status, docs/DAEMON.md).

// newPortDamper returns the runtime's port damper; a configuration that
// does not check (it was checked when parsed) turns damping off, said.
func newPortDamper(cfg pathsel.DampingConfig, log *slog.Logger) *pathsel.Damper[pathsel.PortKey] {
	d, err := pathsel.NewDamper[pathsel.PortKey](cfg)
	if err != nil {
		log.Warn("libibpath: flap damping off", "err", err)
		d, _ = pathsel.NewDamper[pathsel.PortKey](pathsel.DampingConfig{Off: true})
	}
	return d
}

// portFlap records a port event in the damper. Called with mu held.
func (r *Runtime) portFlap(dev string, port uint8, up bool) {
	k, now := pathsel.PortKey{Device: dev, Port: port}, r.fo.clock.Now()
	if up {
		r.damp.Up(k, now)
		return
	}
	if r.damp.Down(k, now) {
		at, _ := r.damp.ReuseAt(k, now)
		r.log.Info("libibpath: port flapped; suppressed by flap damping", "device", dev, "port", port,
			"penalty", int(r.damp.State(k, now).Penalty), "reuse_in", (at - now).Round(time.Millisecond))
	}
}

// suppressed reports whether flap damping keeps traffic off a port now.
func (r *Runtime) suppressed(dev string, port uint8) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.suppressedLocked(dev, port)
}

// backupUpLocked reports whether no port of the backup device is down,
// as the last port events on the shim's context of it said. Called with
// mu held.
func (r *Runtime) backupUpLocked(backup string) bool {
	for k, p := range r.ports {
		if k.dev == backup && !p.Up {
			return false
		}
	}
	return true
}

// suppressedLocked is suppressed, called with mu held.
func (r *Runtime) suppressedLocked(dev string, port uint8) bool {
	return r.damp.Suppressed(pathsel.PortKey{Device: dev, Port: port}, r.fo.clock.Now())
}

// switchHeldUntil is when flap damping stops holding a switch back to a
// port, on the damper's clock (stable until the port's next flap) and on
// the runtime's time of day; ok false when not held.
func (r *Runtime) switchHeldUntil(dev string, port uint8) (at time.Duration, until time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.fo.clock.Now()
	at, ok = r.damp.ReuseAt(pathsel.PortKey{Device: dev, Port: port}, now)
	if !ok {
		return 0, time.Time{}, false
	}
	return at, r.now().Add(at - now).Round(time.Millisecond), true
}

// noteHeld shows in q's status, and logs once, a switch back that flap
// damping holds. The hold's end moves only with a new flap: it is
// compared on the damper's clock, not as a time of day (two clocks read
// one after the other, milliseconds apart on a busy host). Called with
// fo.mu held.
func (r *Runtime) noteHeld(q *l2qp) {
	if !q.recovery || !q.failedOver || !r.cfg.SwitchBackDamping {
		return
	}
	at, until, _ := r.switchHeldUntil(q.set.dev, q.port)
	if at == q.heldAt {
		return
	}
	q.heldAt, q.heldUntil = at, until
	r.setStatus(q, func(s *status.QP) { s.SwitchbackHeldUntil = until })
	if !until.IsZero() {
		r.log.Info("libibpath: layer 2 switch back held: the home port flapped", "qpn", q.key.qpn, "device", q.set.dev,
			"port", q.port, "until", until.Format(time.TimeOnly))
	}
}
