package sim

import (
	"github.com/ibpath/ibpath/verbs"
)

// matchPath reports whether a packet arriving at port arr came along path
// pa: the port it arrived on and the source it came from (the SLID on IB,
// the SGID on RoCE) are those of the path.
func matchPath(pa *path, arr *Port, p *packet) bool {
	if pa.port != arr {
		return false
	}
	if arr.hca.linkLayer == verbs.LinkLayerEthernet {
		return pa.ah.GRH.DGID == p.sgid
	}
	if pa.ah.DLID != p.slid {
		return false
	}
	return !pa.ah.IsGlobal || pa.ah.GRH.DGID == p.sgid
}

// acceptPath decides whether q takes a packet, with the BTH MigReq rules
// of the IB spec (as the qib and hfi1 drivers implement them): a sender
// sets MigReq while its QP is MIGRATED. An ARMED QP receiving MigReq on its
// alternate path migrates (the peer moved first); otherwise a packet must
// come along the primary path or it is dropped. A QP in REARM whose
// alternate has loaded becomes ARMED on a MigReq-clear packet on its
// primary path: the peer has re-armed too, so both ends agree.
func (q *QP) acceptPath(p *packet) bool {
	if q.mig == verbs.MigArmed && p.migReq {
		if !q.altValid || !matchPath(&q.alt, p.dst, p) {
			return false
		}
		q.migrate("peer migrated (MigReq on the alternate path)")
		q.raise(verbs.EventPathMig)
		return true
	}
	if !matchPath(&q.prim, p.dst, p) {
		return false
	}
	if q.migPending {
		q.migPending = false
		q.raise(verbs.EventPathMig)
	}
	if q.mig == verbs.MigRearm && q.altLoaded && !p.migReq {
		q.mig = verbs.MigArmed
		f := q.ctx.fab()
		if f.tracer != nil {
			f.trace(q.hca, "apm", "qp %#x ARMED (alternate %v; the peer has re-armed)", q.qpn, q.alt.port)
		}
	}
	return true
}

// migrate makes the alternate path the primary. The old primary stays in
// the QP as a stale alternate that must be loaded again before re-arming.
func (q *QP) migrate(why string) {
	f := q.ctx.fab()
	q.prim, q.alt = q.alt, q.prim
	q.altValid, q.altLoaded = false, false
	q.mig = verbs.MigMigrated
	q.retries = 0
	f.stats.Migrations++
	if f.tracer != nil {
		f.trace(q.hca, "apm", "qp %#x migrated to %v (%s)", q.qpn, q.prim.port, why)
	}
}

// scheduleArm starts loading the alternate path after REARM.
func (q *QP) scheduleArm() {
	f := q.ctx.fab()
	f.schedule(f.cfg.ArmDelay, event{kind: evArm, qp: q, gen: q.incarn})
}

// onArmLoaded finishes loading the alternate after REARM, if its port is
// up (otherwise loading resumes when the port becomes ACTIVE). The QP turns
// ARMED when a packet from the re-armed peer arrives (acceptPath).
func (q *QP) onArmLoaded(gen uint32) {
	if gen != q.incarn || q.mig != verbs.MigRearm || !q.altValid {
		return
	}
	switch q.state {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD:
	default:
		return
	}
	if !q.alt.port.usable() {
		return
	}
	q.altLoaded = true
	f := q.ctx.fab()
	if f.tracer != nil {
		f.trace(q.hca, "apm", "qp %#x alternate %v loaded; ARMED once the peer is re-armed", q.qpn, q.alt.port)
	}
}

// retryExhausted runs when the local ACK timer has fired retry_cnt times.
// An ARMED QP migrates to its alternate and retries there
// (qib_restart_rc, hfi1_restart_rc). When PATH_MIG is raised, and whether
// a failed migration raises PATH_MIG_ERR, depends on the profile: strict
// and rdmavt raise PATH_MIG at once and never PATH_MIG_ERR (the QP
// migrates even onto a dead port and its WRs then exhaust their retries
// there); mlx5 raises PATH_MIG once the peer answers on the new path, and
// PATH_MIG_ERR when the alternate's port is down or the new path gets no
// answer. Then the oldest WR fails with RETRY_EXC_ERR and the QP goes to
// ERR.
func (q *QP) retryExhausted() {
	f := q.ctx.fab()
	head := q.sqHead
	switch {
	case q.migPending:
		q.migPending = false
		q.raise(verbs.EventPathMigErr)
	case q.mig == verbs.MigArmed && q.altValid:
		if f.beh.pathMigErr && !q.alt.port.usable() {
			q.mig = verbs.MigMigrated
			q.altValid, q.altLoaded = false, false
			q.raise(verbs.EventPathMigErr)
			break
		}
		q.migrate("retries exhausted on primary")
		if f.beh.pathMigAtAnswer {
			q.migPending = true
		} else {
			q.raise(verbs.EventPathMig)
		}
		q.rewind(head)
		q.lastProgress = f.now
		q.pump()
		return
	}
	q.enterErr(head, verbs.WCRetryExcErr)
}

// rearmWaiting resumes loading alternates that wait for port p.
func (a *HCA) rearmWaiting(p *Port) {
	for _, q := range a.qpList {
		if q.mig == verbs.MigRearm && q.altValid && q.alt.port == p {
			q.scheduleArm()
		}
	}
}
