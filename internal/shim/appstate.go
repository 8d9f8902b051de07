package shim

import (
	"fmt"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// The application's own moves of a QP to ERR or RESET (a disconnect:
// rdma_disconnect moves the QP to ERR; a teardown; a reset before a
// reconnect) are not faults, and layer 2 must not act as if they were.
// Before a failover the QP is disarmed: its flushes reach the
// application as plain verbs give them, and it is never armed again.
// After a failover the application's WRs and receives are on the backup
// QP, where the move did not reach: after a move to ERR the Conn
// surfaces, which moves the backup to ERR too, so they flush to the
// application as they would have on its own QP (a program that waits for
// its receives' flushes before it exits would otherwise wait for ever);
// after a move to RESET they vanish, as a reset QP's own do, the backup
// reset too (crossnic.Conn.AppReset), and the Conn never touches the
// default QP again: the application connects it anew. A peer's fallback
// notification that arrives later is refused, and the peer surfaces at
// once.

// appClosed handles the application's successful move of dev's QP qpn (on
// context ctx) to state (ERR or RESET).
func (r *Runtime) appClosed(ctx uintptr, qpn uint32, state verbs.QPState) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	q := r.fo.qps[qpKey{ctx, qpn}]
	if q == nil || q.gone || q.left != "" {
		return
	}
	why := fmt.Sprintf("the application moved the QP to %v", state)
	switch {
	case q.conn != nil:
		q.left = why
		if sq, _ := q.conn.State(); sq == fsm.SQSurfaced {
			return
		}
		reason := why + " after its failover: what the backup holds flushes"
		switch {
		case state == verbs.QPSReset:
			// A QP in RESET holds nothing and reports nothing of what it
			// held: the backup's WRs and receives vanish the same way,
			// and the QP is the application's alone again (a reconnect
			// follows, to the same peer or another).
			reason = why + " after its failover: what the backup held is gone, as the QP's own WRs are"
			if x := r.express(); q.express && x != nil {
				x.ExpressSurface(q.app)
			}
			q.conn.AppReset(reason)
			r.observe(q)
		case q.express:
			r.surfaceExpress(q, reason)
		default:
			q.conn.Surface(reason)
			r.observe(q)
		}
		r.log.Info("libibpath: layer 2 ends the QP with the application", "qpn", qpn, "reason", reason)
	case q.diverted || q.intercepted:
		q.left = why // taken over, no Conn: plain verbs already
	default:
		r.leave(q, why)
		r.log.Debug("libibpath: layer 2 leaves the QP to the application", "qpn", qpn, "reason", why)
	}
}
