package datapath

import (
	"errors"

	"github.com/ibpath/ibpath/verbs"
)

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
//
// The Runtime calls these methods with its failover lock held: they must
// not call into the Runtime, and what they wait for (Divert waits for the
// hot path's posts and polls in progress) must not include a thread that
// is inside a Runtime call (Intercept, PollCQ, PostSend, PostRecv): the
// hot path leaves its section before calling the Runtime.
type Hotpath interface {
	// Arm tells the hot path whether layer 2 can take over the QP: when
	// armed, an error completion of the QP polled in the hot path is kept
	// from the application and handed to Runtime.Intercept instead. If the
	// QP is still not diverted when Intercept returns (Divert failed), the
	// runtime took nothing: the hot path hands the whole batch to the
	// application as the provider returned it (retiring its successful
	// completions as usual).
	Arm(q AppQP, armed bool)
	// Divert routes the QP's posts and its CQs' polls to the Runtime from
	// now on, waits for the posts and polls already inside the hot path
	// to return, and gives what the QP's rings hold. Called once per QP.
	// An error means nothing was diverted (the runtime then disarms the
	// QP and lets its errors reach the application).
	Divert(q AppQP) (Rings, error)
	// Retire accounts in the hot path's rings for a completion of an
	// undiverted QP that the Runtime polled from a diverted CQ and hands
	// to the application, by the rule of the hot path's own polls (a
	// successful send completion retires up to the next signaled entry, a
	// successful receive completion the oldest receive, an error nothing).
	// A QP the hot path does not know is ignored.
	Retire(ctx uintptr, wc verbs.WC)
	// Release gives a CQ back to the hot path: no diverted QP completes
	// into it any more (they were destroyed) and the application has
	// polled what the Runtime held for it. Called once per CQ, however
	// many diverted QPs completed into it.
	Release(cq verbs.CQ)
}

// Progresser is a hot path that tells how far a QP's sends got
// (hotpath.c): layer 1 learns from it that the peer followed a migration
// (Layer1Options.Progress).
type Progresser interface {
	// Progress gives the count of send WRs posted to q in the hot path
	// and of those retired by successful completions, since the QP was
	// created (both only grow). ok is false for a QP the hot path does
	// not record.
	Progress(q AppQP) (posted, retired uint64, ok bool)
}

// Nudger is a hot path that posts layer 1's nudge (nudge.c in
// cmd/libibpath): a zero-length RDMA WRITE, unsignaled, with wr_id
// crossnic.NudgeWRID, on an application QP right after a migration
// (Layer1Options.Nudge). The QP was created with a send slot for it that
// the application was not told of; its completion (a flush, should the
// QP fail while it is out) never reaches the application: the hot path
// drops it, and so does the runtime for the CQs it polls.
type Nudger interface {
	// Nudge posts the nudge on q. An error wrapping a syscall.Errno says
	// why not: ENOSPC (no slot: not RC, sq_sig_all, SRQ, the device's
	// limit), ENOTSUP (none of its send completions went through the
	// shim's polls: ibv_start_poll), ENOENT (destroyed), EBUSY (layer 2
	// took it over), EALREADY (the previous nudge is still out),
	// ENODATA (no send in flight: nothing waits for a resend); else the
	// provider refused it. Called without the runtime's locks: it takes
	// the QP's send queue lock.
	Nudge(q AppQP) error
}

// Undiverter is a hot path that can take a diverted QP back (divert.c in
// cmd/libibpath): layer 2 switched the QP back to its default path and
// the default QP holds all its WRs again.
type Undiverter interface {
	// Undivert loads q's rings with st (the WRs the default QP holds that
	// the application has not seen complete, in posting order, with
	// their inline copies, and the handshake counters; Unreplayable is
	// empty) and hands q's posts back to the hot path, armed as before.
	// Posts already on their way to the Runtime get ErrHome from
	// PostSend / PostRecv and are dispatched again in the hot path. The
	// QP's CQs stay diverted until Release. An error means nothing
	// changed (q stays diverted). Called with the failover lock held,
	// once per switch back; a QP may be diverted again later.
	Undivert(q AppQP, st Rings) error
}

// Waker is a hot path that delivers completion events (channel.c in
// cmd/libibpath): the kernel signals an application's completion channel
// for its default device only, so the runtime says when the application
// has completions of a diverted QP to poll.
type Waker interface {
	// Wake: the runtime queued completions for the application on cq,
	// or a backup CQ whose completions the express lane hands out on cq
	// has some. An application that requested an event of cq
	// (ibv_req_notify_cq) gets one. Called without the runtime's locks.
	Wake(cq verbs.CQ)
}

// EventGiver is a hot path that can return an async event the runtime
// kept from the application (cmd/libibpath's asyncev.c): the runtime
// gives a kept fatal event back once the failover it was kept for
// surfaces the error, as plain verbs would have shown it.
type EventGiver interface {
	// GiveBack queues ev of QP qpn of context ctx (qpn 0 for
	// DEVICE_FATAL) for the application's next ibv_get_async_event of
	// ctx, and wakes a call blocked there. Called without the runtime's
	// locks.
	GiveBack(ctx uintptr, qpn uint32, ev verbs.EventType) error
}

// ExpressLane is what the hot path's express lane needs to carry a
// diverted QP whose failover settled on the backup.
type ExpressLane struct {
	BackupQP     verbs.QP
	BackupCQ     verbs.CQ
	BackupRecvCQ verbs.CQ // nil: BackupCQ serves both queues
	PeerQPN      uint32   // src_qp of the receive completions
	LKeys        map[uint32]uint32
	// Record, when set, makes the lane keep the QP's shadow rings while
	// it carries it, so that the QP can leave the lane again
	// (ExpressBack) with what its backup QP holds: the rings are loaded
	// with *Record (the WRs outstanding on the backup, the handshake
	// counters) before the lane carries a post; every WR the lane posts
	// on the backup is recorded as the hot path records a post (one the
	// backup refuses is not among them); every successful completion the
	// lane hands the application retires what it stands for (counting
	// NotifsDone and RecvsDone). Nil: the lane is one-way.
	Record *Rings
}

// ExpressStats counts what the express lane did for one QP.
type ExpressStats struct {
	Sends, Recvs uint64 // WRs posted on the backup
	Completions  uint64 // successful backup completions handed to the application
	Hidden       uint64 // default-QP flushes kept from the application
	Misses       uint64 // posts that missed a key and came to the runtime
	Own          uint64 // layer 2's own completions dropped (the peer's control messages, ...)
	Surfaced     bool
}

// Express is the hot path's express lane (express.c in cmd/libibpath):
// the C data path of diverted QPs whose failover settled. Its methods
// are called with the runtime's failover lock held, as Hotpath's.
type Express interface {
	// ExpressOn puts a diverted QP on the lane: its posts go straight
	// to lane.BackupQP with keys translated. Keys it misses come to the
	// runtime's PostSend/PostRecv, which answer ErrExpress once they
	// added them (ExpressKey) or surfaced the QP.
	ExpressOn(q AppQP, lane ExpressLane) error
	// ExpressKey adds a translation (remote: the peer's rkey).
	ExpressKey(q AppQP, remote bool, from, to uint32) error
	// ExpressCQ sets the lane QPs whose backup CQs the polls of cq
	// drain; none takes cq off the lane (its polls come to the runtime
	// again).
	ExpressCQ(cq verbs.CQ, qps []AppQP) error
	// ExpressSurface: the runtime surfaced the QP's error; its posts go
	// to the default QP from now on.
	ExpressSurface(q AppQP)
	// ExpressOff takes the QP off the lane before its backup is
	// destroyed; it returns once no post or poll uses the lane.
	ExpressOff(q AppQP)
	// ExpressBack takes a QP that went on the lane with Record off it,
	// as ExpressOff (its CQs left the lane first: ExpressCQ), and
	// returns its rings: the WRs its backup QP holds that the
	// application has not seen complete, in posting order, and the
	// counters. An error when the QP is not on the lane or was put
	// there without Record.
	ExpressBack(q AppQP) (Rings, error)
	// ExpressStats reads the lane's counters of the QP.
	ExpressStats(q AppQP) ExpressStats
}

// SRQHotpath is a hot path that follows the application's SRQs
// (hotpath.c): it records their receives and retires each by the wr_id
// of its completion.
type SRQHotpath interface {
	// DivertSRQ routes the posts to srq (of the context ctx) to
	// Runtime.PostSRQRecv from now on, waits for the posts and polls
	// inside the hot path, and returns the receives posted to it that no
	// completion retired, oldest first. Called once the QPs on it are
	// diverted (their completions no longer retire in the hot path).
	DivertSRQ(ctx uintptr, srq verbs.SRQ) ([]verbs.RecvWR, error)
}

// ErrExpress is the answer of PostSend, PostRecv and PollCQ for a QP or
// CQ on the express lane: the hot path dispatches the call again, to the
// lane. A post gets it after the runtime added the keys the lane missed,
// or surfaced the QP.
var ErrExpress = errors.New("shim: on the express lane: dispatch again")

// ErrHome is the answer of PostSend and PostRecv for a QP layer 2 gave
// back to the hot path (Undiverter.Undivert) while the post was on its
// way: nothing of it was posted, and the hot path dispatches it again,
// recorded in the QP's rings.
var ErrHome = errors.New("shim: switched back to the hot path: dispatch again")

// Runtime is what the data path calls in the shim's runtime
// (internal/shim.Runtime; cgo exports of cmd/libibpath stand between
// them in the shim). The data path leaves its own section before each
// call.
type Runtime interface {
	// Intercept takes an error completion of an armed QP polled from
	// cq, followed by the rest of its batch (wcs), none of which reached
	// the application; if the QP is not diverted on return, nothing was
	// taken. The QP may have been diverted while the poll was in flight
	// (a divert sets the flag, then waits for the polls inside): its
	// error is then layer 2's all the same.
	Intercept(ctx uintptr, cq verbs.CQ, wcs []verbs.WC)
	// PollCQ polls a diverted CQ for the application (ErrExpress: poll
	// the lane instead).
	PollCQ(cq verbs.CQ, wc []verbs.WC) (int, error)
	// PostSend and PostRecv post to a diverted QP, as ibv_post_send and
	// ibv_post_recv (ErrExpress and ErrHome: dispatch again).
	PostSend(ctx uintptr, qpn uint32, wrs []verbs.SendWR) (int, error)
	PostRecv(ctx uintptr, qpn uint32, wrs []verbs.RecvWR) (int, error)
	// PostSRQRecv posts to a diverted SRQ, as ibv_post_srq_recv.
	PostSRQRecv(srq verbs.SRQ, wrs []verbs.RecvWR) (int, error)
	// ExpressSurfaced reports that a QP on the express lane surfaced its
	// error; wc is the completion that did.
	ExpressSurfaced(ctx uintptr, qpn uint32, wc verbs.WC)
}
