package shim

import (
	"syscall"
	"time"

	"github.com/ibpath/ibpath/internal/status"
)

// The application's ibv_destroy_qp, as layer 2 sees it. The provider may
// refuse a destroy (EBUSY, a command that fails), and the QP is then
// still the application's, as it was: so layer 2 lets go of nothing
// before the provider has answered. While the destroy is under way it
// only stops touching the QP, which may be freed under it:
//
//	Destroying    no call on the QP, no failover of it (a fault in that
//	              window reaches the application as plain verbs report
//	              it), its Conn not run; the backup stays
//	Destroyed     the QP is gone: its layer-2 state and backup released
//	DestroyFailed the QP is back as it was: armed, diverted or on the
//	              backup as before; an error or a backup event (the
//	              peer's fallback notification) taken meanwhile is
//	              handled now

// Destroying tells layer 2 that the application is about to destroy a QP
// (call it before the provider's ibv_destroy_qp, then Destroyed or
// DestroyFailed with the provider's answer).
func (r *Runtime) Destroying(ctx uintptr, qpn uint32) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	if q := r.fo.qps[qpKey{ctx, qpn}]; q != nil {
		q.destroying = true
	}
}

// DestroyFailed: the provider refused to destroy the QP (errno), which
// stays the application's. kept reports whether the hot path took the
// QP back: if it did, layer 2 carries on with it as before Destroying;
// if not (its tables had no room any more), layer 2 lets go of the QP
// for good, with the reason in its status.
func (r *Runtime) DestroyFailed(ctx uintptr, qpn uint32, errno syscall.Errno, kept bool) {
	r.fo.mu.Lock()
	q := r.fo.qps[qpKey{ctx, qpn}]
	if q == nil || !q.destroying {
		r.unlockFO()
		return
	}
	q.destroying = false
	if !kept {
		r.setStatus(q, func(s *status.QP) {
			s.Layer, s.CrossNIC, s.Reason = status.LayerNone, "", "the shim could not take the QP back after ibv_destroy_qp failed"
		})
		r.unlockFO()
		r.log.Warn("libibpath: ibv_destroy_qp failed and the shim could not take the QP back; it is not protected any more",
			"qpn", qpn, "errno", errno.Error())
		r.dropL2(ctx, qpn)
		return
	}
	switch {
	case q.intercepted && !q.diverted:
		r.fo.todo = append(r.fo.todo, q) // an error taken while it was being destroyed
	case q.diverted:
		r.fo.kick = append(r.fo.kick, q)
	}
	r.settle()
	heldAt := q.heldEventAt
	q.heldEventAt = time.Time{}
	r.unlockFO()
	r.log.Warn("libibpath: the application's ibv_destroy_qp failed; the QP stays protected as it was", "qpn", qpn, "errno", errno.Error())
	if !heldAt.IsZero() {
		r.onBackupEvent(q.set, q.qp, heldAt) // the peer's notification, say, read meanwhile
	}
}

// dropL2 forgets a QP layer 2 mirrored, destroyed (or let go of) by the
// application: a diverted QP's Conn stops and the backup is released.
func (r *Runtime) dropL2(ctx uintptr, qpn uint32) {
	r.fo.mu.Lock()
	q := r.fo.qps[qpKey{ctx, qpn}]
	if q != nil {
		r.forget(q)
	}
	r.unlockFO()
	if q == nil {
		return
	}
	r.l2mu.Lock()
	defer r.l2mu.Unlock()
	delete(q.set.qps, qpn)
	if err := q.set.sh.DestroyQP(q.qp); err != nil {
		r.log.Warn("libibpath: release the backup of a destroyed QP", "qpn", qpn, "err", err)
	}
}
