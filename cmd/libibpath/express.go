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
	out[6] = __atomic_load_n(&x->own, __ATOMIC_RELAXED);
}

// lip_xl_recorded: q is on the lane, which keeps its rings.
static int lip_xl_recorded(struct lip_qp *q)
{
	struct lip_xl *x = __atomic_load_n(&q->xl, __ATOMIC_ACQUIRE);
	return __atomic_load_n(&q->express, __ATOMIC_ACQUIRE) && x && x->record;
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
	if lane.Record != nil {
		if err := recordLane(lq, x, lane.Record); err != nil {
			C.lip_xl_free(x)
			return fmt.Errorf("express lane for QP %#x: %w", q.QPN, err)
		}
	}
	C.lip_express_on(lq, x)
	return nil
}

// recordLane loads the rings x keeps of lq with st (lip_xl_record).
func recordLane(lq *C.struct_lip_qp, x *C.struct_lip_xl, st *shim.Rings) error {
	if st.Unreplayable != "" {
		return fmt.Errorf("its WRs are not whole: %s", st.Unreplayable)
	}
	ch, err := newUndivertChains(st)
	if err != nil {
		return err
	}
	defer ch.free()
	if r, err := C.lip_xl_record(lq, x, ch.sends, ch.recvs, C.uint64_t(st.NotifsDone), C.uint64_t(st.RecvsDone)); r != 0 {
		return fmt.Errorf("lip_xl_record: %w", err)
	}
	return nil
}

// ExpressBack takes a QP the lane keeps the rings of off it
// (lip_express_off waits for the posts and polls on it) and reads them.
func (hotpath) ExpressBack(q shim.AppQP) (shim.Rings, error) {
	lq, release := lipQP(q)
	defer release()
	if lq == nil {
		return shim.Rings{}, fmt.Errorf("express back QP %#x: the hot path does not know it", q.QPN)
	}
	if C.lip_xl_recorded(lq) == 0 {
		return shim.Rings{}, fmt.Errorf("express back QP %#x: not on the lane with its rings", q.QPN)
	}
	C.lip_express_off(lq)
	return readRings(lq), nil
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
	var v [7]C.uint64_t
	C.lip_xl_stats(lq, &v[0])
	return shim.ExpressStats{Sends: uint64(v[0]), Recvs: uint64(v[1]), Completions: uint64(v[2]),
		Hidden: uint64(v[3]), Misses: uint64(v[4]), Surfaced: v[5] != 0, Own: uint64(v[6])}
}

//export ibpathExpressSurfaced
func ibpathExpressSurfaced(qp *C.struct_ibv_qp, wc *C.struct_ibv_wc) {
	defer guard("ibpathExpressSurfaced")
	inject("ibpathExpressSurfaced")
	rt.ExpressSurfaced(ctxID(qp.context), uint32(qp.qp_num), ibv.WCFromC(unsafe.Pointer(wc)))
}
