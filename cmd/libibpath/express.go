package main

/*
#include <errno.h>
#include "shim.h"

static void lip_xl_stats(struct lip_qp *q, uint64_t *out)
{
	struct lip_xl *x = q->xl;
	if (!x)
		return;
	out[0] = __atomic_load_n(&x->sends, __ATOMIC_RELAXED);
	out[1] = __atomic_load_n(&x->recvs, __ATOMIC_RELAXED);
	out[2] = __atomic_load_n(&x->completions, __ATOMIC_RELAXED);
	out[3] = __atomic_load_n(&x->hidden, __ATOMIC_RELAXED);
	out[4] = __atomic_load_n(&x->misses, __ATOMIC_RELAXED);
	out[5] = __atomic_load_n(&x->surfaced, __ATOMIC_ACQUIRE);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/ibv"
)

// The express lane (express.c) as layer 2 drives it.

var _ shim.Express = hotpath{}

func (hotpath) ExpressOn(q shim.AppQP, lane shim.ExpressLane) error {
	lq, release := lipQP(q)
	defer release()
	if lq == nil {
		return fmt.Errorf("express lane for QP %#x: the hot path does not know it", q.QPN)
	}
	bqp, ok := lane.BackupQP.(*ibv.QP)
	if !ok {
		return fmt.Errorf("express lane for QP %#x: backup QP %T is not a libibverbs QP", q.QPN, lane.BackupQP)
	}
	bcq, ok := lane.BackupCQ.(*ibv.CQ)
	if !ok {
		return fmt.Errorf("express lane for QP %#x: backup CQ %T is not a libibverbs CQ", q.QPN, lane.BackupCQ)
	}
	var brcq *C.struct_ibv_cq
	if lane.BackupRecvCQ != nil {
		c, ok := lane.BackupRecvCQ.(*ibv.CQ)
		if !ok {
			return fmt.Errorf("express lane for QP %#x: backup receive CQ %T is not a libibverbs CQ", q.QPN, lane.BackupRecvCQ)
		}
		brcq = (*C.struct_ibv_cq)(c.CPtr())
	}
	x, err := C.lip_xl_new((*C.struct_ibv_qp)(bqp.CPtr()), (*C.struct_ibv_cq)(bcq.CPtr()), brcq, C.uint32_t(lane.PeerQPN))
	if x == nil {
		return fmt.Errorf("lip_xl_new for QP %#x: %w", q.QPN, err)
	}
	for from, to := range lane.LKeys {
		if r, err := C.lip_xl_key(x, 0, C.uint32_t(from), C.uint32_t(to)); r != 0 {
			C.lip_xl_free(x)
			return fmt.Errorf("lip_xl_key for QP %#x: %w", q.QPN, err)
		}
	}
	C.lip_express_on(lq, x)
	return nil
}

func (hotpath) ExpressKey(q shim.AppQP, remote bool, from, to uint32) error {
	lq, release := lipQP(q)
	defer release()
	if lq == nil || lq.xl == nil {
		return fmt.Errorf("express key for QP %#x: not on the lane", q.QPN)
	}
	rem := C.int(0)
	if remote {
		rem = 1
	}
	if r, err := C.lip_xl_key(lq.xl, rem, C.uint32_t(from), C.uint32_t(to)); r != 0 {
		return fmt.Errorf("lip_xl_key for QP %#x: %w", q.QPN, err)
	}
	return nil
}

func (hotpath) ExpressCQ(cq verbs.CQ, qps []shim.AppQP) error {
	c, ok := cq.(*ibv.CQ)
	if !ok {
		return fmt.Errorf("express lane CQ %T is not a libibverbs CQ", cq)
	}
	lqs := make([]*C.struct_lip_qp, len(qps)+1) // never empty: &lqs[0] is passed
	for i, q := range qps {
		var release func()
		lqs[i], release = lipQP(q)
		defer release()
		if lqs[i] == nil {
			return fmt.Errorf("express lane CQ: QP %#x unknown to the hot path", q.QPN)
		}
	}
	if r, err := C.lip_express_cq((*C.struct_ibv_cq)(c.CPtr()), &lqs[0], C.int(len(qps))); r != 0 {
		return fmt.Errorf("lip_express_cq: %w", err)
	}
	return nil
}

func (hotpath) ExpressSurface(q shim.AppQP) {
	lq, release := lipQP(q)
	defer release()
	if lq != nil {
		C.lip_express_surface(lq)
	}
}

func (hotpath) ExpressOff(q shim.AppQP) {
	lq, release := lipQP(q)
	defer release()
	if lq != nil {
		C.lip_express_off(lq)
	}
}

func (hotpath) ExpressStats(q shim.AppQP) shim.ExpressStats {
	lq, release := lipQP(q)
	defer release()
	if lq == nil {
		return shim.ExpressStats{}
	}
	var v [6]C.uint64_t
	C.lip_xl_stats(lq, &v[0])
	return shim.ExpressStats{Sends: uint64(v[0]), Recvs: uint64(v[1]), Completions: uint64(v[2]),
		Hidden: uint64(v[3]), Misses: uint64(v[4]), Surfaced: v[5] != 0}
}

//export ibpathExpressSurfaced
func ibpathExpressSurfaced(qp *C.struct_ibv_qp, wc *C.struct_ibv_wc) {
	defer guard("ibpathExpressSurfaced")
	inject("ibpathExpressSurfaced")
	rt.ExpressSurfaced(ctxID(qp.context), uint32(qp.qp_num), ibv.WCFromC(unsafe.Pointer(wc)))
}
