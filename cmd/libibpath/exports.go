package main

/*
#include "shim.h"

static uint8_t port_count(struct ibv_context *ctx)
{
	struct ibv_device_attr a;
	if (ibv_query_device(ctx, &a))
		return 0;
	return a.phys_port_cnt;
}

static int port_info(struct ibv_context *ctx, uint8_t port, uint8_t *link_layer, uint16_t *lid)
{
	struct ibv_port_attr a;
	int ret = ibv_query_port(ctx, port, &a);
	if (ret)
		return ret;
	*link_layer = a.link_layer;
	*lid = a.lid;
	return 0;
}
*/
import "C"

import (
	"syscall"
	"unsafe"

	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/ibv"
)

func ctxID(ctx *C.struct_ibv_context) uintptr { return uintptr(unsafe.Pointer(ctx)) }

// appCtx is the application's context as verbs (nil when it cannot be
// wrapped).
func appCtx(ctx *C.struct_ibv_context) *ibv.Context { return ibv.WrapContext(unsafe.Pointer(ctx)) }

//export ibpathOpened
func ibpathOpened(ctx *C.struct_ibv_context, name *C.char) {
	defer guard("ibpathOpened")
	inject("ibpathOpened")
	var ports []shim.Port
	n := C.port_count(ctx)
	for p := C.uint8_t(1); p <= n; p++ {
		var ll C.uint8_t
		var lid C.uint16_t
		if C.port_info(ctx, p, &ll, &lid) != 0 {
			continue
		}
		ports = append(ports, shim.Port{Num: uint8(p), LinkLayer: verbs.LinkLayer(ll), LID: uint16(lid)})
	}
	def := appCtx(ctx)
	if lc := C.lip_ctx_of(ctx); lc != nil && def != nil {
		// The shim's Go side posts and polls the application's objects
		// through the provider's own functions, not the hot path.
		def.UseDataOps(unsafe.Pointer(lc.post_send), unsafe.Pointer(lc.post_recv), unsafe.Pointer(lc.poll_cq))
		def.UseSRQOps(unsafe.Pointer(lc.post_srq_recv))
	}
	rt.Opened(ctxID(ctx), C.GoString(name), ports, def)
	if lc := C.lip_ctx_of(ctx); lc != nil && rt.NudgeSlots(ports) {
		// its RC QPs get the send slot of layer 1's nudge (nudge.c)
		C.lip_ctx_nudge(lc, 1)
	}
}

//export ibpathClosed
func ibpathClosed(ctx *C.struct_ibv_context) {
	defer guard("ibpathClosed")
	inject("ibpathClosed")
	rt.Closed(ctxID(ctx))
	// the wrapper goes (a context opened later at this address is
	// another); a wrapped context's Close only forgets it: no error
	_ = appCtx(ctx).Close()
}

//export ibpathCreated
func ibpathCreated(qp *C.struct_ibv_qp, attr *C.struct_ibv_qp_init_attr) (r C.int) {
	defer guardResult(&r, 0, "ibpathCreated", nil)
	inject("ibpathCreated")
	return created(qp, attr, false)
}

// ibpathCreatedEx: a QP made through ibv_create_qp_ex; wrAPI when it posts
// through ibv_wr_* operations the shim does not follow (wrapi.c).
//
//export ibpathCreatedEx
func ibpathCreatedEx(qp *C.struct_ibv_qp, attr *C.struct_ibv_qp_init_attr, wrAPI C.int) (r C.int) {
	defer guardResult(&r, 0, "ibpathCreatedEx", nil)
	inject("ibpathCreatedEx")
	return created(qp, attr, wrAPI != 0)
}

func created(qp *C.struct_ibv_qp, attr *C.struct_ibv_qp_init_attr, wrAPI bool) C.int {
	info := shim.QPInfo{QPN: uint32(qp.qp_num), Type: verbs.QPType(attr.qp_type), SRQ: attr.srq != nil,
		SRQFollowed: attr.srq != nil && C.lip_srq_of(attr.srq) != nil,
		SendCap:     uint32(attr.cap.max_send_wr), RecvCap: uint32(attr.cap.max_recv_wr), WRAPI: wrAPI}
	if !rt.Created(ctxID(qp.context), info) {
		return 0
	}
	c := appCtx(qp.context)
	w, err := ibv.WrapQP(c, unsafe.Pointer(qp))
	if err == nil {
		scq, rcq := ibv.WrapCQ(c, unsafe.Pointer(qp.send_cq)), ibv.WrapCQ(c, unsafe.Pointer(qp.recv_cq))
		init := verbs.QPInitAttr{QPType: verbs.QPTRC, SQSigAll: attr.sq_sig_all != 0,
			Cap: verbs.QPCap{MaxSendWR: int(attr.cap.max_send_wr), MaxRecvWR: int(attr.cap.max_recv_wr),
				MaxSendSGE: int(attr.cap.max_send_sge), MaxRecvSGE: int(attr.cap.max_recv_sge), MaxInlineData: int(attr.cap.max_inline_data)}}
		if info.SRQFollowed {
			if s, err := ibv.WrapSRQ(c, unsafe.Pointer(attr.srq)); err == nil {
				init.SRQ = s
			}
		}
		rt.ShadowQP(ctxID(qp.context), w.PD(), w, scq, rcq, init)
	}
	return 1
}

// ibpathSRQCreated: the application created srq, which the hot path
// follows from now on; 1 when layer 2 mirrored it (else the hot path
// stops following it).
//
//export ibpathSRQCreated
func ibpathSRQCreated(srq *C.struct_ibv_srq) (r C.int) {
	defer guardResult(&r, 0, "ibpathSRQCreated", nil)
	inject("ibpathSRQCreated")
	c := appCtx(srq.context)
	s, err := ibv.WrapSRQ(c, unsafe.Pointer(srq))
	if err != nil {
		return 0
	}
	if !rt.SRQCreated(ctxID(srq.context), ibv.WrapPD(c, unsafe.Pointer(srq.pd)), s) {
		s.Release()
		return 0
	}
	return 1
}

// ibpathSRQDestroyed: the application destroyed srq, of ctx (only the
// pointer's value is used: it is freed).
//
//export ibpathSRQDestroyed
func ibpathSRQDestroyed(ctx *C.struct_ibv_context, srq *C.struct_ibv_srq) {
	defer guard("ibpathSRQDestroyed")
	inject("ibpathSRQDestroyed")
	c := appCtx(ctx)
	s, err := ibv.WrapSRQ(c, unsafe.Pointer(srq))
	if err != nil {
		return
	}
	rt.SRQDestroyed(ctxID(ctx), s)
	s.Release()
}

// ibpathCQCreated: the application created or resized cq with headroom
// entries more than it asked for (0: the device refused the larger size).
//
//export ibpathCQCreated
func ibpathCQCreated(cq *C.struct_ibv_cq, headroom C.int) {
	defer guard("ibpathCQCreated")
	inject("ibpathCQCreated")
	rt.CQCreated(ibv.WrapCQ(appCtx(cq.context), unsafe.Pointer(cq)), int(headroom))
}

// ibpathCQDestroyed: the application destroyed cq, of ctx (only the
// pointer's value is used: it is freed).
//
//export ibpathCQDestroyed
func ibpathCQDestroyed(ctx *C.struct_ibv_context, cq *C.struct_ibv_cq) {
	defer guard("ibpathCQDestroyed")
	inject("ibpathCQDestroyed")
	rt.CQDestroyed(ibv.WrapCQ(appCtx(ctx), unsafe.Pointer(cq)))
}

// ibpathCQExtended: the application created cq with ibv_create_cq_ex:
// layer 2 arms none of its QPs until its first ibv_poll_cq.
//
//export ibpathCQExtended
func ibpathCQExtended(cq *C.struct_ibv_cq) {
	defer guard("ibpathCQExtended")
	inject("ibpathCQExtended")
	rt.CQExtended(ibv.WrapCQ(appCtx(cq.context), unsafe.Pointer(cq)))
}

// ibpathCQPolled: the application polls cq, an extended CQ, with
// ibv_poll_cq (its first poll).
//
//export ibpathCQPolled
func ibpathCQPolled(cq *C.struct_ibv_cq) {
	defer guard("ibpathCQPolled")
	inject("ibpathCQPolled")
	rt.CQPolled(ibv.WrapCQ(appCtx(cq.context), unsafe.Pointer(cq)))
}

// ibpathCQStartPoll: the application polls cq, an extended CQ, with
// ibv_start_poll (its first call), which bypasses the hot path.
//
//export ibpathCQStartPoll
func ibpathCQStartPoll(cq *C.struct_ibv_cq) {
	defer guard("ibpathCQStartPoll")
	inject("ibpathCQStartPoll")
	rt.CQStartPoll(ctxID(cq.context), ibv.WrapCQ(appCtx(cq.context), unsafe.Pointer(cq)))
}

// ibpathCQStartPollGone: the application destroyed cq, an extended CQ
// the shim followed (only the pointer's value is used: it is freed).
//
//export ibpathCQStartPollGone
func ibpathCQStartPollGone(ctx *C.struct_ibv_context, cq *C.struct_ibv_cq) {
	defer guard("ibpathCQStartPollGone")
	inject("ibpathCQStartPollGone")
	rt.CQStartPollGone(ibv.WrapCQ(appCtx(ctx), unsafe.Pointer(cq)))
}

//export ibpathMR
func ibpathMR(mr *C.struct_ibv_mr, addr unsafe.Pointer, length C.size_t, access C.int) {
	defer guard("ibpathMR")
	inject("ibpathMR")
	pd, m, buf, mirror := appRegion(mr, addr, length, access)
	if !mirror {
		return
	}
	rt.MR(ctxID(mr.context), pd, m, buf)
}

// appRegion is the application's region mr (at addr, length bytes) as
// verbs sees it, its memory, and whether it is to be mirrored on the
// backup device. An implicit on-demand-paging region (NULL, SIZE_MAX) is,
// without a slice: m has Len verbs.ImplicitLen and Runtime.MR mirrors it
// by an implicit registration. A region MRSpan refuses to make a slice of
// is not, said once.
func appRegion(mr *C.struct_ibv_mr, addr unsafe.Pointer, length C.size_t, access C.int) (verbs.PD, appMR, []byte, bool) {
	pd := ibv.WrapPD(appCtx(mr.context), unsafe.Pointer(mr.pd))
	m := appMR{pd: pd, addr: uint64(uintptr(addr)), lkey: uint32(mr.lkey), rkey: uint32(mr.rkey), access: verbs.AccessFlags(access)}
	if shim.IsImplicitODP(uintptr(addr), uint64(length), verbs.AccessFlags(access)) {
		m.length = verbs.ImplicitLen
		return pd, m, nil, true
	}
	if ok, why := shim.MRSpan(uintptr(addr), uint64(length), verbs.AccessFlags(access)); !ok {
		rt.MRNotMirrored(ctxID(mr.context), m, why)
		return pd, m, nil, false
	}
	m.length = int(length)
	return pd, m, unsafe.Slice((*byte)(addr), int(length)), true
}

// ibpathReregMR: the application's ibv_rereg_mr of mr (local key oldLKey
// before it) returned ret, with flags and access as it passed them; mr
// holds what the call left (Runtime.ReregMR).
//
//export ibpathReregMR
func ibpathReregMR(mr *C.struct_ibv_mr, oldLKey C.uint32_t, ret C.int, flags C.int, access C.int) {
	defer guard("ibpathReregMR")
	inject("ibpathReregMR")
	o := shim.ReregUnusable
	switch ret {
	case 0, C.IBV_REREG_MR_ERR_DO_FORK_OLD:
		o = shim.ReregNew
	case C.IBV_REREG_MR_ERR_INPUT, C.IBV_REREG_MR_ERR_DONT_FORK_NEW:
		o = shim.ReregOld
	}
	changeAccess := flags&C.IBV_REREG_MR_CHANGE_ACCESS != 0
	var pd verbs.PD
	var m appMR
	var buf []byte
	if o == shim.ReregNew {
		var mirror bool
		if pd, m, buf, mirror = appRegion(mr, mr.addr, mr.length, access); !mirror {
			rt.DeregMR(ctxID(mr.context), uint32(oldLKey)) // the new region is not mirrored (said)
			return
		}
	}
	rt.ReregMR(ctxID(mr.context), uint32(oldLKey), pd, m, changeAccess, buf, o)
}

// ibpathDmabufMR: the application registered length bytes of dma-buf fd
// at offset, at iova (ibv_reg_dmabuf_mr); mirrored on the backup device.
//
//export ibpathDmabufMR
func ibpathDmabufMR(mr *C.struct_ibv_mr, offset C.uint64_t, length C.size_t, iova C.uint64_t, fd C.int, access C.int) {
	defer guard("ibpathDmabufMR")
	inject("ibpathDmabufMR")
	pd := ibv.WrapPD(appCtx(mr.context), unsafe.Pointer(mr.pd))
	m := appMR{pd: pd, addr: uint64(iova), length: int(length), lkey: uint32(mr.lkey), rkey: uint32(mr.rkey),
		access: verbs.AccessFlags(access)}
	rt.DmabufMR(ctxID(mr.context), pd, m, uint64(offset), int(fd))
}

//export ibpathDeregMR
func ibpathDeregMR(mr *C.struct_ibv_mr) {
	defer guard("ibpathDeregMR")
	inject("ibpathDeregMR")
	rt.DeregMR(ctxID(mr.context), uint32(mr.lkey))
}

//export ibpathLayer1Wants
func ibpathLayer1Wants(qp *C.struct_ibv_qp, attr *C.struct_ibv_qp_attr, mask C.int) (r C.int) {
	defer guardResult(&r, 0, "ibpathLayer1Wants", nil)
	inject("ibpathLayer1Wants")
	if rt.Layer1Wants(ctxID(qp.context), uint32(qp.qp_num), verbs.QPAttrMask(mask), verbs.QPState(attr.qp_state)) {
		return 1
	}
	return 0
}

// ibpathModify is the application's ibv_modify_qp through layer 1; it
// returns what ibv_modify_qp returns (0 or an errno).
//
//export ibpathModify
func ibpathModify(qp *C.struct_ibv_qp, attr *C.struct_ibv_qp_attr, mask C.int) (r C.int) {
	defer guardResult(&r, C.LIP_GUARDED, "ibpathModify", nil)
	inject("ibpathModify")
	c := appCtx(qp.context)
	w, err := ibv.WrapQP(c, unsafe.Pointer(qp))
	if err != nil {
		return C.int(verbs.EINVAL)
	}
	a := ibv.QPAttrFromC(unsafe.Pointer(attr))
	if err := rt.ModifyQP(c, w, &a, verbs.QPAttrMask(mask)); err != nil {
		return errnoOf(err)
	}
	return 0
}

//export ibpathAfterModify
func ibpathAfterModify(qp *C.struct_ibv_qp, attr *C.struct_ibv_qp_attr, mask C.int, ret C.int) {
	defer guard("ibpathAfterModify")
	inject("ibpathAfterModify")
	m := shim.Modify{QPN: uint32(qp.qp_num), Mask: verbs.QPAttrMask(mask), State: verbs.QPState(attr.qp_state),
		Port: uint8(attr.port_num), DLID: uint16(attr.ah_attr.dlid), Global: attr.ah_attr.is_global != 0,
		DestQPN: uint32(attr.dest_qp_num), Err: int(ret), Attr: ibv.QPAttrFromC(unsafe.Pointer(attr))}
	gid := C.GoBytes(unsafe.Pointer(&attr.ah_attr.grh.dgid), 16)
	copy(m.DGID[:], gid)
	rt.AfterModify(ctxID(qp.context), m)
}

//export ibpathDestroying
func ibpathDestroying(ctx *C.struct_ibv_context, qpn C.uint32_t) {
	defer guard("ibpathDestroying")
	inject("ibpathDestroying")
	rt.Destroying(ctxID(ctx), uint32(qpn))
}

// ibpathDestroyFailed: the provider refused to destroy QP qpn of ctx
// (errno err); kept says whether the hot path took the QP back
// (Runtime.DestroyFailed).
//
//export ibpathDestroyFailed
func ibpathDestroyFailed(ctx *C.struct_ibv_context, qpn C.uint32_t, err C.int, kept C.int) {
	defer guard("ibpathDestroyFailed")
	inject("ibpathDestroyFailed")
	rt.DestroyFailed(ctxID(ctx), uint32(qpn), syscall.Errno(err), kept != 0)
}

// ibpathDestroyed: the application destroyed QP qpn of ctx, which was at
// qp (only the pointer's value is used: it is freed).
//
//export ibpathDestroyed
func ibpathDestroyed(ctx *C.struct_ibv_context, qpn C.uint32_t, qp unsafe.Pointer) {
	defer guard("ibpathDestroyed")
	inject("ibpathDestroyed")
	rt.Destroyed(ctxID(ctx), uint32(qpn))
	appCtx(ctx).ReleaseQPAt(qp)
}

// ibpathCQGone: the application destroyed the CQ at cq (only the
// pointer's value is used); its wrapper goes.
//
//export ibpathCQGone
func ibpathCQGone(ctx *C.struct_ibv_context, cq unsafe.Pointer) {
	defer guard("ibpathCQGone")
	inject("ibpathCQGone")
	appCtx(ctx).ReleaseCQAt(cq)
}

// ibpathAsyncEvent records an async event the application is about to
// get, and says whether it is kept from it (1: Runtime.AsyncEvent).
//
//export ibpathAsyncEvent
func ibpathAsyncEvent(ctx *C.struct_ibv_context, typ C.enum_ibv_event_type, qpn C.uint32_t, port C.int) (r C.int) {
	defer guardResult(&r, 0, "ibpathAsyncEvent", nil)
	inject("ibpathAsyncEvent")
	if rt.AsyncEvent(ctxID(ctx), verbs.EventType(typ), uint32(qpn), uint8(port)) {
		return 1
	}
	return 0
}

// ibpathCMUnreachable says whether an RDMA_CM_EVENT_UNREACHABLE of the
// rdma_cm id of qp is kept from the application (Runtime.CMUnreachable).
//
//export ibpathCMUnreachable
func ibpathCMUnreachable(qp *C.struct_ibv_qp, st C.int) (r C.int) {
	defer guardResult(&r, 0, "ibpathCMUnreachable", nil)
	inject("ibpathCMUnreachable")
	if rt.CMUnreachable(ctxID(qp.context), uint32(qp.qp_num), int(st)) {
		return 1
	}
	return 0
}

// ibpathCMEstablished records that the rdma_cm connection of qp was
// established (up) or ended (Runtime.CMEstablished).
//
//export ibpathCMEstablished
func ibpathCMEstablished(qp *C.struct_ibv_qp, up C.int) {
	defer guard("ibpathCMEstablished")
	inject("ibpathCMEstablished")
	rt.CMEstablished(ctxID(qp.context), uint32(qp.qp_num), up != 0)
}
