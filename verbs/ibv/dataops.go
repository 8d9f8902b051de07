//go:build linux && cgo

package ibv

/*
#include "helpers.h"
#include <stdlib.h>
#include <arpa/inet.h>

// The unions of struct ibv_send_wr and struct ibv_wc, read and written
// here rather than through cgo's names for anonymous members.
static void ibp_send_wr_fields(const struct ibv_send_wr *w, uint64_t *raddr, uint32_t *rkey,
			       uint64_t *cmp, uint64_t *swap, uint32_t *imm)
{
	if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		*raddr = w->wr.atomic.remote_addr;
		*rkey = w->wr.atomic.rkey;
		*cmp = w->wr.atomic.compare_add;
		*swap = w->wr.atomic.swap;
	} else {
		*raddr = w->wr.rdma.remote_addr;
		*rkey = w->wr.rdma.rkey;
		*cmp = *swap = 0;
	}
	*imm = ntohl(w->imm_data);
}

static void ibp_wc_set_imm(struct ibv_wc *wc, uint32_t imm) { wc->imm_data = htonl(imm); }
*/
import "C"

import (
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// newOps is a context's data-path table in C memory, all NULL: posts and
// polls go through the context's ops table, as the inline verbs do. It
// lives as long as the process (a few words per context): a post racing a
// Close never reads freed memory.
func newOps() *C.struct_ibp_ops {
	return (*C.struct_ibp_ops)(C.calloc(1, C.sizeof_struct_ibp_ops))
}

// UseDataOps makes the context's QPs and CQs post and poll through the
// given provider functions (C function pointers of the types of struct
// verbs_context_ops' post_send, post_recv and poll_cq) instead of the
// context's ops table. A shim that swapped the table for wrappers of its
// own gives the provider's originals here, so its Go side reaches the
// device without passing through its wrappers again. A nil function keeps
// the table's.
func (x *Context) UseDataOps(postSend, postRecv, pollCQ unsafe.Pointer) {
	if x.ops == nil {
		return
	}
	x.ops.post_send = (*[0]byte)(postSend)
	x.ops.post_recv = (*[0]byte)(postRecv)
	x.ops.poll_cq = (*[0]byte)(pollCQ)
}

// UseSRQOps is UseDataOps for post_srq_recv: the context's SRQs post
// through postSRQRecv (nil: the ops table's).
func (x *Context) UseSRQOps(postSRQRecv unsafe.Pointer) {
	if x.ops != nil {
		x.ops.post_srq_recv = (*[0]byte)(postSRQRecv)
	}
}

// WCFromC converts the struct ibv_wc at p.
func WCFromC(p unsafe.Pointer) verbs.WC { return wcFromC((*C.struct_ibv_wc)(p)) }

// WCToC writes w into the struct ibv_wc at p, as a provider would.
func WCToC(w *verbs.WC, p unsafe.Pointer) {
	c := (*C.struct_ibv_wc)(p)
	*c = C.struct_ibv_wc{}
	c.wr_id = C.uint64_t(w.WRID)
	c.status = uint32(w.Status)
	c.opcode = uint32(w.Opcode)
	c.vendor_err = C.uint32_t(w.VendorErr)
	c.byte_len = C.uint32_t(w.ByteLen)
	c.qp_num = C.uint32_t(w.QPNum)
	c.src_qp = C.uint32_t(w.SrcQP)
	c.wc_flags = C.uint(w.WCFlags)
	c.pkey_index = C.uint16_t(w.PKeyIndex)
	c.slid = C.uint16_t(w.SLID)
	c.sl = C.uint8_t(w.SL)
	c.dlid_path_bits = C.uint8_t(w.DLIDPathBits)
	if w.WCFlags&verbs.WCFlagWithImm != 0 {
		C.ibp_wc_set_imm(c, C.uint32_t(w.ImmData))
	}
}

// SendWRsFromC appends the chain of struct ibv_send_wr at p to dst. Each
// WR's SGEs are copied into a new slice (the caller's memory may change
// after the post returns).
func SendWRsFromC(p unsafe.Pointer, dst []verbs.SendWR) []verbs.SendWR {
	for w := (*C.struct_ibv_send_wr)(p); w != nil; w = w.next {
		v := verbs.SendWR{WRID: uint64(w.wr_id), Opcode: verbs.WROpcode(w.opcode), SendFlags: verbs.SendFlags(w.send_flags),
			SGList: sgesFromC(w.sg_list, int(w.num_sge))}
		var raddr, cmp, swap C.uint64_t
		var rkey, imm C.uint32_t
		C.ibp_send_wr_fields(w, &raddr, &rkey, &cmp, &swap, &imm)
		v.RemoteAddr, v.RKey, v.CompareAdd, v.Swap = uint64(raddr), uint32(rkey), uint64(cmp), uint64(swap)
		if v.Opcode == verbs.WRSendWithImm || v.Opcode == verbs.WRRDMAWriteWithImm {
			v.ImmData = uint32(imm)
		}
		dst = append(dst, v)
	}
	return dst
}

// RecvWRsFromC appends the chain of struct ibv_recv_wr at p to dst.
func RecvWRsFromC(p unsafe.Pointer, dst []verbs.RecvWR) []verbs.RecvWR {
	for w := (*C.struct_ibv_recv_wr)(p); w != nil; w = w.next {
		dst = append(dst, verbs.RecvWR{WRID: uint64(w.wr_id), SGList: sgesFromC(w.sg_list, int(w.num_sge))})
	}
	return dst
}

func sgesFromC(p *C.struct_ibv_sge, n int) []verbs.SGE {
	if n <= 0 || p == nil {
		return nil
	}
	out := make([]verbs.SGE, n)
	for i, s := range unsafe.Slice(p, n) {
		out[i] = verbs.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: uint32(s.lkey)}
	}
	return out
}

// QPAttrFromC converts the struct ibv_qp_attr at p (an application's
// attributes, seen by a shim).
func QPAttrFromC(p unsafe.Pointer) verbs.QPAttr { return qpAttrFromC((*C.struct_ibv_qp_attr)(p)) }
