package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// Gray failure (docs/DAEMON.md, "Port health"): every Config.CounterPoll
// ibpathd reads each port's counters (pathsel.ReadPortCounters on
// hardware, the simulated ports' own on the simulated fabric) and judges
// them by Config.Health (pathsel.HealthMonitor). A port found degraded
// is taken out of service as a drain takes it (every process told,
// ibpathd's workload too, the port shown DOWN to peers), without being
// written to drains.json: the rule judges it again after a restart. The
// degradation counts as a flap in the port's damping. Once the port is
// healthy again (Health.Clear without a break), it is put back in
// service as soon as its damping allows; an operator's drain of it
// stays until the operator's undrain.

// healthWatch is the node's port health.
type healthWatch struct {
	mu   sync.Mutex
	m    *pathsel.HealthMonitor[pathsel.PortKey]
	out  map[pathsel.PortKey]healthDrain // ports out of service for their health
	last map[pathsel.PortKey]pathsel.PortHealth
	errs map[pathsel.PortKey]string // the last read error of each port
}

// healthDrain is a port out of service for its health.
type healthDrain struct {
	since   time.Time
	why     string
	healthy bool // healthy again: back in service once its damping allows
}

func newHealthWatch(cfg pathsel.HealthConfig) (*healthWatch, error) {
	m, err := pathsel.NewHealthMonitor[pathsel.PortKey](cfg)
	if err != nil {
		return nil, err
	}
	return &healthWatch{m: m, out: map[pathsel.PortKey]healthDrain{}, last: map[pathsel.PortKey]pathsel.PortHealth{},
		errs: map[pathsel.PortKey]string{}}, nil
}

// watchCounters polls the counters until the daemon stops.
func (d *Daemon) watchCounters() { d.every(d.cfg.CounterPoll, d.pollCounters) }

// readCounters reads one port's counters (ok false: it has none).
func (d *Daemon) readCounters(dev string, port uint8) (pathsel.PortCounters, bool, error) {
	if d.sim == nil {
		return pathsel.ReadPortCounters(pathsel.DiscoverOptions{SysfsRoot: d.cfg.Sysfs}, dev, port)
	}
	for i, name := range d.sim.names {
		if name != dev {
			continue
		}
		r, ok := d.sim.ctxs[i].(verbs.PortCounterReader)
		if !ok {
			return pathsel.PortCounters{}, false, nil
		}
		m, err := r.PortCounters(port)
		if err != nil {
			return pathsel.PortCounters{}, true, fmt.Errorf("port counters %s:%d: %w", dev, port, err)
		}
		return pathsel.SumCounters(func(n string) (uint64, bool) { v, ok := m[n]; return v, ok }), true, nil
	}
	return pathsel.PortCounters{}, false, nil
}

// pollCounters reads every port's counters once, judges them, and takes
// ports out of service or puts them back.
func (d *Daemon) pollCounters() {
	d.invMu.Lock()
	inv := d.inv
	d.invMu.Unlock()
	at := d.damp.clock()
	now := d.damp.now()
	h := d.health
	d.forgetGone(inv)
	for _, hca := range inv {
		for _, p := range hca.Ports {
			k := pathsel.PortKey{Device: hca.Name, Port: p.Num}
			if p.State != verbs.PortActive {
				// a port that is down is out of service by itself; its
				// history starts over when it is back
				h.mu.Lock()
				h.m.Restart(k)
				h.mu.Unlock()
				continue
			}
			c, ok, err := d.readCounters(hca.Name, p.Num)
			h.mu.Lock()
			if err != nil {
				if h.errs[k] != err.Error() {
					d.log.Warn("port counters", "device", hca.Name, "port", p.Num, "err", err)
				}
				h.errs[k] = err.Error()
				h.mu.Unlock()
				continue
			}
			delete(h.errs, k)
			if !ok {
				h.mu.Unlock()
				continue
			}
			ph, changed := h.m.Observe(k, at, c)
			h.last[k] = ph
			var degrade, healed bool
			switch x, out := h.out[k]; {
			case changed && ph.Degraded && !out:
				h.out[k] = healthDrain{since: now, why: ph.Why}
				degrade = true
			case changed && ph.Degraded: // degraded again before it came back
				x.healthy = false
				h.out[k] = x
				degrade = true
			case changed && out:
				x.healthy = true
				h.out[k] = x
				healed = true
			}
			h.mu.Unlock()
			switch {
			case degrade:
				d.damp.fault(k)
				d.log.Warn("port degraded: its traffic leaves it", "device", k.Device, "port", k.Port, "why", ph.Why,
					"seq_errors_per_s", ph.SeqErrorsPerSec, "link_errors_per_s", ph.LinkErrorsPerSec)
				d.setInService(k, false)
			case healed:
				d.damp.recovered(k)
				d.log.Info("port healthy again", "device", k.Device, "port", k.Port)
			}
		}
	}
	d.returnHealed()
}

// forgetGone drops the ports a good read of the devices no longer has
// (their device went away): no health, and none out of service for it
// (the processes are told, so that a device back under the same name is
// not held out for the old one's health).
func (d *Daemon) forgetGone(inv []pathsel.HCAInfo) {
	d.invMu.Lock()
	failed := d.invErr != nil
	d.invMu.Unlock()
	if failed {
		return // a read that failed may lack devices that are there
	}
	have := map[pathsel.PortKey]bool{}
	for _, hca := range inv {
		for _, p := range hca.Ports {
			have[pathsel.PortKey{Device: hca.Name, Port: p.Num}] = true
		}
	}
	h := d.health
	var back []pathsel.PortKey
	h.mu.Lock()
	for k := range h.last {
		if !have[k] {
			h.m.Forget(k)
			delete(h.last, k)
			delete(h.errs, k)
			if _, out := h.out[k]; out {
				delete(h.out, k)
				back = append(back, k)
			}
		}
	}
	h.mu.Unlock()
	d.putBack(back, "port gone while out of service for its health")
}

// returnHealed puts back in service the ports healthy again whose flap
// damping no longer suppresses them.
func (d *Daemon) returnHealed() {
	h := d.health
	var back []pathsel.PortKey
	h.mu.Lock()
	for k, x := range h.out {
		if x.healthy && !d.damp.suppressedNow(k) {
			delete(h.out, k)
			back = append(back, k)
		}
	}
	h.mu.Unlock()
	d.putBack(back, "port back in service after its degradation")
}

// putBack puts ports back in service (setInService), each with a log
// line saying why. Called without the health watch's lock.
func (d *Daemon) putBack(ports []pathsel.PortKey, why string) {
	for _, k := range ports {
		d.log.Info(why, "device", k.Device, "port", k.Port)
		d.setInService(k, true)
	}
}

// setInService relays a port's leaving or return to the workload and to
// every attached process, as a drain or undrain does, unless an
// operator's drain holds the port anyway.
func (d *Daemon) setInService(k pathsel.PortKey, in bool) {
	if d.drains.has(k.Device, k.Port) {
		return
	}
	op := ownerproto.OpDrain
	if in {
		op = ownerproto.OpUndrain
	}
	if d.sim != nil {
		d.sim.drain(k.Device, k.Port, !in)
	}
	for _, a := range d.tellOwners(context.Background(), d.owners.list(), []ownerproto.Command{{Op: op, Device: k.Device, Port: k.Port}}) {
		if a.Error != "" {
			d.log.Warn("port health: a process was not told", "op", op, "pid", a.PID, "err", a.Error)
		}
	}
}

// healthOut reports whether a port is out of service for its health.
func (d *Daemon) healthOut(dev string, port uint8) bool {
	if d.health == nil {
		return false
	}
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	_, ok := d.health.out[pathsel.PortKey{Device: dev, Port: port}]
	return ok
}

// healthDrains lists the ports out of service for their health.
func (d *Daemon) healthDrains() map[pathsel.PortKey]healthDrain {
	if d.health == nil {
		return nil
	}
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	out := make(map[pathsel.PortKey]healthDrain, len(d.health.out))
	for k, x := range d.health.out {
		out[k] = x
	}
	return out
}

// portHealthStatus is a port's health for the status (nil: never
// judged).
func (d *Daemon) portHealthStatus(dev string, port uint8) *status.PortHealth {
	if d.health == nil {
		return nil
	}
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	k := pathsel.PortKey{Device: dev, Port: port}
	ph, ok := d.health.last[k]
	errText := d.health.errs[k]
	if !ok && errText == "" {
		return nil
	}
	s := &status.PortHealth{State: status.HealthOK, LinkErrorsPerSecond: ph.LinkErrorsPerSec, SeqErrorsPerSecond: ph.SeqErrorsPerSec,
		XmitPacketsPerSecond: ph.XmitPktsPerSec, CongestionPerSecond: ph.CongestionPerSec, Error: errText}
	if ph.Degraded {
		s.State, s.Why = status.HealthDegraded, ph.Why
	}
	if x, out := d.health.out[k]; out {
		s.OutOfService = true
		s.Since = x.since
		if x.healthy {
			s.State = status.HealthRecovering
		}
	}
	return s
}

// healthRule is the rule in force, for the status.
func (d *Daemon) healthRule() string {
	if d.health == nil {
		return "off"
	}
	return d.health.m.Config().String()
}
