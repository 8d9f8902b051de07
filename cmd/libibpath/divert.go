package main

/*
#include <arpa/inet.h>
#include "shim.h"

static struct lip_qp *lip_qp_by(uintptr_t ctx, uint32_t qpn)
{
	struct lip_ctx *c = lip_ctx_of((struct ibv_context *)ctx);
	return c ? lip_qp_find(c, qpn) : NULL;
}

static struct lip_ctx *lip_ctx_by(uintptr_t ctx) { return lip_ctx_of((struct ibv_context *)ctx); }

static uint32_t lip_ntohl(uint32_t v) { return ntohl(v); }
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/ibv"
)

// hotpath is hotpath.c and divert.c as layer 2 drives them.
type hotpath struct{}

var (
	_ shim.Hotpath = hotpath{}
	_ shim.Waker   = hotpath{}
)

func lipQP(q shim.AppQP) *C.struct_lip_qp {
	return C.lip_qp_by(C.uintptr_t(q.Ctx), C.uint32_t(q.QPN))
}

func (hotpath) Arm(q shim.AppQP, armed bool) {
	if lq := lipQP(q); lq != nil {
		a := C.int(0)
		if armed {
			a = 1
		}
		C.lip_qp_arm(lq, a)
	}
}

// Divert hands the QP to the runtime and reads its rings, which nothing
// else touches from then on.
func (hotpath) Divert(q shim.AppQP) (shim.Rings, error) {
	lq := lipQP(q)
	if lq == nil {
		return shim.Rings{}, fmt.Errorf("divert QP %#x: the hot path does not know it", q.QPN)
	}
	if r, err := C.lip_divert(lq); r != 0 {
		return shim.Rings{}, fmt.Errorf("lip_divert QP %#x: %w", q.QPN, err)
	}
	return readRings(lq), nil
}

// readRings converts the outstanding entries of a diverted QP.
func readRings(lq *C.struct_lip_qp) shim.Rings {
	var out shim.Rings
	out.NotifsDone, out.RecvsDone = uint64(lq.notifs_done), uint64(lq.recvs_done)
	if lq.overflow != 0 {
		out.Unreplayable = fmt.Sprintf("%d posts overran the shadow ring", uint64(lq.overflow))
	}
	sq := unsafe.Slice(lq.sq, int(lq.smask)+1)
	for k := uint64(lq.stail); k < uint64(lq.shead); k++ {
		e := &sq[k&uint64(lq.smask)]
		if e.flags&C.LIP_SQE_VOID != 0 {
			continue
		}
		if e.flags&C.LIP_SQE_PARTIAL != 0 && out.Unreplayable == "" {
			out.Unreplayable = fmt.Sprintf("WR %#x has more SGEs (%d) or inline bytes than the shadow ring keeps", uint64(e.wr_id), uint32(e.num_sge))
		}
		w := verbs.SendWR{WRID: uint64(e.wr_id), Opcode: verbs.WROpcode(e.opcode), SendFlags: verbs.SendFlags(e.send_flags),
			RemoteAddr: uint64(e.remote_addr), RKey: uint32(e.rkey), CompareAdd: uint64(e.compare_add), Swap: uint64(e.swap),
			SGList: sges(e.sge[:], int(e.num_sge))}
		if w.Opcode == verbs.WRSendWithImm || w.Opcode == verbs.WRRDMAWriteWithImm {
			w.ImmData = uint32(C.lip_ntohl(e.imm))
		}
		var inl []byte
		if w.SendFlags&verbs.SendInline != 0 && e.inline_len > 0 {
			inl = C.GoBytes(unsafe.Add(unsafe.Pointer(lq.inl), int(k&uint64(lq.smask))*int(lq.inl_max)), C.int(e.inline_len))
		}
		out.Sends = append(out.Sends, w)
		out.Inline = append(out.Inline, inl)
	}
	rq := unsafe.Slice(lq.rq, int(lq.rmask)+1)
	for k := uint64(lq.rtail); k < uint64(lq.rhead); k++ {
		e := &rq[k&uint64(lq.rmask)]
		if e.flags&C.LIP_SQE_VOID != 0 {
			continue
		}
		if e.flags&C.LIP_SQE_PARTIAL != 0 && out.Unreplayable == "" {
			out.Unreplayable = fmt.Sprintf("receive %#x has more SGEs (%d) than the shadow ring keeps", uint64(e.wr_id), uint32(e.num_sge))
		}
		out.Recvs = append(out.Recvs, verbs.RecvWR{WRID: uint64(e.wr_id), SGList: sges(e.sge[:], int(e.num_sge))})
	}
	return out
}

func sges(s []C.struct_ibv_sge, n int) []verbs.SGE {
	n = min(n, len(s))
	if n == 0 {
		return nil
	}
	out := make([]verbs.SGE, n)
	for i := range out {
		out[i] = verbs.SGE{Addr: uint64(s[i].addr), Length: uint32(s[i].length), LKey: uint32(s[i].lkey)}
	}
	return out
}

func (hotpath) Retire(ctx uintptr, wc verbs.WC) {
	c := C.lip_ctx_by(C.uintptr_t(ctx))
	if c == nil {
		return
	}
	var cw C.struct_ibv_wc
	ibv.WCToC(&wc, unsafe.Pointer(&cw))
	C.lip_retire_wc(c, &cw)
}

func (hotpath) Release(cq verbs.CQ) {
	if c, ok := cq.(*ibv.CQ); ok {
		C.lip_release_cq((*C.struct_ibv_cq)(c.CPtr()))
	}
}

// Wake delivers an event of cq to an application waiting on its
// completion channel (channel.c).
func (hotpath) Wake(cq verbs.CQ) {
	if c, ok := cq.(*ibv.CQ); ok {
		C.lip_chan_wake((*C.struct_ibv_cq)(c.CPtr()))
	}
}
