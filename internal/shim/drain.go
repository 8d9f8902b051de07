package shim

import (
	"fmt"
	"slices"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/verbs"
)

// A drained port is one an operator took out of service while its link is
// up (`ibpath drain`, relayed by ibpathd as a drain command). The shim
// keeps the process's traffic off it until the undrain:
//
//   - layer 1 treats it as down (apm.Manager.Drain): its QPs migrate to an
//     alternate off it, no path is chosen on it, none fails back to it,
//     and what layer 1 cannot move it hands to layer 2;
//   - layer 2 fails over, to the backup device, the QPs on it that layer
//     1 does not protect (RoCE, no APM), also those connected later once
//     the application took them to RTS;
//   - no switch back returns to it (portUp says down).
//
// Undrain lifts all three: layer 1 fails back by its policy, layer 2
// switches back where switch back is on.

// Drain applies a drain or undrain command to the process.
func (r *Runtime) Drain(c ownerproto.Command) ownerproto.Result {
	k := portKey{c.Device, c.Port}
	on := c.Op == ownerproto.OpDrain
	r.mu.Lock()
	if r.drained == nil {
		r.drained = map[portKey]bool{}
	}
	was := r.drained[k]
	if on {
		r.drained[k] = true
	} else {
		delete(r.drained, k)
	}
	r.mu.Unlock()
	moved := 0
	if r.l1 != nil {
		moved = r.l1.Drain(c.Device, c.Port, on)
	}
	if !on {
		r.log.Info(fmt.Sprintf("libibpath: %s port %d undrained", c.Device, c.Port), "was_drained", was)
		return ownerproto.Result{OK: true, Note: "undrained"}
	}
	moved += r.leaveDrained()
	r.log.Info(fmt.Sprintf("libibpath: %s port %d drained", c.Device, c.Port), "moving", moved)
	return ownerproto.Result{OK: true, Note: fmt.Sprintf("drained; QPs moving off: %d", moved)}
}

// Drained lists the drained ports ("mlx5_0:1"), sorted.
func (r *Runtime) Drained() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k := range r.drained {
		out = append(out, fmt.Sprintf("%s:%d", k.dev, k.port))
	}
	slices.Sort(out)
	return out
}

// anyDrained reports whether some port is drained.
func (r *Runtime) anyDrained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.drained) > 0
}

// isDrained reports whether port of dev is drained. Any lock but r.mu may
// be held.
func (r *Runtime) isDrained(dev string, port uint8) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drained[portKey{dev, port}]
}

// leaveDrained fails over, to the backup device, every QP layer 2 armed
// on a drained port that layer 1 does not protect, and returns how many.
func (r *Runtime) leaveDrained() int {
	r.fo.mu.Lock()
	defer r.unlockFO()
	return r.leaveDrainedLocked()
}

// leaveDrainedLocked is leaveDrained with fo.mu held.
func (r *Runtime) leaveDrainedLocked() int {
	if r.fo.hp == nil {
		return 0
	}
	n := 0
	for _, q := range r.fo.qps {
		if !q.armed || q.diverted || q.intercepted || q.gone || q.destroying || !r.isDrained(q.set.dev, q.port) {
			continue
		}
		if q.qp.State() != verbs.QPSRTS {
			// Layer 2 arms a QP at RTR: moving it to ERR now would fail
			// the application's own RTR->RTS. Modified calls again then.
			continue
		}
		if r.l1Protects(q.set.dev, q.key.qpn) {
			continue // layer 1 moves it, and hands over what it cannot
		}
		why := fmt.Sprintf("port %s:%d is drained", q.set.dev, q.port)
		q.startFault(why, r.now())
		if !r.divert(q) {
			continue
		}
		if q.conn != nil {
			q.conn.HandOver(q.qp, why)
		}
		r.runConn(q)
		n++
	}
	r.settle()
	return n
}

// Drain drains (on) or undrains port of the devices named dev in layer 1,
// and returns how many QPs it asked to move.
func (l *Layer1) Drain(dev string, port uint8, on bool) int {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0
	}
	n := 0
	if on {
		n = l.mgr.Drain(dev, port)
	} else {
		l.mgr.Undrain(dev, port)
	}
	l.collect()
	l.mu.Unlock()
	l.deliver()
	l.poller.Kick()
	return n
}
