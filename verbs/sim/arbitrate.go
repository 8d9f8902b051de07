package sim

import "time"

// Send-queue arbitration. An HCA does not put one QP's whole backlog on
// the wire before the next QP's first message: IBA vol. 1 leaves the
// arbitration among the QPs of one VL to the implementation, rxe runs
// each QP's requester as a task of its own that yields after a bounded
// number of packets, and a ConnectX schedules its send queues in hardware
// (how is not documented). The simulator serves them round robin, one
// message per turn (SIMULATOR.md rule 105): a QP starts a message only while its port is not sending;
// otherwise it joins the port's waiters, and each time the port frees the
// first waiter sends one message and, with more to send, queues again at
// the end. Responses (ACKs, READ responses) are sent as the responder
// makes them, ahead of the waiting requests.

// awaitPort reports whether q must wait for its port before sending its
// next message, and queues it among the port's waiters if so. A QP whose
// path moved to another port while it waited is served by the port it
// waits on, and then sends on its own.
func (q *QP) awaitPort() bool {
	p := q.prim.port
	f := q.ctx.fab()
	if p == nil || p.busyUntil <= f.now {
		return false
	}
	if !q.portWait {
		q.portWait = true
		p.waiters = append(p.waiters, q)
	}
	p.scheduleWake()
	return true
}

// scheduleWake schedules the serving of p's waiters for when it frees.
func (p *Port) scheduleWake() {
	if p.wakeAt == p.busyUntil || len(p.waiters) == 0 {
		return
	}
	t := p.busyUntil
	p.wakeAt = t
	p.hca.host.fab.at(t, func() { p.serve(t) })
}

// serve runs when p frees (at the busyUntil its wake was scheduled for):
// waiters take turns, one message each, until one of them keeps the port
// busy; the others wait for the next serving.
func (p *Port) serve(at time.Duration) {
	if p.wakeAt != at {
		return // a later serving replaced this one
	}
	p.wakeAt = 0
	f := p.hca.host.fab
	for len(p.waiters) > 0 && p.busyUntil <= f.now {
		q := p.waiters[0]
		p.waiters = p.waiters[:copy(p.waiters, p.waiters[1:])]
		q.portWait = false
		if !q.destroyed {
			q.pump()
		}
	}
	p.scheduleWake()
}
