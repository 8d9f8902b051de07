package sim

import (
	"github.com/ibpath/ibpath/verbs"
)

const opModify = "ibv_modify_qp"

// Modify implements ibv_modify_qp: the transition and mask are checked as
// ib_modify_qp_is_ok does, then every value, and only then is anything
// changed, so a failed call leaves the QP as it was.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.destroyed {
		return verbs.Errorf(opModify, verbs.EINVAL, "QP destroyed")
	}
	if err := q.ctx.usable(opModify); err != nil {
		return err
	}
	if attr == nil {
		return verbs.Errorf(opModify, verbs.EINVAL, "nil attributes")
	}
	cur, next := q.state, q.state
	if mask&verbs.QPAttrState != 0 {
		next = attr.QPState
	}
	if mask&verbs.QPAttrCurState != 0 && attr.CurQPState != cur {
		return verbs.Errorf(opModify, verbs.EINVAL, "cur_qp_state %v but QP is %v", attr.CurQPState, cur)
	}
	if err := checkTransition(cur, next, mask); err != nil {
		return err
	}
	np, err := q.checkValues(attr, mask, next)
	if err != nil {
		return err
	}
	q.apply(attr, mask, cur, next, np)
	if f.tracer != nil {
		f.trace(q.hca, "qp", "qp %#x %v -> %v mask %v mig %v", q.qpn, cur, next, mask, q.mig)
	}
	return nil
}

// newPaths is what a Modify would make of the QP's paths.
type newPaths struct {
	prim, alt path
	altValid  bool
	mig       verbs.MigState
	migrate   bool // manual migration requested
	rearm     bool
}

func (q *QP) checkValues(a *verbs.QPAttr, mask verbs.QPAttrMask, next verbs.QPState) (newPaths, error) {
	np := newPaths{prim: q.prim, alt: q.alt, altValid: q.altValid, mig: q.mig}
	h := q.hca
	if mask&verbs.QPAttrPort != 0 {
		p := h.Port(a.PortNum)
		if p == nil {
			return np, verbs.Errorf(opModify, verbs.EINVAL, "port %d invalid on %s", a.PortNum, h.name)
		}
		np.prim.port = p
	}
	if mask&verbs.QPAttrPKeyIndex != 0 && a.PKeyIndex != 0 {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "pkey_index %d out of range (table has 1 entry)", a.PKeyIndex)
	}
	if mask&verbs.QPAttrAccessFlags != 0 &&
		a.QPAccessFlags&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessMWBind) != 0 {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "qp_access_flags %#x invalid", uint32(a.QPAccessFlags))
	}
	if mask&verbs.QPAttrPathMTU != 0 && (a.PathMTU < verbs.MTU256 || a.PathMTU > verbs.MTU4096) {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "path_mtu %d invalid", a.PathMTU)
	}
	if mask&verbs.QPAttrDestQPN != 0 && a.DestQPN > 0xffffff {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "dest_qp_num %#x exceeds 24 bits", a.DestQPN)
	}
	if mask&verbs.QPAttrRQPSN != 0 && a.RQPSN > 0xffffff {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "rq_psn %#x exceeds 24 bits", a.RQPSN)
	}
	if mask&verbs.QPAttrSQPSN != 0 && a.SQPSN > 0xffffff {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "sq_psn %#x exceeds 24 bits", a.SQPSN)
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > maxRdAtom {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "max_dest_rd_atomic %d above device limit %d", a.MaxDestRdAtomic, maxRdAtom)
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 && int(a.MaxRdAtomic) > maxRdAtom {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "max_rd_atomic %d above device limit %d", a.MaxRdAtomic, maxRdAtom)
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "min_rnr_timer %d above 31", a.MinRNRTimer)
	}
	if mask&verbs.QPAttrTimeout != 0 && a.Timeout > 31 {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "timeout %d above 31", a.Timeout)
	}
	if mask&verbs.QPAttrRetryCnt != 0 && a.RetryCnt > 7 {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "retry_cnt %d above 7", a.RetryCnt)
	}
	if mask&verbs.QPAttrRNRRetry != 0 && a.RNRRetry > 7 {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "rnr_retry %d above 7", a.RNRRetry)
	}
	if mask&verbs.QPAttrTimeout != 0 {
		np.prim.timeout = a.Timeout
	}
	if mask&verbs.QPAttrAV != 0 {
		// uverbs modify_qp: the address vector names a valid port; at
		// INIT->RTR the QP's own, elsewhere the one PORT sets with it (AV
		// alone sets PORT from it).
		dp := h.Port(a.AHAttr.PortNum)
		switch {
		case dp == nil:
			return np, verbs.Errorf(opModify, verbs.EINVAL, "ah_attr.port_num %d invalid on %s", a.AHAttr.PortNum, h.name)
		case q.state == verbs.QPSInit && next == verbs.QPSRTR && dp != np.prim.port:
			return np, verbs.Errorf(opModify, verbs.EINVAL, "ah_attr.port_num %d is not the QP's port %v", a.AHAttr.PortNum, np.prim.port)
		case mask&verbs.QPAttrPort != 0 && a.PortNum != a.AHAttr.PortNum:
			return np, verbs.Errorf(opModify, verbs.EINVAL, "ah_attr.port_num %d differs from port_num %d", a.AHAttr.PortNum, a.PortNum)
		case !(q.state == verbs.QPSInit && next == verbs.QPSRTR):
			np.prim.port = dp
		}
		if err := checkAH(np.prim.port, a.AHAttr, "ah_attr"); err != nil {
			return np, err
		}
		np.prim.ah = a.AHAttr
	}
	if mask&verbs.QPAttrAltPath != 0 {
		p := h.Port(a.AltPortNum)
		if p == nil {
			return np, verbs.Errorf(opModify, verbs.EINVAL, "alt_port_num %d invalid on %s", a.AltPortNum, h.name)
		}
		if h.linkLayer != verbs.LinkLayerInfiniBand {
			// ib_core: "can only handle alternate paths and APM for IB".
			return np, verbs.Errorf(opModify, verbs.EINVAL, "alternate paths and APM are only supported on InfiniBand")
		}
		if !h.apm {
			return np, verbs.Errorf(opModify, verbs.EINVAL, "%s lacks IBV_DEVICE_AUTO_PATH_MIG", h.name)
		}
		if a.AltAHAttr.PortNum != a.AltPortNum {
			// uverbs modify_qp: alt_port_num == alt_ah_attr.port_num.
			return np, verbs.Errorf(opModify, verbs.EINVAL, "alt_ah_attr.port_num %d differs from alt_port_num %d", a.AltAHAttr.PortNum, a.AltPortNum)
		}
		if a.AltPKeyIndex != 0 {
			return np, verbs.Errorf(opModify, verbs.EINVAL, "alt_pkey_index %d out of range", a.AltPKeyIndex)
		}
		if a.AltTimeout > 31 {
			return np, verbs.Errorf(opModify, verbs.EINVAL, "alt_timeout %d above 31", a.AltTimeout)
		}
		if err := checkAH(p, a.AltAHAttr, "alt_ah_attr"); err != nil {
			return np, err
		}
		if q.mig == verbs.MigArmed && !q.ctx.fab().beh.altWhileArmed {
			// The alternate of an ARMED QP is what the HCA would migrate
			// to: it may change only in MIGRATED or REARM (profile strict).
			return np, verbs.Errorf(opModify, verbs.EINVAL, "alternate path cannot be loaded while the QP is ARMED")
		}
		np.alt = path{port: p, ah: a.AltAHAttr, pkeyIndex: a.AltPKeyIndex, timeout: a.AltTimeout}
		np.altValid = true
	}
	if mask&verbs.QPAttrPathMigState != 0 {
		switch a.PathMigState {
		case verbs.MigRearm:
			// rvt_modify_qp: REARM never on an ARMED QP, and only into
			// RTS; strict takes it only from MIGRATED.
			switch {
			case next != verbs.QPSRTS:
				return np, verbs.Errorf(opModify, verbs.EINVAL, "REARM is set only with the QP going to RTS (it goes to %v)", next)
			case q.mig == verbs.MigArmed:
				return np, verbs.Errorf(opModify, verbs.EINVAL, "REARM on an ARMED QP (REARM follows a migration)")
			case q.mig == verbs.MigRearm && !q.ctx.fab().beh.rearmFromRearm:
				return np, verbs.Errorf(opModify, verbs.EINVAL, "REARM on a QP already in REARM (only MIGRATED may be re-armed)")
			case !np.altValid:
				return np, verbs.Errorf(opModify, verbs.EINVAL, "REARM without an alternate path loaded")
			}
			np.mig = verbs.MigRearm
			np.rearm = true
		case verbs.MigMigrated:
			// rvt_modify_qp: MIGRATED never from REARM, and only into RTS
			// or SQD; on an ARMED QP it migrates.
			switch {
			case next != verbs.QPSRTS && next != verbs.QPSSQD:
				return np, verbs.Errorf(opModify, verbs.EINVAL, "MIGRATED is set only with the QP going to RTS or SQD (it goes to %v)", next)
			case q.mig == verbs.MigMigrated:
				np.mig = verbs.MigMigrated // stays MIGRATED; a loaded alternate is not armed
			case q.mig == verbs.MigArmed && mask&verbs.QPAttrAltPath == 0:
				np.migrate = true // manual migration
				np.prim, np.alt = np.alt, np.prim
				np.altValid = false
				np.mig = verbs.MigMigrated
			default:
				return np, verbs.Errorf(opModify, verbs.EINVAL, "migration requires the QP to be ARMED with no new alternate in the same call (it is %v)", q.mig)
			}
		default:
			return np, verbs.Errorf(opModify, verbs.EINVAL, "path_mig_state %v cannot be set (ARMED is reached by the HCA)", a.PathMigState)
		}
	}
	if next == verbs.QPSRTR && np.prim.port == nil {
		return np, verbs.Errorf(opModify, verbs.EINVAL, "no port set")
	}
	return np, nil
}

// checkAH validates an address vector for a path leaving port p.
func checkAH(p *Port, ah verbs.AHAttr, what string) error {
	if p == nil {
		return verbs.Errorf(opModify, verbs.EINVAL, "%s given before the QP has a port", what)
	}
	if p.hca.linkLayer == verbs.LinkLayerEthernet && !ah.IsGlobal {
		return verbs.Errorf(opModify, verbs.EINVAL, "%s: RoCE requires a global route (is_global)", what)
	}
	if ah.IsGlobal && int(ah.GRH.SGIDIndex) >= len(p.gids) {
		return verbs.Errorf(opModify, verbs.EINVAL, "%s: sgid_index %d beyond GID table of %v", what, ah.GRH.SGIDIndex, p)
	}
	if p.hca.linkLayer == verbs.LinkLayerInfiniBand && ah.SrcPathBits >= 1<<p.lmc {
		return verbs.Errorf(opModify, verbs.EINVAL, "%s: src_path_bits %d beyond LMC %d of %v", what, ah.SrcPathBits, p.lmc, p)
	}
	if ah.SL > 15 {
		return verbs.Errorf(opModify, verbs.EINVAL, "%s: sl %d above 15", what, ah.SL)
	}
	return nil
}

func (q *QP) apply(a *verbs.QPAttr, mask verbs.QPAttrMask, cur, next verbs.QPState, np newPaths) {
	switch next {
	case verbs.QPSReset:
		q.reset()
		return
	case verbs.QPSErr:
		if cur != verbs.QPSErr {
			q.enterErr(^uint64(0), verbs.WCWRFlushErr)
		}
		return
	}
	s := &q.attr
	if mask&verbs.QPAttrAccessFlags != 0 {
		s.QPAccessFlags = a.QPAccessFlags
	}
	if mask&verbs.QPAttrPathMTU != 0 {
		s.PathMTU = a.PathMTU
	}
	if mask&verbs.QPAttrDestQPN != 0 {
		s.DestQPN = a.DestQPN
	}
	if mask&verbs.QPAttrRQPSN != 0 {
		s.RQPSN = a.RQPSN
		q.ePSN = a.RQPSN
	}
	if mask&verbs.QPAttrSQPSN != 0 {
		s.SQPSN = a.SQPSN
		q.nextPSN = a.SQPSN
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 {
		s.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 {
		s.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 {
		s.MinRNRTimer = a.MinRNRTimer
	}
	if mask&verbs.QPAttrRetryCnt != 0 {
		s.RetryCnt = a.RetryCnt
	}
	if mask&verbs.QPAttrRNRRetry != 0 {
		s.RNRRetry = a.RNRRetry
	}
	if mask&verbs.QPAttrEnSQDAsyncNotify != 0 {
		s.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if mask&verbs.QPAttrAltPath != 0 || np.migrate || np.mig != verbs.MigRearm {
		q.altLoaded = false // a new alternate, or none armed: load again
	}
	q.prim, q.alt, q.altValid, q.mig = np.prim, np.alt, np.altValid, np.mig
	q.state = next
	if np.migrate {
		q.ctx.fab().stats.Migrations++
		q.raise(verbs.EventPathMig)
		q.retries = 0
	}
	if np.rearm || (mask&verbs.QPAttrAltPath != 0 && q.mig == verbs.MigRearm) {
		q.scheduleArm()
	}
	switch {
	case cur == verbs.QPSRTS && next == verbs.QPSSQD:
		q.draining = true
		q.checkDrained()
	case next == verbs.QPSRTS:
		q.draining = false
		q.pump()
	}
}
