package sim

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// Congestion marking (docs/SIMULATOR.md, rule 107). A congested switch
// egress queue toward a port marks what it forwards to the port: there
// are no queues in the model, so a probability stands for the queue depth
// and the switch's WRED thresholds. Marking changes no traffic: a marked
// packet is delivered as it would have been, at the same time; it only
// counts.

// xmitWaitTicks is the model's unit of port_xmit_wait: the ticks one
// marked packet makes its sending InfiniBand port wait for credits.
const xmitWaitTicks = 1

// SetCongestion makes the egress queue of the switch toward port p
// congested: every packet delivered to p (requests and responses alike)
// is marked Congestion Experienced with probability mark (0 turns it
// off). On RoCE the receiving port counts the marked packet and the CNP
// it answers with, and the sending port the CNP it handles (DCQCN); on
// InfiniBand, which has no ECN, the sending port counts port_xmit_wait,
// waiting for credits. Nothing is dropped, delayed or reordered, and the
// sender does not slow down.
func (f *Fabric) SetCongestion(p *Port, mark float64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == nil {
		return fmt.Errorf("sim: set congestion: nil port")
	}
	if !(mark >= 0 && mark <= 1) {
		return fmt.Errorf("sim: set congestion on %v: probability must be in [0,1], got %v", p, mark)
	}
	p.mark = mark
	return nil
}

// congest decides whether packet p, arriving at its destination port,
// crossed the congested queue marked, and counts it: a message of n
// packets crosses as one unit, marked whole or not at all, and counts n.
// No draw is taken while the port is not congested.
func (f *Fabric) congest(p *packet) {
	dst := p.dst
	if !(dst.mark > 0 && f.rng.Float64() < dst.mark) {
		return
	}
	n := uint64(max(p.npkts, 1))
	if dst.hca.linkLayer == verbs.LinkLayerEthernet {
		// The notification point (the receiving NIC) sees CE and answers
		// with a CNP, one per marked packet (mlx5 coalesces them per QP
		// within a window; the model does not). The CNP is not a packet
		// of the model: no PSN, never lost, no time; the reaction point
		// (the sending NIC) counts it handled at once.
		dst.cnt.ecnMarked += n
		dst.cnt.cnpSent += n
		p.src.cnt.cnpHandled += n
	} else {
		// IB has no ECN: credit-based flow control holds the sending port.
		p.src.cnt.xmitWait += n * xmitWaitTicks
	}
	if f.tracer != nil {
		f.trace(dst.hca, "mark", "%s psn %d from %v to %v marked CE", kindName(p), p.psn, p.src, dst)
	}
}
