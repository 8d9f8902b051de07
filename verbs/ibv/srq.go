//go:build linux && cgo

package ibv

/*
#include "helpers.h"
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// SRQ is a shared receive queue (struct ibv_srq). It implements
// verbs.SRQ. PostRecv is serialised per SRQ (one C scratch array).
type SRQ struct {
	c   *C.struct_ibv_srq
	pd  *PD
	ctx *Context

	mu    sync.Mutex
	rbuf  *C.struct_ibp_scratch
	owned bool // created here: Destroy calls ibv_destroy_srq
}

var (
	_ verbs.SRQ        = (*SRQ)(nil)
	_ verbs.SRQCreator = (*PD)(nil)
)

// CreateSRQ implements ibv_create_srq.
func (pd *PD) CreateSRQ(attr verbs.SRQAttr) (verbs.SRQ, error) {
	var a C.struct_ibv_srq_init_attr
	a.attr.max_wr = C.uint32_t(attr.MaxWR)
	a.attr.max_sge = C.uint32_t(attr.MaxSGE)
	a.attr.srq_limit = C.uint32_t(attr.Limit)
	p, err := C.ibv_create_srq(pd.c, &a)
	if p == nil {
		return nil, nullErr("ibv_create_srq", err, "on %s, max_wr %d, max_sge %d", pd.ctx.info.Name, attr.MaxWR, attr.MaxSGE)
	}
	s, werr := WrapSRQ(pd.ctx, unsafe.Pointer(p))
	if werr != nil {
		C.ibv_destroy_srq(p)
		return nil, werr
	}
	s.owned = true
	return s, nil
}

// WrapSRQ wraps a struct ibv_srq* created by someone else on ctx (the
// application's); wrapping the same pointer twice returns the same *SRQ.
// It fails only when the C scratch array cannot be allocated.
func WrapSRQ(ctx *Context, p unsafe.Pointer) (*SRQ, error) {
	ctx.mu.Lock()
	defer ctx.mu.Unlock()
	if s, ok := ctx.srq[p]; ok {
		return s, nil
	}
	c := (*C.struct_ibv_srq)(p)
	s := &SRQ{c: c, ctx: ctx, pd: ctx.wrapPDLocked(unsafe.Pointer(c.pd)), rbuf: C.ibp_scratch_new()}
	if s.rbuf == nil {
		return nil, verbs.Errorf("ibv_create_srq", verbs.ENOMEM, "work request scratch for an SRQ")
	}
	ctx.srq[p] = s
	return s, nil
}

// CPtr is the struct ibv_srq*.
func (s *SRQ) CPtr() unsafe.Pointer { return unsafe.Pointer(s.c) }

// PD returns the SRQ's protection domain.
func (s *SRQ) PD() verbs.PD { return s.pd }

// PostRecv implements ibv_post_srq_recv, through the provider's function
// when the context was given one (UseSRQOps).
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rbuf == nil {
		return 0, verbs.Errorf("ibv_post_srq_recv", verbs.EINVAL, "SRQ destroyed or released")
	}
	if fillRecv(s.rbuf, wrs) < 0 {
		return 0, verbs.Errorf("ibv_post_srq_recv", verbs.ENOMEM, "scratch for %d WRs", len(wrs))
	}
	var bad C.int
	r, err := C.ibp_post_srq_recv(s.ctx.ops, s.c, s.rbuf, C.int(len(wrs)), &bad)
	if r != 0 {
		n := int(bad)
		return n, retErr("ibv_post_srq_recv", r, err, "WR %d of %d (wr_id %#x)", n, len(wrs), wrs[min(n, len(wrs)-1)].WRID)
	}
	return len(wrs), nil
}

// Modify implements ibv_modify_srq.
func (s *SRQ) Modify(attr verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	var a C.struct_ibv_srq_attr
	a.max_wr = C.uint32_t(attr.MaxWR)
	a.srq_limit = C.uint32_t(attr.Limit)
	r, err := C.ibv_modify_srq(s.c, &a, C.int(mask))
	return retErr("ibv_modify_srq", r, err, "mask %#x", int(mask))
}

// Query implements ibv_query_srq.
func (s *SRQ) Query() (verbs.SRQAttr, error) {
	var a C.struct_ibv_srq_attr
	r, err := C.ibv_query_srq(s.c, &a)
	if r != 0 {
		return verbs.SRQAttr{}, retErr("ibv_query_srq", r, err, "")
	}
	return verbs.SRQAttr{MaxWR: int(a.max_wr), MaxSGE: int(a.max_sge), Limit: int(a.srq_limit)}, nil
}

// Destroy implements ibv_destroy_srq and forgets the wrapper.
func (s *SRQ) Destroy() error {
	r, err := C.ibv_destroy_srq(s.c)
	if r != 0 {
		return retErr("ibv_destroy_srq", r, err, "")
	}
	s.Release()
	return nil
}

// Release forgets a wrapped SRQ without destroying it (the application
// destroyed it) and frees its scratch.
func (s *SRQ) Release() {
	s.ctx.mu.Lock()
	if s.ctx.srq[unsafe.Pointer(s.c)] == s {
		delete(s.ctx.srq, unsafe.Pointer(s.c))
	}
	s.ctx.mu.Unlock()
	s.mu.Lock()
	C.ibp_scratch_free(s.rbuf)
	s.rbuf = nil
	s.mu.Unlock()
}

// ReleaseSRQAt releases the wrapper of the SRQ at p, if there is one.
func (x *Context) ReleaseSRQAt(p unsafe.Pointer) {
	x.mu.Lock()
	s := x.srq[p]
	x.mu.Unlock()
	if s != nil {
		s.Release()
	}
}
