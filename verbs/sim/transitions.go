package sim

import "github.com/ibpath/ibpath/verbs"

// rcRule is one allowed RC state change: the attribute bits an
// ibv_modify_qp call must carry and those it may carry, besides
// verbs.QPAttrState.
type rcRule struct {
	valid    bool
	required verbs.QPAttrMask
	optional verbs.QPAttrMask
}

// rcTable is qp_state_table of the Linux kernel (drivers/infiniband/core/
// verbs.c) restricted to IB_QPT_RC, indexed [cur][next]. States past ERR
// (UNKNOWN) are never valid, so the table stops at ERR. The kernel also
// marks SQE -> RTS valid, but only with UC/UD parameters; an RC QP never
// enters SQE, so that entry is left invalid here.
var rcTable = [verbs.QPSErr + 1][verbs.QPSErr + 1]rcRule{
	verbs.QPSReset: {
		verbs.QPSReset: {valid: true},
		verbs.QPSInit: {valid: true,
			required: verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		verbs.QPSErr: {valid: true},
	},
	verbs.QPSInit: {
		verbs.QPSReset: {valid: true},
		verbs.QPSInit: {valid: true,
			optional: verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		verbs.QPSRTR: {valid: true,
			required: verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
				verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer,
			optional: verbs.QPAttrAltPath | verbs.QPAttrAccessFlags | verbs.QPAttrPKeyIndex},
		verbs.QPSErr: {valid: true},
	},
	verbs.QPSRTR: {
		verbs.QPSReset: {valid: true},
		verbs.QPSRTS: {valid: true,
			required: verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
				verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic,
			optional: verbs.QPAttrCurState | verbs.QPAttrAltPath | verbs.QPAttrAccessFlags |
				verbs.QPAttrMinRNRTimer | verbs.QPAttrPathMigState},
		verbs.QPSErr: {valid: true},
	},
	verbs.QPSRTS: {
		verbs.QPSReset: {valid: true},
		verbs.QPSRTS: {valid: true,
			optional: verbs.QPAttrCurState | verbs.QPAttrAccessFlags | verbs.QPAttrAltPath |
				verbs.QPAttrPathMigState | verbs.QPAttrMinRNRTimer},
		verbs.QPSSQD: {valid: true, optional: verbs.QPAttrEnSQDAsyncNotify},
		verbs.QPSErr: {valid: true},
	},
	verbs.QPSSQD: {
		verbs.QPSReset: {valid: true},
		verbs.QPSRTS: {valid: true,
			optional: verbs.QPAttrCurState | verbs.QPAttrAccessFlags | verbs.QPAttrAltPath |
				verbs.QPAttrPathMigState | verbs.QPAttrMinRNRTimer},
		verbs.QPSSQD: {valid: true,
			optional: verbs.QPAttrPKeyIndex | verbs.QPAttrAV | verbs.QPAttrTimeout |
				verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrPort | verbs.QPAttrAltPath |
				verbs.QPAttrAccessFlags | verbs.QPAttrPathMigState | verbs.QPAttrMinRNRTimer},
		verbs.QPSErr: {valid: true},
	},
	verbs.QPSSQE: {
		verbs.QPSReset: {valid: true},
		verbs.QPSErr:   {valid: true},
	},
	verbs.QPSErr: {
		verbs.QPSReset: {valid: true},
		verbs.QPSErr:   {valid: true},
	},
}

// checkTransition validates the state change and attribute mask of an
// ibv_modify_qp call on an RC QP, with the rules of the Linux kernel's
// ib_modify_qp_is_ok (drivers/infiniband/core/verbs.c, qp_state_table) for IB_QPT_RC.
// mask always includes verbs.QPAttrState when next != cur is requested; a call without
// QPAttrState is a same-state modify (cur -> cur).
func checkTransition(cur, next verbs.QPState, mask verbs.QPAttrMask) error {
	if mask&verbs.QPAttrState == 0 {
		next = cur
	}
	if cur > verbs.QPSErr || next > verbs.QPSErr || !rcTable[cur][next].valid {
		return verbs.Errorf("ibv_modify_qp", verbs.EINVAL,
			"invalid transition %v -> %v for RC QP", cur, next)
	}
	r := &rcTable[cur][next]
	if missing := r.required &^ mask; missing != 0 {
		return verbs.Errorf("ibv_modify_qp", verbs.EINVAL,
			"%v -> %v requires %v: missing %v", cur, next, r.required, missing)
	}
	if extra := mask &^ (r.required | r.optional | verbs.QPAttrState); extra != 0 {
		return verbs.Errorf("ibv_modify_qp", verbs.EINVAL,
			"%v -> %v does not allow %v", cur, next, extra)
	}
	return nil
}
