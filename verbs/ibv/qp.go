//go:build linux && cgo

package ibv

/*
#include "helpers.h"
#include <string.h>
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// QP is a queue pair (struct ibv_qp). It implements verbs.QP. PostSend and
// PostRecv are each serialised per QP (each direction has its own C
// scratch array and mutex, so one sender and one receiver run in
// parallel); the other methods are safe for concurrent use as far as
// libibverbs allows (Modify and Query are not serialised here).
type QP struct {
	c       *C.struct_ibv_qp
	qpn     uint32
	ctx     *Context
	pd      *PD
	userCtx any
	// app: the QP was created by someone else (wrapped: the
	// application's, under the shim). Its struct ibv_qp's state field is
	// the application's: programs read it (UCX asserts RTS on every
	// post), and libibverbs sets it in every ibv_modify_qp and
	// ibv_query_qp, so this package's own calls leave it as they found it.
	app bool

	smu, rmu sync.Mutex
	sbuf     *C.struct_ibp_scratch // send direction, guarded by smu
	rbuf     *C.struct_ibp_scratch // receive direction, guarded by rmu
}

var _ verbs.QP = (*QP)(nil)

// CreateQP implements ibv_create_qp. The CQs must be *CQ of the same
// device. init.UserCtx stays on the Go side (qp_context is NULL).
func (pd *PD) CreateQP(init verbs.QPInitAttr) (verbs.QP, error) {
	const op = "ibv_create_qp"
	var a C.struct_ibv_qp_init_attr
	scq, ok1 := init.SendCQ.(*CQ)
	rcq, ok2 := init.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, verbs.Errorf(op, verbs.EINVAL, "send and receive CQs must be ibv CQs (got %T, %T)", init.SendCQ, init.RecvCQ)
	}
	a.send_cq, a.recv_cq = scq.c, rcq.c
	if init.SRQ != nil {
		srq, ok := init.SRQ.(*SRQ)
		if !ok || srq == nil {
			return nil, verbs.Errorf(op, verbs.EINVAL, "the SRQ must be an ibv SRQ (got %T)", init.SRQ)
		}
		a.srq = srq.c
	}
	a.cap = capToC(init.Cap)
	a.qp_type = C.enum_ibv_qp_type(init.QPType)
	if init.SQSigAll {
		a.sq_sig_all = 1
	}
	q, err := C.ibv_create_qp(pd.c, &a)
	if q == nil {
		return nil, nullErr(op, err, "%v QP on %s, cap %+v", init.QPType, pd.ctx.info.Name, init.Cap)
	}
	qp, err := pd.ctx.wrapQP(unsafe.Pointer(q))
	if err != nil {
		C.ibv_destroy_qp(q)
		return nil, err
	}
	qp.userCtx, qp.app = init.UserCtx, false
	return qp, nil
}

// WrapQP wraps a struct ibv_qp* created by someone else on ctx; its PD and
// CQs are wrapped too. Wrapping the same pointer twice returns the same
// *QP. It fails only when the C scratch arrays cannot be allocated.
func WrapQP(ctx *Context, p unsafe.Pointer) (*QP, error) { return ctx.wrapQP(p) }

func (x *Context) wrapQP(p unsafe.Pointer) (*QP, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	c := (*C.struct_ibv_qp)(p)
	if qp, ok := x.qps[p]; ok {
		if qp.qpn == uint32(c.qp_num) {
			return qp, nil
		}
		// a QP destroyed without ReleaseQPAt, and a new one at its
		// address: the wrapper (its QPN, its scratch) is the old one's
		delete(x.qps, p)
		C.ibp_scratch_free(qp.sbuf)
		C.ibp_scratch_free(qp.rbuf)
		qp.sbuf, qp.rbuf = nil, nil
	}
	qp := &QP{c: c, qpn: uint32(c.qp_num), ctx: x, pd: x.wrapPDLocked(unsafe.Pointer(c.pd)), app: true}
	if c.send_cq != nil {
		x.wrapCQLocked(unsafe.Pointer(c.send_cq))
	}
	if c.recv_cq != nil {
		x.wrapCQLocked(unsafe.Pointer(c.recv_cq))
	}
	qp.sbuf, qp.rbuf = C.ibp_scratch_new(), C.ibp_scratch_new()
	if qp.sbuf == nil || qp.rbuf == nil {
		C.ibp_scratch_free(qp.sbuf)
		C.ibp_scratch_free(qp.rbuf)
		return nil, verbs.Errorf("ibv_create_qp", verbs.ENOMEM, "work request scratch for QP %#x", uint32(c.qp_num))
	}
	x.qps[p] = qp
	return qp, nil
}

// qpFor maps a QP pointer named by an async event to its wrapper. A QP
// never seen before gets a transient wrapper (not remembered, no scratch):
// enough to read its number and acknowledge the event.
func (x *Context) qpFor(p unsafe.Pointer) *QP {
	if p == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if qp, ok := x.qps[p]; ok {
		return qp
	}
	c := (*C.struct_ibv_qp)(p)
	return &QP{c: c, qpn: uint32(c.qp_num), ctx: x, pd: x.wrapPDLocked(unsafe.Pointer(c.pd))}
}

// CPtr is the struct ibv_qp*.
func (q *QP) CPtr() unsafe.Pointer { return unsafe.Pointer(q.c) }

// UserCtx is init.UserCtx given to CreateQP.
func (q *QP) UserCtx() any { return q.userCtx }

// PD implements verbs.QP.
func (q *QP) PD() verbs.PD { return q.pd }

// QPN implements verbs.QP.
func (q *QP) QPN() uint32 { return q.qpn }

// State implements verbs.QP: the state field of struct ibv_qp, which
// libibverbs updates on ibv_modify_qp and ibv_query_qp. Not to be called
// after Destroy.
func (q *QP) State() verbs.QPState { return verbs.QPState(q.c.state) }

// Modify implements ibv_modify_qp.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	var a C.struct_ibv_qp_attr
	qpAttrToC(attr, &a)
	seen := q.c.state
	r, err := C.ibv_modify_qp(q.c, &a, C.int(mask))
	q.keepState(seen, a.qp_state, mask)
	if r != 0 {
		if mask&verbs.QPAttrState != 0 {
			return retErr("ibv_modify_qp", r, err, "QP %#x (%v) to %v, mask %v", q.QPN(), q.State(), attr.QPState, mask)
		}
		return retErr("ibv_modify_qp", r, err, "QP %#x (%v), mask %v", q.QPN(), q.State(), mask)
	}
	return nil
}

// Query implements ibv_query_qp.
func (q *QP) Query(mask verbs.QPAttrMask) (verbs.QPAttr, verbs.QPInitAttr, error) {
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	seen := q.c.state
	r, err := C.ibv_query_qp(q.c, &a, C.int(mask), &ia)
	if r == 0 {
		q.keepState(seen, a.qp_state, mask)
	}
	if r != 0 {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, retErr("ibv_query_qp", r, err, "QP %#x, mask %v", q.QPN(), mask)
	}
	init := verbs.QPInitAttr{
		Cap:      capFromC(&ia.cap),
		QPType:   verbs.QPType(ia.qp_type),
		SQSigAll: ia.sq_sig_all != 0,
		UserCtx:  q.userCtx,
	}
	if ia.send_cq != nil {
		init.SendCQ = q.ctx.cqFor(unsafe.Pointer(ia.send_cq))
	}
	if ia.recv_cq != nil {
		init.RecvCQ = q.ctx.cqFor(unsafe.Pointer(ia.recv_cq))
	}
	return qpAttrFromC(&a), init, nil
}

// keepState puts back in an application QP's struct the state it held
// before this package's call (seen), which libibverbs replaced with set
// when mask names the state; a state that is no longer set was changed
// by the application meanwhile and stays.
func (q *QP) keepState(seen, set uint32, mask verbs.QPAttrMask) {
	if q.app && mask&verbs.QPAttrState != 0 && q.c.state == set {
		q.c.state = seen
	}
}

// ReleaseQPAt releases the wrapper of the QP at p, if there is one (the
// application destroyed that QP: the next one at its address is another).
func (x *Context) ReleaseQPAt(p unsafe.Pointer) {
	x.mu.Lock()
	q := x.qps[p]
	x.mu.Unlock()
	if q != nil {
		q.Release()
	}
}

// ReleaseCQAt releases the wrapper of the CQ at p, if there is one.
func (x *Context) ReleaseCQAt(p unsafe.Pointer) {
	x.mu.Lock()
	cq := x.cqs[p]
	x.mu.Unlock()
	if cq != nil {
		cq.Release()
	}
}

// Release forgets a wrapped QP without destroying it.
func (q *QP) Release() {
	q.ctx.mu.Lock()
	if q.ctx.qps[unsafe.Pointer(q.c)] == q {
		delete(q.ctx.qps, unsafe.Pointer(q.c))
	}
	q.ctx.mu.Unlock()
	q.smu.Lock()
	C.ibp_scratch_free(q.sbuf)
	q.sbuf = nil
	q.smu.Unlock()
	q.rmu.Lock()
	C.ibp_scratch_free(q.rbuf)
	q.rbuf = nil
	q.rmu.Unlock()
}

// Destroy implements ibv_destroy_qp. Every async event naming the QP must
// have been acknowledged, or it blocks.
func (q *QP) Destroy() error {
	qpn := q.QPN()
	r, err := C.ibv_destroy_qp(q.c)
	if r != 0 {
		return retErr("ibv_destroy_qp", r, err, "QP %#x", qpn)
	}
	q.Release()
	return nil
}

func capToC(c verbs.QPCap) C.struct_ibv_qp_cap {
	return C.struct_ibv_qp_cap{
		max_send_wr:     C.uint32_t(c.MaxSendWR),
		max_recv_wr:     C.uint32_t(c.MaxRecvWR),
		max_send_sge:    C.uint32_t(c.MaxSendSGE),
		max_recv_sge:    C.uint32_t(c.MaxRecvSGE),
		max_inline_data: C.uint32_t(c.MaxInlineData),
	}
}

func capFromC(c *C.struct_ibv_qp_cap) verbs.QPCap {
	return verbs.QPCap{
		MaxSendWR:     int(c.max_send_wr),
		MaxRecvWR:     int(c.max_recv_wr),
		MaxSendSGE:    int(c.max_send_sge),
		MaxRecvSGE:    int(c.max_recv_sge),
		MaxInlineData: int(c.max_inline_data),
	}
}

func b2u8(b bool) C.uint8_t {
	if b {
		return 1
	}
	return 0
}

func ahToC(g *verbs.AHAttr, c *C.struct_ibv_ah_attr) {
	*(*[16]byte)(unsafe.Pointer(&c.grh.dgid)) = g.GRH.DGID
	c.grh.flow_label = C.uint32_t(g.GRH.FlowLabel)
	c.grh.sgid_index = C.uint8_t(g.GRH.SGIDIndex)
	c.grh.hop_limit = C.uint8_t(g.GRH.HopLimit)
	c.grh.traffic_class = C.uint8_t(g.GRH.TrafficClass)
	c.dlid = C.uint16_t(g.DLID)
	c.sl = C.uint8_t(g.SL)
	c.src_path_bits = C.uint8_t(g.SrcPathBits)
	c.static_rate = C.uint8_t(g.StaticRate)
	c.is_global = b2u8(g.IsGlobal)
	c.port_num = C.uint8_t(g.PortNum)
}

func ahFromC(c *C.struct_ibv_ah_attr) verbs.AHAttr {
	return verbs.AHAttr{
		GRH: verbs.GlobalRoute{
			DGID:         *(*[16]byte)(unsafe.Pointer(&c.grh.dgid)),
			FlowLabel:    uint32(c.grh.flow_label),
			SGIDIndex:    uint8(c.grh.sgid_index),
			HopLimit:     uint8(c.grh.hop_limit),
			TrafficClass: uint8(c.grh.traffic_class),
		},
		DLID:        uint16(c.dlid),
		SL:          uint8(c.sl),
		SrcPathBits: uint8(c.src_path_bits),
		StaticRate:  uint8(c.static_rate),
		IsGlobal:    c.is_global != 0,
		PortNum:     uint8(c.port_num),
	}
}

// qpAttrToC fills every field of struct ibv_qp_attr from a (the mask
// decides which ones the kernel reads).
func qpAttrToC(a *verbs.QPAttr, c *C.struct_ibv_qp_attr) {
	C.memset(unsafe.Pointer(c), 0, C.sizeof_struct_ibv_qp_attr)
	c.qp_state = C.enum_ibv_qp_state(a.QPState)
	c.cur_qp_state = C.enum_ibv_qp_state(a.CurQPState)
	c.path_mtu = C.enum_ibv_mtu(a.PathMTU)
	c.path_mig_state = C.enum_ibv_mig_state(a.PathMigState)
	c.qkey = C.uint32_t(a.QKey)
	c.rq_psn = C.uint32_t(a.RQPSN)
	c.sq_psn = C.uint32_t(a.SQPSN)
	c.dest_qp_num = C.uint32_t(a.DestQPN)
	c.qp_access_flags = C.uint(a.QPAccessFlags)
	c.cap = capToC(a.Cap)
	ahToC(&a.AHAttr, &c.ah_attr)
	ahToC(&a.AltAHAttr, &c.alt_ah_attr)
	c.pkey_index = C.uint16_t(a.PKeyIndex)
	c.alt_pkey_index = C.uint16_t(a.AltPKeyIndex)
	c.en_sqd_async_notify = b2u8(a.EnSQDAsyncNotify)
	c.sq_draining = b2u8(a.SQDraining)
	c.max_rd_atomic = C.uint8_t(a.MaxRdAtomic)
	c.max_dest_rd_atomic = C.uint8_t(a.MaxDestRdAtomic)
	c.min_rnr_timer = C.uint8_t(a.MinRNRTimer)
	c.port_num = C.uint8_t(a.PortNum)
	c.timeout = C.uint8_t(a.Timeout)
	c.retry_cnt = C.uint8_t(a.RetryCnt)
	c.rnr_retry = C.uint8_t(a.RNRRetry)
	c.alt_port_num = C.uint8_t(a.AltPortNum)
	c.alt_timeout = C.uint8_t(a.AltTimeout)
	c.rate_limit = C.uint32_t(a.RateLimit)
}

func qpAttrFromC(c *C.struct_ibv_qp_attr) verbs.QPAttr {
	return verbs.QPAttr{
		QPState:          verbs.QPState(c.qp_state),
		CurQPState:       verbs.QPState(c.cur_qp_state),
		PathMTU:          verbs.MTU(c.path_mtu),
		PathMigState:     verbs.MigState(c.path_mig_state),
		QKey:             uint32(c.qkey),
		RQPSN:            uint32(c.rq_psn),
		SQPSN:            uint32(c.sq_psn),
		DestQPN:          uint32(c.dest_qp_num),
		QPAccessFlags:    verbs.AccessFlags(c.qp_access_flags),
		Cap:              capFromC(&c.cap),
		AHAttr:           ahFromC(&c.ah_attr),
		AltAHAttr:        ahFromC(&c.alt_ah_attr),
		PKeyIndex:        uint16(c.pkey_index),
		AltPKeyIndex:     uint16(c.alt_pkey_index),
		EnSQDAsyncNotify: c.en_sqd_async_notify != 0,
		SQDraining:       c.sq_draining != 0,
		MaxRdAtomic:      uint8(c.max_rd_atomic),
		MaxDestRdAtomic:  uint8(c.max_dest_rd_atomic),
		MinRNRTimer:      uint8(c.min_rnr_timer),
		PortNum:          uint8(c.port_num),
		Timeout:          uint8(c.timeout),
		RetryCnt:         uint8(c.retry_cnt),
		RNRRetry:         uint8(c.rnr_retry),
		AltPortNum:       uint8(c.alt_port_num),
		AltTimeout:       uint8(c.alt_timeout),
		RateLimit:        uint32(c.rate_limit),
	}
}
