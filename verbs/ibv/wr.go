//go:build linux && cgo

package ibv

/*
#cgo noescape ibp_post_send
#cgo nocallback ibp_post_send
#cgo noescape ibp_post_recv
#cgo nocallback ibp_post_recv
#include "helpers.h"
*/
import "C"

import (
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// Work requests are copied into per-QP C arrays (struct ibp_scratch, one
// per direction, grown with realloc when a larger batch arrives) and
// chained there into struct ibv_send_wr / ibv_recv_wr lists, so posting
// allocates nothing on the Go heap and no Go pointer reaches C memory.

// fillSend copies wrs into s. It reports the number of SGEs used, or -1
// when the scratch cannot grow.
func fillSend(s *C.struct_ibp_scratch, wrs []verbs.SendWR) int {
	nsge := 0
	for i := range wrs {
		nsge += len(wrs[i].SGList)
	}
	if C.ibp_scratch_reserve(s, C.int(len(wrs)), C.int(nsge)) != 0 {
		return -1
	}
	fw := unsafe.Slice(s.swr, len(wrs))
	sg := unsafe.Slice(s.sge, nsge)
	k := 0
	for i := range wrs {
		w := &wrs[i]
		fw[i] = C.struct_ibp_send_wr{
			wr_id:       C.uint64_t(w.WRID),
			remote_addr: C.uint64_t(w.RemoteAddr),
			compare_add: C.uint64_t(w.CompareAdd),
			swap:        C.uint64_t(w.Swap),
			rkey:        C.uint32_t(w.RKey),
			imm_data:    C.uint32_t(w.ImmData),
			send_flags:  C.uint32_t(w.SendFlags),
			opcode:      C.uint32_t(w.Opcode),
			num_sge:     C.uint32_t(len(w.SGList)),
		}
		for _, e := range w.SGList {
			sg[k] = C.struct_ibv_sge{addr: C.uint64_t(e.Addr), length: C.uint32_t(e.Length), lkey: C.uint32_t(e.LKey)}
			k++
		}
	}
	return nsge
}

func fillRecv(s *C.struct_ibp_scratch, wrs []verbs.RecvWR) int {
	nsge := 0
	for i := range wrs {
		nsge += len(wrs[i].SGList)
	}
	if C.ibp_scratch_reserve(s, C.int(len(wrs)), C.int(nsge)) != 0 {
		return -1
	}
	fw := unsafe.Slice(s.rwr, len(wrs))
	sg := unsafe.Slice(s.sge, nsge)
	k := 0
	for i := range wrs {
		w := &wrs[i]
		fw[i] = C.struct_ibp_recv_wr{wr_id: C.uint64_t(w.WRID), num_sge: C.uint32_t(len(w.SGList))}
		for _, e := range w.SGList {
			sg[k] = C.struct_ibv_sge{addr: C.uint64_t(e.Addr), length: C.uint32_t(e.Length), lkey: C.uint32_t(e.LKey)}
			k++
		}
	}
	return nsge
}

// PostSend implements ibv_post_send: all of wrs in one call. On error,
// wrs[n] is the WR the provider refused (bad_wr).
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	q.smu.Lock()
	defer q.smu.Unlock()
	if q.sbuf == nil {
		return 0, verbs.Errorf("ibv_post_send", verbs.EINVAL, "QP %#x destroyed or released", q.QPN())
	}
	if fillSend(q.sbuf, wrs) < 0 {
		return 0, verbs.Errorf("ibv_post_send", verbs.ENOMEM, "scratch for %d WRs", len(wrs))
	}
	var bad C.int
	r, err := C.ibp_post_send(q.ctx.ops, q.c, q.sbuf, C.int(len(wrs)), &bad)
	if r != 0 {
		n := int(bad)
		return n, retErr("ibv_post_send", r, err, "QP %#x, WR %d of %d (wr_id %#x, %v)", q.QPN(), n, len(wrs), wrs[min(n, len(wrs)-1)].WRID, wrs[min(n, len(wrs)-1)].Opcode)
	}
	return len(wrs), nil
}

// PostRecv implements ibv_post_recv, like PostSend.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.rbuf == nil {
		return 0, verbs.Errorf("ibv_post_recv", verbs.EINVAL, "QP %#x destroyed or released", q.QPN())
	}
	if fillRecv(q.rbuf, wrs) < 0 {
		return 0, verbs.Errorf("ibv_post_recv", verbs.ENOMEM, "scratch for %d WRs", len(wrs))
	}
	var bad C.int
	r, err := C.ibp_post_recv(q.ctx.ops, q.c, q.rbuf, C.int(len(wrs)), &bad)
	if r != 0 {
		n := int(bad)
		return n, retErr("ibv_post_recv", r, err, "QP %#x, WR %d of %d (wr_id %#x)", q.QPN(), n, len(wrs), wrs[min(n, len(wrs)-1)].WRID)
	}
	return len(wrs), nil
}
