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
	"unsafe"

	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/verbs"
)

func ctxID(ctx *C.struct_ibv_context) uintptr { return uintptr(unsafe.Pointer(ctx)) }

//export ibpathOpened
func ibpathOpened(ctx *C.struct_ibv_context, name *C.char) {
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
	rt.Opened(ctxID(ctx), C.GoString(name), ports)
}

//export ibpathClosed
func ibpathClosed(ctx *C.struct_ibv_context) { rt.Closed(ctxID(ctx)) }

//export ibpathCreated
func ibpathCreated(qp *C.struct_ibv_qp, typ C.enum_ibv_qp_type, maxSend, maxRecv C.uint32_t, sigAll, srq C.int) C.int {
	ok := rt.Created(ctxID(qp.context), shim.QPInfo{QPN: uint32(qp.qp_num), Type: verbs.QPType(typ), SRQ: srq != 0,
		SendCap: uint32(maxSend), RecvCap: uint32(maxRecv)})
	if ok {
		return 1
	}
	return 0
}

//export ibpathBeforeModify
func ibpathBeforeModify(qp *C.struct_ibv_qp, attr *C.struct_ibv_qp_attr, mask C.int) C.int {
	// Layer 1 arms its alternate path here on InfiniBand; not in this build.
	return mask
}

//export ibpathAltRefused
func ibpathAltRefused(qp *C.struct_ibv_qp, code C.int) {}

//export ibpathAfterModify
func ibpathAfterModify(qp *C.struct_ibv_qp, attr *C.struct_ibv_qp_attr, mask C.int, ret C.int) {
	m := shim.Modify{QPN: uint32(qp.qp_num), Mask: verbs.QPAttrMask(mask), State: verbs.QPState(attr.qp_state),
		Port: uint8(attr.port_num), DLID: uint16(attr.ah_attr.dlid), Global: attr.ah_attr.is_global != 0,
		DestQPN: uint32(attr.dest_qp_num), Err: int(ret)}
	gid := C.GoBytes(unsafe.Pointer(&attr.ah_attr.grh.dgid), 16)
	copy(m.DGID[:], gid)
	rt.Modified(ctxID(qp.context), m)
}

//export ibpathDestroyed
func ibpathDestroyed(ctx *C.struct_ibv_context, qpn C.uint32_t) {
	rt.Destroyed(ctxID(ctx), uint32(qpn))
}

//export ibpathAsyncEvent
func ibpathAsyncEvent(ctx *C.struct_ibv_context, typ C.enum_ibv_event_type, qpn C.uint32_t, port C.int) {
	rt.AsyncEvent(ctxID(ctx), verbs.EventType(typ), uint32(qpn), uint8(port))
}
