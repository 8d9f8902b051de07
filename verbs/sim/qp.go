package sim

import (
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// path is one of a QP's two paths (primary or alternate).
type path struct {
	port      *Port
	ah        verbs.AHAttr
	pkeyIndex uint16
	timeout   uint8
}

// sendWQE is one slot of the send queue. Its slices are allocated once at
// QP creation, so posting allocates nothing.
type sendWQE struct {
	wrid     uint64
	op       verbs.WROpcode
	flags    verbs.SendFlags
	imm      uint32
	raddr    uint64
	rkey     uint32
	cmp      uint64
	swap     uint64
	sges     []verbs.SGE
	inline   []byte
	isInline bool
	length   uint32
	local    [][]byte // resolved local memory of sges
	psn      uint32
	npkts    uint32
	sent     bool
	done     bool // the READ/atomic response arrived
	signaled bool
}

type recvWQE struct {
	wrid uint64
	sges []verbs.SGE
}

// recvRing is a queue of receive WQEs, consumed in the order posted: a
// QP's own receive queue, or an SRQ's, which every QP on it consumes.
type recvRing struct {
	wqe  []recvWQE
	mask uint64
	head uint64
	tail uint64
}

func newRecvRing(n, maxSGE int) *recvRing {
	r := &recvRing{wqe: make([]recvWQE, n), mask: uint64(n - 1)}
	for i := range r.wqe {
		r.wqe[i].sges = make([]verbs.SGE, 0, maxSGE)
	}
	return r
}

func (r *recvRing) len() int    { return int(r.tail - r.head) }
func (r *recvRing) empty() bool { return r.head == r.tail }
func (r *recvRing) full() bool  { return r.tail-r.head >= uint64(len(r.wqe)) }

// front is the next WQE a message consumes (the ring must not be empty).
func (r *recvRing) front() *recvWQE { return &r.wqe[r.head&r.mask] }

func (r *recvRing) push(wr *verbs.RecvWR) {
	w := &r.wqe[r.tail&r.mask]
	w.wrid = wr.WRID
	w.sges = append(w.sges[:0], wr.SGList...)
	r.tail++
}

type atomicEntry struct {
	psn   uint32
	orig  uint64
	valid bool
}

// QP is a simulated RC queue pair. It implements verbs.QP.
type QP struct {
	pd       *PD
	ctx      *Context
	hca      *HCA
	qpn      uint32
	sendCQ   *CQ
	recvCQ   *CQ
	cap      verbs.QPCap
	sqSigAll bool
	userCtx  any

	state    verbs.QPState
	attr     verbs.QPAttr // attributes as last set, for Query
	prim     path
	alt      path
	altValid bool
	// altLoaded: the alternate finished loading after REARM; ARMED follows
	// on a MigReq-clear packet from the peer.
	altLoaded bool
	mig       verbs.MigState
	// migPending: the HCA migrated on its own and waits for the first
	// packet on the new path before reporting PATH_MIG.
	migPending bool
	incarn     uint32 // bumped by reset and destroy; stale timers are ignored
	// resets counts the QP's modifies to RESET and its destruction: a
	// request sent before the last of them is of an earlier connection
	// (staleExec).
	resets uint32
	// resetAt is when the current incarnation began: the last modify to
	// RESET, or the QP's creation (staleExec)
	resetAt time.Duration

	// requester
	sq           []sendWQE
	sqMask       uint64
	sqHead       uint64 // oldest WQE not completed
	sqNext       uint64 // next WQE to transmit
	sqTail       uint64 // next free slot
	sqHigh       uint64 // one past the highest WQE ever transmitted
	nextPSN      uint32
	rdInFlight   int
	retries      int
	rnrRetries   int
	lastProgress time.Duration
	timerArmed   bool
	rnrWait      bool
	draining     bool

	// responder
	rq          *recvRing // the QP's own, or its SRQ's
	srq         *SRQ
	ePSN        uint32
	nakSent     bool
	atomicCache [maxRdAtom]atomicEntry
	atomicNext  int
	commEst     bool

	eventsUnacked int
	destroyed     bool
	// portWait: the QP is among its port's waiters (arbitrate.go).
	portWait bool
}

var _ verbs.QP = (*QP)(nil)

func pow2(n int) int {
	s := 1
	for s < n {
		s <<= 1
	}
	return s
}

// CreateQP implements ibv_create_qp for RC QPs.
func (pd *PD) CreateQP(init verbs.QPInitAttr) (verbs.QP, error) {
	c := pd.ctx
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	const op = "ibv_create_qp"
	if err := c.usable(op); err != nil {
		return nil, err
	}
	if pd.freed {
		return nil, verbs.Errorf(op, verbs.EINVAL, "PD deallocated")
	}
	if init.QPType != verbs.QPTRC {
		return nil, verbs.Errorf(op, verbs.EOPNOTSUPP, "QP type %v not modelled (RC only)", init.QPType)
	}
	scq, ok1 := init.SendCQ.(*CQ)
	rcq, ok2 := init.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, verbs.Errorf(op, verbs.EINVAL, "send and receive CQs are required")
	}
	if scq.ctx.hca != c.hca || rcq.ctx.hca != c.hca || scq.destroyed || rcq.destroyed {
		return nil, verbs.Errorf(op, verbs.EINVAL, "CQ of another device or destroyed")
	}
	var srq *SRQ
	if init.SRQ != nil {
		s, ok := init.SRQ.(*SRQ)
		if !ok || s == nil || s.hca != c.hca || s.destroyed {
			return nil, verbs.Errorf(op, verbs.EINVAL, "SRQ of another device or destroyed")
		}
		srq = s
		// max_recv_wr and max_recv_sge are ignored on an SRQ (ibv_create_qp(3))
		init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = 0, 0
	}
	cp := init.Cap
	switch {
	case cp.MaxSendWR < 0 || cp.MaxSendWR > maxQPWR || cp.MaxRecvWR < 0 || cp.MaxRecvWR > maxQPWR:
		return nil, verbs.Errorf(op, verbs.EINVAL, "max_send_wr %d / max_recv_wr %d out of range 0..%d", cp.MaxSendWR, cp.MaxRecvWR, maxQPWR)
	case cp.MaxSendSGE < 0 || cp.MaxSendSGE > maxSGE || cp.MaxRecvSGE < 0 || cp.MaxRecvSGE > maxSGE:
		return nil, verbs.Errorf(op, verbs.EINVAL, "max_send_sge %d / max_recv_sge %d out of range 0..%d", cp.MaxSendSGE, cp.MaxRecvSGE, maxSGE)
	case cp.MaxInlineData < 0 || cp.MaxInlineData > maxInline:
		return nil, verbs.Errorf(op, verbs.EINVAL, "max_inline_data %d out of range 0..%d", cp.MaxInlineData, maxInline)
	case len(c.hca.qps) >= maxQPs:
		return nil, verbs.Errorf(op, verbs.ENOMEM, "device QP limit %d reached", maxQPs)
	}
	cp.MaxSendWR = pow2(max(cp.MaxSendWR, 1))
	cp.MaxRecvWR = pow2(max(cp.MaxRecvWR, 1))
	cp.MaxSendSGE = max(cp.MaxSendSGE, 1)
	cp.MaxRecvSGE = max(cp.MaxRecvSGE, 1)
	if srq != nil {
		cp.MaxRecvWR, cp.MaxRecvSGE = 0, 0
	}
	q := &QP{
		pd: pd, ctx: c, hca: c.hca, sendCQ: scq, recvCQ: rcq, cap: cp,
		sqSigAll: init.SQSigAll, userCtx: init.UserCtx, state: verbs.QPSReset, mig: verbs.MigMigrated,
		sq: make([]sendWQE, cp.MaxSendWR), sqMask: uint64(cp.MaxSendWR - 1), resetAt: c.fab().now,
	}
	for i := range q.sq {
		q.sq[i].sges = make([]verbs.SGE, 0, cp.MaxSendSGE)
		q.sq[i].local = make([][]byte, 0, cp.MaxSendSGE)
		if cp.MaxInlineData > 0 {
			q.sq[i].inline = make([]byte, 0, cp.MaxInlineData)
		}
	}
	if srq != nil {
		q.srq, q.rq = srq, srq.rq
		srq.nQP++
	} else {
		q.rq = newRecvRing(cp.MaxRecvWR, cp.MaxRecvSGE)
	}
	a := c.hca
	for a.qps[a.nextQPN&0xffffff] != nil || a.nextQPN&0xffffff < 0x100 {
		a.nextQPN++
	}
	q.qpn = a.nextQPN & 0xffffff
	a.nextQPN++
	a.qps[q.qpn] = q
	a.qpList = append(a.qpList, q)
	scq.nQP++
	rcq.nQP++
	pd.nQP++
	return q, nil
}

// PD returns the protection domain.
func (q *QP) PD() verbs.PD { return q.pd }

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.qpn }

// HCA returns the adapter the QP lives on.
func (q *QP) HCA() *HCA { return q.hca }

// State returns the current QP state.
func (q *QP) State() verbs.QPState {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	return q.state
}

// MigState returns the path-migration state.
func (q *QP) MigState() verbs.MigState {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	return q.mig
}

// Outstanding reports how many send and receive WRs are posted and not yet
// completed.
func (q *QP) Outstanding() (send, recv int) {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.srq != nil {
		return int(q.sqTail - q.sqHead), 0
	}
	return int(q.sqTail - q.sqHead), q.rq.len()
}

// Query implements ibv_query_qp. All attributes are returned whatever the
// mask, as most providers do.
func (q *QP) Query(mask verbs.QPAttrMask) (verbs.QPAttr, verbs.QPInitAttr, error) {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.destroyed {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, verbs.Errorf("ibv_query_qp", verbs.EINVAL, "QP destroyed")
	}
	if err := q.ctx.usable("ibv_query_qp"); err != nil {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, err
	}
	a := q.attr
	a.QPState = q.state
	a.CurQPState = q.state
	// The live PSNs, as the drivers report them: the next PSN the
	// responder expects and the next a new request takes (rule 97).
	a.RQPSN, a.SQPSN = q.ePSN, q.nextPSN
	a.PathMigState = q.mig
	a.Cap = q.cap
	a.SQDraining = q.state == verbs.QPSSQD && q.draining
	if q.prim.port != nil {
		a.PortNum = q.prim.port.num
		a.AHAttr = q.prim.ah
		a.PKeyIndex = q.prim.pkeyIndex
		a.Timeout = q.prim.timeout
	}
	if q.alt.port != nil {
		a.AltPortNum = q.alt.port.num
		a.AltAHAttr = q.alt.ah
		a.AltPKeyIndex = q.alt.pkeyIndex
		a.AltTimeout = q.alt.timeout
	}
	init := verbs.QPInitAttr{SendCQ: q.sendCQ, RecvCQ: q.recvCQ, Cap: q.cap, QPType: verbs.QPTRC,
		SQSigAll: q.sqSigAll, UserCtx: q.userCtx}
	if q.srq != nil {
		init.SRQ = q.srq
	}
	return a, init, nil
}

// Destroy implements ibv_destroy_qp. Outstanding WRs are discarded without
// completions. It fails with EBUSY while async events on the QP are
// unacknowledged (where libibverbs would block forever).
func (q *QP) Destroy() error {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.destroyed {
		return verbs.Errorf("ibv_destroy_qp", verbs.EINVAL, "already destroyed")
	}
	if q.eventsUnacked > 0 {
		return verbs.Errorf("ibv_destroy_qp", verbs.EBUSY, "%d async events not acknowledged", q.eventsUnacked)
	}
	q.destroyLocked()
	return nil
}

// destroyLocked destroys q; the fabric's lock is held.
func (q *QP) destroyLocked() {
	f := q.ctx.fab()
	f.detachInflight(q)
	q.destroyed = true
	q.incarn++
	q.resets++
	q.state = verbs.QPSReset
	a := q.hca
	delete(a.qps, q.qpn)
	for i, x := range a.qpList {
		if x == q {
			a.qpList = append(a.qpList[:i], a.qpList[i+1:]...)
			break
		}
	}
	q.sendCQ.nQP--
	q.recvCQ.nQP--
	q.pd.nQP--
	if q.srq != nil {
		q.srq.nQP--
	}
}

// reset discards all queue contents without completions (modify to RESET).
func (q *QP) reset() {
	f := q.ctx.fab()
	f.detachInflight(q)
	q.incarn++
	q.resets++
	q.resetAt = f.now
	q.state = verbs.QPSReset
	q.attr = verbs.QPAttr{}
	q.prim, q.alt = path{}, path{}
	q.altValid, q.altLoaded, q.migPending = false, false, false
	q.mig = verbs.MigMigrated
	q.sqHead, q.sqNext, q.sqTail, q.sqHigh = 0, 0, 0, 0
	if q.srq == nil {
		q.rq.head, q.rq.tail = 0, 0
	}
	q.nextPSN, q.ePSN = 0, 0
	q.rdInFlight, q.retries, q.rnrRetries = 0, 0, 0
	q.timerArmed, q.rnrWait, q.draining, q.nakSent, q.commEst = false, false, false, false, false
	q.atomicCache = [maxRdAtom]atomicEntry{}
}

// enterErr moves the QP to ERR: the WQE at errIdx (if in the queue) completes
// with status, every other outstanding send WR and every receive WR with
// WR_FLUSH_ERR, in order. Completions with an error are always generated.
func (q *QP) enterErr(errIdx uint64, status verbs.WCStatus) {
	if q.state == verbs.QPSErr {
		return
	}
	f := q.ctx.fab()
	if f.tracer != nil {
		f.trace(q.hca, "qp", "qp %#x -> ERR (%v)", q.qpn, status)
	}
	q.state = verbs.QPSErr
	q.rnrWait, q.timerArmed, q.migPending = false, false, false
	q.incarn++
	for i := q.sqHead; i < q.sqTail; i++ {
		st := verbs.WCWRFlushErr
		if i == errIdx {
			st = status
		}
		q.sendCQ.push(verbs.WC{WRID: q.sq[i&q.sqMask].wrid, Status: st, QPNum: q.qpn}, false)
	}
	q.sqHead, q.sqNext, q.sqHigh = q.sqTail, q.sqTail, q.sqTail
	q.flushRecv()
}

// die stops a QP of a device that died without flushing it: the
// outstanding WRs never complete, as on a ConnectX whose user CQs get no
// completion after a fatal error (profiles strict and mlx5).
func (q *QP) die() {
	if q.state == verbs.QPSErr {
		return
	}
	f := q.ctx.fab()
	if f.tracer != nil {
		f.trace(q.hca, "qp", "qp %#x -> ERR (device fatal, no flush)", q.qpn)
	}
	q.state = verbs.QPSErr
	q.rnrWait, q.timerArmed, q.migPending = false, false, false
	q.incarn++
	q.sqHead, q.sqNext, q.sqHigh = q.sqTail, q.sqTail, q.sqTail
	if q.srq == nil {
		q.rq.head = q.rq.tail
	}
}

// flushRecv completes the QP's receive WRs with WR_FLUSH_ERR. A QP on an
// SRQ flushes nothing (the SRQ's WQEs stay for its other QPs) and raises
// QP_LAST_WQE_REACHED instead: it will consume no more of them (rule 98).
func (q *QP) flushRecv() {
	if q.srq != nil {
		q.raise(verbs.EventQPLastWQEReached)
		return
	}
	r := q.rq
	for i := r.head; i < r.tail; i++ {
		q.recvCQ.push(verbs.WC{WRID: r.wqe[i&r.mask].wrid, Status: verbs.WCWRFlushErr, QPNum: q.qpn}, false)
	}
	r.head = r.tail
}

// raise queues a QP async event on the QP's context.
func (q *QP) raise(t verbs.EventType) {
	q.ctx.raise(verbs.AsyncEvent{Type: t, QP: q})
}
