package shim

import "github.com/ibpath/ibpath/verbs"

// Rings is what the hot path recorded of one QP when layer 2 diverts it:
// the WRs the provider holds that the application has not seen complete,
// and the counters of the two-way handshake.
type Rings struct {
	// Sends are the outstanding send WRs in posting order (posted to the
	// provider, not retired by a completion the application polled).
	// WRs the provider refused are not among them.
	Sends []verbs.SendWR
	// Inline[i] is the copy of Sends[i]'s inline payload taken at post
	// time (nil unless Sends[i] has verbs.SendInline).
	Inline [][]byte
	// NotifsDone counts the retired send WRs that consume a receive at
	// the peer (SEND, SEND_WITH_IMM, RDMA_WRITE_WITH_IMM).
	NotifsDone uint64
	// Recvs are the outstanding receive WRs in posting order.
	Recvs []verbs.RecvWR
	// RecvsDone counts the receive completions retired so far.
	RecvsDone uint64
	// Unreplayable is non-empty when an outstanding WR was not recorded
	// whole (more SGEs, or more inline bytes, than the ring keeps): a
	// rewind is unsafe and the error must reach the application.
	Unreplayable string
}

// AppQP names one of the application's QPs for the hot path: its
// context, number and CQs (the verbs objects layer 2 also polls).
type AppQP struct {
	Ctx    uintptr
	QPN    uint32
	SendCQ verbs.CQ
	RecvCQ verbs.CQ
}

// Hotpath is the Default-state data path of the shim (hotpath.c in
// cmd/libibpath) as layer 2 drives it. Until a QP is diverted the hot path
// posts and polls it; after, every post to it and every poll of its CQs
// comes to the Runtime (PostSend, PostRecv, PollCQ).
type Hotpath interface {
	// Arm tells the hot path whether layer 2 can take over the QP: when
	// armed, an error completion of the QP polled in the hot path is kept
	// from the application and handed to Runtime.Intercept instead.
	Arm(q AppQP, armed bool)
	// Divert routes the QP's posts and its CQs' polls to the Runtime from
	// now on, waits for the posts and polls already inside the hot path
	// to return, and gives what the QP's rings hold. Called once per QP.
	Divert(q AppQP) (Rings, error)
	// Retire accounts in the hot path's rings for a completion of an
	// undiverted QP that the Runtime polled from a diverted CQ and hands
	// to the application.
	Retire(ctx uintptr, wc verbs.WC)
	// Release gives a CQ back to the hot path: no diverted QP completes
	// into it any more (they were destroyed).
	Release(cq verbs.CQ)
}
