package main

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"sync"
	"unsafe"

	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/ibv"
)

// The data path of diverted QPs: hotpath.c calls these (through
// lip_hooks) for posts to a QP layer 2 took over and polls of its CQs.
// A post that reaches the runtime after it gave the QP back to the hot
// path (shim.ErrHome) returns LIP_HOME: hotpath.c posts it, recorded.
// They are slower than the hot path (a cgo call and conversions), which
// only runs after a failover.

var wcPool = sync.Pool{New: func() any { return new([]verbs.WC) }}

func errnoOf(err error) C.int {
	if e := verbs.ErrnoOf(err); e != 0 {
		return C.int(e)
	}
	return C.int(verbs.EIO)
}

//export ibpathPostSend
func ibpathPostSend(qp *C.struct_ibv_qp, wr *C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) (r C.int) {
	defer guardResult(&r, C.int(verbs.EIO), "ibpathPostSend", func() {
		if bad != nil {
			*bad = wr
		}
	})
	inject("ibpathPostSend")
	wrs := ibv.SendWRsFromC(unsafe.Pointer(wr), nil)
	n, err := rt.PostSend(ctxID(qp.context), uint32(qp.qp_num), wrs)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, shim.ErrExpress):
		return C.LIP_AGAIN
	case errors.Is(err, shim.ErrHome):
		return C.LIP_HOME // nothing posted: the hot path posts wr on
	}
	if bad != nil {
		*bad = nth(wr, n, func(w *C.struct_ibv_send_wr) *C.struct_ibv_send_wr { return w.next })
	}
	return errnoOf(err)
}

// nth is the n-th WR of a chain (the bad_wr of a post that took n).
func nth[T any](p *T, n int, next func(*T) *T) *T {
	for i := 0; i < n && p != nil; i++ {
		p = next(p)
	}
	return p
}

//export ibpathPostRecv
func ibpathPostRecv(qp *C.struct_ibv_qp, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) (r C.int) {
	defer guardResult(&r, C.int(verbs.EIO), "ibpathPostRecv", func() {
		if bad != nil {
			*bad = wr
		}
	})
	inject("ibpathPostRecv")
	wrs := ibv.RecvWRsFromC(unsafe.Pointer(wr), nil)
	n, err := rt.PostRecv(ctxID(qp.context), uint32(qp.qp_num), wrs)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, shim.ErrExpress):
		return C.LIP_AGAIN
	case errors.Is(err, shim.ErrHome):
		return C.LIP_HOME // nothing posted: the hot path posts wr on
	}
	if bad != nil {
		*bad = nth(wr, n, func(w *C.struct_ibv_recv_wr) *C.struct_ibv_recv_wr { return w.next })
	}
	return errnoOf(err)
}

//export ibpathPostSRQRecv
func ibpathPostSRQRecv(srq *C.struct_ibv_srq, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) (r C.int) {
	defer guardResult(&r, C.int(verbs.EIO), "ibpathPostSRQRecv", func() {
		if bad != nil {
			*bad = wr
		}
	})
	inject("ibpathPostSRQRecv")
	s, err := ibv.WrapSRQ(appCtx(srq.context), unsafe.Pointer(srq))
	if err != nil {
		if bad != nil {
			*bad = wr
		}
		return C.int(verbs.ENOMEM)
	}
	wrs := ibv.RecvWRsFromC(unsafe.Pointer(wr), nil)
	n, err := rt.PostSRQRecv(s, wrs)
	if err == nil {
		return 0
	}
	if bad != nil {
		*bad = nth(wr, n, func(w *C.struct_ibv_recv_wr) *C.struct_ibv_recv_wr { return w.next })
	}
	return errnoOf(err)
}

//export ibpathPollCQ
func ibpathPollCQ(cq *C.struct_ibv_cq, n C.int, wc *C.struct_ibv_wc) (r C.int) {
	defer guardResult(&r, -1, "ibpathPollCQ", nil)
	inject("ibpathPollCQ")
	if n <= 0 {
		return 0
	}
	bp := wcPool.Get().(*[]verbs.WC)
	defer wcPool.Put(bp)
	if cap(*bp) < int(n) {
		*bp = make([]verbs.WC, n)
	}
	buf := (*bp)[:n]
	got, err := rt.PollCQ(ibv.WrapCQ(appCtx(cq.context), unsafe.Pointer(cq)), buf)
	if errors.Is(err, shim.ErrExpress) {
		return C.LIP_AGAIN
	}
	if err != nil && got == 0 {
		return -1
	}
	out := unsafe.Slice(wc, int(n))
	for i := 0; i < got; i++ {
		ibv.WCToC(&buf[i], unsafe.Pointer(&out[i]))
	}
	return C.int(got)
}

//export ibpathIntercept
func ibpathIntercept(cq *C.struct_ibv_cq, wc *C.struct_ibv_wc, n C.int) {
	defer guard("ibpathIntercept")
	inject("ibpathIntercept")
	in := unsafe.Slice(wc, int(n))
	wcs := make([]verbs.WC, n)
	for i := range wcs {
		wcs[i] = ibv.WCFromC(unsafe.Pointer(&in[i]))
	}
	rt.Intercept(ctxID(cq.context), ibv.WrapCQ(appCtx(cq.context), unsafe.Pointer(cq)), wcs)
}
