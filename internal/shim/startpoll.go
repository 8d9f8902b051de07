package shim

import (
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// An extended CQ (ibv_create_cq_ex) polled with ibv_start_poll,
// ibv_next_poll and ibv_end_poll bypasses the hot path: the shim sees
// none of its completions, so it cannot retire the shadow rings of its
// QPs, and after a failover it could not hand the program the backup's
// completions (the program would wait for them for ever). So layer 2
// arms no QP of an extended CQ (CQExtended) until the CQ's first
// ibv_poll_cq shows that the shim sees its completions (CQPolled): a
// fault before then reaches the program as plain verbs report it, and
// nothing is diverted that the shim could not follow. The C side
// follows each such CQ (cqex.c) and reports its first ibv_start_poll
// too (CQStartPoll): layer 2 then leaves the CQ's QPs for good, with
// that reason in their status, and never arms a QP created on it later.

// startPollReason is the status reason of a QP on such a CQ.
const startPollReason = "its CQ is polled with ibv_start_poll, which the shim does not follow"

// extWaitReason is the status reason of a QP whose extended CQ was not
// polled yet.
const extWaitReason = "layer 2: waits for its extended CQ's first ibv_poll_cq (one polled with ibv_start_poll cannot be followed)"

// CQExtended: the application created cq with ibv_create_cq_ex. Its QPs
// are armed only after its first ibv_poll_cq (CQPolled).
func (r *Runtime) CQExtended(cq verbs.CQ) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	if r.fo.extCQ == nil {
		r.fo.extCQ = map[verbs.CQ]bool{}
	}
	r.fo.extCQ[cq] = true
}

// CQPolled: the application polls cq, an extended CQ, with ibv_poll_cq
// (its first poll): the shim sees its completions, and layer 2 arms its
// QPs whose backups are connected.
func (r *Runtime) CQPolled(cq verbs.CQ) {
	r.fo.mu.Lock()
	waited := r.fo.extCQ[cq]
	delete(r.fo.extCQ, cq)
	r.unlockFO()
	if waited {
		r.log.Debug("libibpath: an extended CQ is polled with ibv_poll_cq; layer 2 arms its QPs")
		r.armConnected()
	}
}

// extWaits says whether q completes into an extended CQ not polled yet.
// Called with fo.mu held.
func (r *Runtime) extWaits(q *l2qp) bool { return r.fo.extCQ[q.app.SendCQ] || r.fo.extCQ[q.app.RecvCQ] }

// CQStartPoll: the application polls cq, an extended CQ of context ctx,
// with ibv_start_poll (its first call).
func (r *Runtime) CQStartPoll(ctx uintptr, cq verbs.CQ) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	if r.fo.startPolled == nil {
		r.fo.startPolled = map[verbs.CQ]bool{}
	}
	r.fo.startPolled[cq] = true
	delete(r.fo.extCQ, cq)
	n := 0
	for _, q := range r.fo.qps {
		if q.key.ctx == ctx && (q.app.SendCQ == cq || q.app.RecvCQ == cq) {
			r.leave(q, startPollReason)
			n++
		}
	}
	r.log.Info("libibpath: a CQ is polled with ibv_start_poll; layer 2 leaves its QPs", "qps", n)
}

// CQStartPollGone: the application destroyed cq, an extended CQ the C
// side followed (a CQ made later at the same address starts afresh).
func (r *Runtime) CQStartPollGone(cq verbs.CQ) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	delete(r.fo.startPolled, cq)
	delete(r.fo.extCQ, cq)
}

// leave makes layer 2 leave q for good: disarmed, never armed again, a
// peer's notification refused. A QP it took over already cannot be given
// back: that is said. Called with fo.mu held.
func (r *Runtime) leave(q *l2qp, why string) {
	if q.gone || q.left != "" {
		return
	}
	q.left = why
	if q.diverted || q.intercepted {
		r.log.Error("libibpath: layer 2 took the QP over before it could know; its completions from the backup may not reach the application",
			"qpn", q.key.qpn, "why", why)
		return
	}
	if q.armed && r.fo.hp != nil {
		q.armed = false
		r.fo.hp.Arm(q.app, false)
	}
	r.setStatus(q, func(s *status.QP) {
		if s.Layer == status.LayerCrossNIC {
			s.Layer = status.LayerNone
		}
		s.CrossNIC, s.Reason = "", "layer 2: "+why
	})
}

// startPolledCQ says whether q completes into a CQ polled with
// ibv_start_poll. Called with fo.mu held.
func (r *Runtime) startPolledCQ(q *l2qp) bool {
	return r.fo.startPolled[q.app.SendCQ] || r.fo.startPolled[q.app.RecvCQ]
}
