package sim

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// StaleExecution is a request a responder executed after its requester QP
// was reset or destroyed: a packet of an earlier connection, taken by its
// PSN alone (IBA 9.7: packets carry no incarnation). The simulator keeps
// what an HCA does with it; it records it so that a test can tell whether
// a layer's resets let one through.
type StaleExecution struct {
	At       time.Duration
	QPN      uint32 // the responder's QP
	SrcQPN   uint32
	PSN      uint32
	Op       verbs.WROpcode
	Length   uint32
	Imm      uint32
	Resets   uint32 // how many resets of its requester it outlived
	Effected bool   // it did something (Effective)
	// Crossed: the responder's incarnation that took it began (a reset,
	// or the QP's creation) when or after the requester's that sent it
	// ended:
	// the two never ran together, so the packet is of an earlier
	// connection at both ends, not one its sender left behind while
	// the responder still ran the connection it was sent on
	Crossed bool
}

func (s StaleExecution) String() string {
	eff := "no effect"
	if s.Effected {
		eff = "effective"
	}
	cross := ""
	if s.Crossed {
		cross = ", the responder reset since"
	}
	return fmt.Sprintf("at %v qp %#x took %v psn %d len %d imm %#x from qp %#x, %d reset(s) old%s (%s)",
		s.At, s.QPN, s.Op, s.PSN, s.Length, s.Imm, s.SrcQPN, s.Resets, cross, eff)
}

// Effective reports whether executing the request does anything at the
// responder: every request but a zero-length RDMA WRITE without immediate
// (no memory touched, no R_Key checked, no receive consumed) writes or
// reads memory, consumes a receive, or returns data to the requester.
func Effective(op verbs.WROpcode, length uint32) bool {
	return op != verbs.WRRDMAWrite || length > 0
}

// maxStaleKept bounds the executions StaleExecutions returns.
const maxStaleKept = 32

// staleExec records p's execution by q if p's requester was reset since
// it sent p. Called with the fabric locked, as q executes p.
func (q *QP) staleExec(p *packet) {
	if p.owner == nil || p.owner.resets == p.resets {
		return
	}
	f := q.ctx.fab()
	e := StaleExecution{At: f.now, QPN: q.qpn, SrcQPN: p.sqpn, PSN: p.psn, Op: p.op, Length: p.length, Imm: p.imm,
		Resets: p.owner.resets - p.resets, Effected: Effective(p.op, p.length), Crossed: p.gone && q.resetAt >= p.goneAt}
	f.stats.StaleExecuted++
	if e.Effected {
		f.stats.StaleEffective++
	}
	if e.Crossed {
		f.stats.StaleCrossed++
	}
	if len(f.stale) < maxStaleKept {
		f.stale = append(f.stale, e)
	}
	if f.tracer != nil {
		f.trace(q.hca, "stale", "%v", e)
	}
}

// StaleExecutions returns the first requests executed after their
// requester's reset (at most 32; Stats counts them all).
func (f *Fabric) StaleExecutions() []StaleExecution {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]StaleExecution(nil), f.stale...)
}
