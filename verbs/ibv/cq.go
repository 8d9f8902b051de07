//go:build linux && cgo

package ibv

/*
#cgo noescape ibp_poll_cq
#cgo nocallback ibp_poll_cq
#include "helpers.h"
#include <stdlib.h>
*/
import "C"

import (
	"encoding/binary"
	"sync"
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// CompChannel is a completion event channel (struct ibv_comp_channel). It
// implements verbs.CompChannel. Its fd is O_NONBLOCK: GetCQEvent fails with
// EAGAIN when no notification is pending, and FD can be given to poll(2)
// or epoll to wait without spinning.
type CompChannel struct {
	c   *C.struct_ibv_comp_channel
	ctx *Context
}

var _ verbs.CompChannel = (*CompChannel)(nil)

// CreateCompChannel implements ibv_create_comp_channel.
func (x *Context) CreateCompChannel() (verbs.CompChannel, error) {
	ch, err := C.ibv_create_comp_channel(x.c)
	if ch == nil {
		return nil, nullErr("ibv_create_comp_channel", err, "device %s", x.info.Name)
	}
	if r := C.ibp_set_nonblock(ch.fd); r != 0 {
		C.ibv_destroy_comp_channel(ch)
		return nil, retErr("fcntl", r, nil, "O_NONBLOCK on a completion channel of %s", x.info.Name)
	}
	return &CompChannel{c: ch, ctx: x}, nil
}

// FD is the channel's file descriptor, readable when a CQ event is pending.
func (ch *CompChannel) FD() int { return int(ch.c.fd) }

// CPtr is the struct ibv_comp_channel*.
func (ch *CompChannel) CPtr() unsafe.Pointer { return unsafe.Pointer(ch.c) }

// GetCQEvent implements ibv_get_cq_event on the non-blocking channel.
func (ch *CompChannel) GetCQEvent() (verbs.CQ, error) {
	var cq *C.struct_ibv_cq
	if r := C.ibp_get_cq_event(ch.c, &cq); r != 0 {
		return nil, retErr("ibv_get_cq_event", r, nil, "")
	}
	return ch.ctx.cqFor(unsafe.Pointer(cq)), nil
}

// AckCQEvents implements ibv_ack_cq_events.
func (ch *CompChannel) AckCQEvents(cq verbs.CQ, n int) {
	if q, ok := cq.(*CQ); ok && n > 0 {
		C.ibv_ack_cq_events(q.c, C.uint(n))
	}
}

// Destroy implements ibv_destroy_comp_channel (EBUSY while CQs use it).
func (ch *CompChannel) Destroy() error {
	r, err := C.ibv_destroy_comp_channel(ch.c)
	if r != 0 {
		return retErr("ibv_destroy_comp_channel", r, err, "device %s", ch.ctx.info.Name)
	}
	return nil
}

// CQ is a completion queue (struct ibv_cq). It implements verbs.CQ. Poll
// is serialised per CQ (it shares one C array of struct ibv_wc); other
// methods are safe for concurrent use.
type CQ struct {
	c   *C.struct_ibv_cq
	ctx *Context

	mu   sync.Mutex
	wc   *C.struct_ibv_wc // C scratch for ibv_poll_cq
	nwc  int
	dead bool
}

var _ verbs.CQ = (*CQ)(nil)

// CreateCQ implements ibv_create_cq. ch may be nil.
func (x *Context) CreateCQ(cqe int, ch verbs.CompChannel, compVector int) (verbs.CQ, error) {
	var cch *C.struct_ibv_comp_channel
	if ch != nil {
		c, ok := ch.(*CompChannel)
		if !ok || c.ctx != x {
			return nil, verbs.Errorf("ibv_create_cq", verbs.EINVAL, "completion channel %T is not one of device %s", ch, x.info.Name)
		}
		cch = c.c
	}
	q, err := C.ibv_create_cq(x.c, C.int(cqe), nil, cch, C.int(compVector))
	if q == nil {
		return nil, nullErr("ibv_create_cq", err, "%d entries on %s", cqe, x.info.Name)
	}
	x.mu.Lock()
	cq := x.wrapCQLocked(unsafe.Pointer(q))
	x.mu.Unlock()
	return cq, nil
}

// WrapCQ wraps a struct ibv_cq* created by someone else on ctx. Wrapping
// the same pointer twice returns the same *CQ.
func WrapCQ(ctx *Context, p unsafe.Pointer) *CQ {
	ctx.mu.Lock()
	defer ctx.mu.Unlock()
	return ctx.wrapCQLocked(p)
}

func (x *Context) wrapCQLocked(p unsafe.Pointer) *CQ {
	if cq, ok := x.cqs[p]; ok {
		return cq
	}
	cq := &CQ{c: (*C.struct_ibv_cq)(p), ctx: x}
	x.cqs[p] = cq
	return cq
}

// cqFor maps a C CQ pointer named by an event to its wrapper; a CQ never
// seen before is wrapped (and remembered).
func (x *Context) cqFor(p unsafe.Pointer) *CQ {
	if p == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.wrapCQLocked(p)
}

// CPtr is the struct ibv_cq*.
func (cq *CQ) CPtr() unsafe.Pointer { return unsafe.Pointer(cq.c) }

// Context implements verbs.CQ.
func (cq *CQ) Context() verbs.Context { return cq.ctx }

// CQE implements verbs.CQ: the capacity the provider granted.
func (cq *CQ) CQE() int { return int(cq.c.cqe) }

// Poll implements ibv_poll_cq.
func (cq *CQ) Poll(wc []verbs.WC) (int, error) {
	if len(wc) == 0 {
		return 0, nil
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return 0, verbs.Errorf("ibv_poll_cq", verbs.EINVAL, "CQ destroyed")
	}
	if len(wc) > cq.nwc {
		p := C.realloc(unsafe.Pointer(cq.wc), C.size_t(len(wc))*C.sizeof_struct_ibv_wc)
		if p == nil {
			return 0, verbs.Errorf("ibv_poll_cq", verbs.ENOMEM, "scratch for %d completions", len(wc))
		}
		cq.wc, cq.nwc = (*C.struct_ibv_wc)(p), len(wc)
	}
	r, err := C.ibp_poll_cq(cq.ctx.ops, cq.c, C.int(len(wc)), cq.wc)
	if r < 0 {
		return 0, retErr("ibv_poll_cq", r, err, "provider returned %d", int(r))
	}
	cs := unsafe.Slice(cq.wc, int(r))
	for i := range cs {
		wc[i] = wcFromC(&cs[i])
	}
	return int(r), nil
}

func wcFromC(c *C.struct_ibv_wc) verbs.WC {
	w := verbs.WC{
		WRID:         uint64(c.wr_id),
		Status:       verbs.WCStatus(c.status),
		Opcode:       verbs.WCOpcode(c.opcode),
		VendorErr:    uint32(c.vendor_err),
		ByteLen:      uint32(c.byte_len),
		QPNum:        uint32(c.qp_num),
		SrcQP:        uint32(c.src_qp),
		WCFlags:      verbs.WCFlags(c.wc_flags),
		PKeyIndex:    uint16(c.pkey_index),
		SLID:         uint16(c.slid),
		SL:           uint8(c.sl),
		DLIDPathBits: uint8(c.dlid_path_bits),
	}
	u := (*[4]byte)(unsafe.Pointer(&c.anon0))
	if w.WCFlags&verbs.WCFlagWithImm != 0 {
		w.ImmData = binary.BigEndian.Uint32(u[:]) // __be32 imm_data
	}
	return w
}

// ReqNotify implements ibv_req_notify_cq.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	s := C.int(0)
	if solicitedOnly {
		s = 1
	}
	r, err := C.ibp_req_notify_cq(cq.c, s)
	if r != 0 {
		return retErr("ibv_req_notify_cq", r, err, "")
	}
	return nil
}

// Release forgets a wrapped CQ without destroying it.
func (cq *CQ) Release() {
	cq.ctx.mu.Lock()
	delete(cq.ctx.cqs, unsafe.Pointer(cq.c))
	cq.ctx.mu.Unlock()
	cq.mu.Lock()
	C.free(unsafe.Pointer(cq.wc))
	cq.wc, cq.nwc = nil, 0
	cq.mu.Unlock()
}

// Destroy implements ibv_destroy_cq. Every event of the CQ (async and
// completion channel) must have been acknowledged, or it blocks.
func (cq *CQ) Destroy() error {
	r, err := C.ibv_destroy_cq(cq.c)
	if r != 0 {
		return retErr("ibv_destroy_cq", r, err, "")
	}
	cq.mu.Lock()
	cq.dead = true
	cq.mu.Unlock()
	cq.Release()
	return nil
}
