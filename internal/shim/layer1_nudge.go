package shim

import (
	"errors"
	"syscall"

	"github.com/ibpath/ibpath/verbs"
)

// After a migration, the WRs that were in flight on the dead path are
// resent by the HCA only at its next local ACK timeout (67 ms at timeout
// 14), unless a later packet of the QP reaches the peer on the new path:
// the peer then follows (MigReq) and answers the gap with a sequence NAK,
// and the HCA resends at once. A program waiting for those WRs posts
// nothing, so layer 1 posts that packet itself: the nudge, a zero-length
// RDMA WRITE, unsignaled, through the data path (Layer1Options.Nudge, the
// hot path's Nudger), right after each migration it made
// (apm.Config.Nudge). The manager asks for it under layer 1's lock; the
// data path takes the QP's send queue lock, so the nudge is queued with
// the hooks and posted by deliver, without layer 1's lock.

// NudgeStats counts layer 1's nudges.
type NudgeStats struct {
	Posted  int // posted on the QP
	Idle    int // not needed: no send of the application's in flight
	Skipped int // not posted for a reason of the QP's (no slot, previous nudge out, taken over, destroyed)
	Failed  int // the data path or the provider refused it
}

// l1Nudge is one nudge waiting to be posted.
type l1Nudge struct {
	k   l1Key
	ctx verbs.Context
	qp  verbs.QP
}

// queueNudge is the manager's Config.Nudge: it queues the nudge for
// deliver. Called under l.mu.
func (l *Layer1) queueNudge(qp verbs.QP) error {
	st, ok := l.mgr.QPStatus(qp)
	if !ok {
		return errors.New("layer 1 does not know the QP")
	}
	k := l1Key{st.Device, qp.QPN()}
	q := l.qps[k]
	if q == nil {
		return errors.New("layer 1 does not know the QP")
	}
	l.enqueue(l1Notice{nudge: &l1Nudge{k: k, ctx: q.ctx, qp: q.qp}})
	return nil
}

// nudge posts one queued nudge (deliver, without l.mu) and counts it.
func (l *Layer1) nudge(n l1Nudge) {
	err := l.hooks.Nudge(n.ctx, n.qp)
	l.nmu.Lock()
	switch {
	case err == nil:
		l.nudges.Posted++
	case errors.Is(err, syscall.ENODATA):
		l.nudges.Idle++
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.ENOTSUP), errors.Is(err, syscall.EALREADY),
		errors.Is(err, syscall.EBUSY), errors.Is(err, syscall.ENOENT):
		l.nudges.Skipped++
	default:
		l.nudges.Failed++
	}
	l.nmu.Unlock()
	switch {
	case err == nil:
		l.log.Debug("libibpath: layer 1 nudged the QP after its migration", "device", n.k.dev, "qpn", n.k.qpn)
	case errors.Is(err, syscall.ENODATA):
	default:
		l.log.Info("libibpath: layer 1 did not nudge the QP after its migration; WRs in flight wait for the local ACK timeout",
			"device", n.k.dev, "qpn", n.k.qpn, "err", err)
	}
}

// NudgeStats returns the counts of layer 1's nudges.
func (l *Layer1) NudgeStats() NudgeStats {
	l.nmu.Lock()
	defer l.nmu.Unlock()
	return l.nudges
}
