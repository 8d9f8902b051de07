package main

/*
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include "shim.h"
#include "asyncev.h"

// lip_qp_by is the QP qpn of ctx, held (lip_qp_hold): the caller
// releases it with lip_qp_unhold.
static struct lip_qp *lip_qp_by(uintptr_t ctx, uint32_t qpn)
{
	return lip_qp_hold((struct ibv_context *)ctx, qpn);
}

// lip_give_back gives the kept event type of QP qpn (of the context,
// for DEVICE_FATAL) back to the application (asyncev.h): 0, -1 with errno
// (ESRCH: the QP is gone).
static int lip_give_back(uintptr_t ctx, uint32_t qpn, int type)
{
	struct ibv_qp *qp = NULL;
	if (type != IBV_EVENT_DEVICE_FATAL) {
		struct lip_qp *q = lip_qp_by(ctx, qpn);
		if (!q) {
			errno = ESRCH;
			return -1;
		}
		qp = q->qp;
		lip_qp_unhold(q);
	}
	return lip_async_give((struct ibv_context *)ctx, qp, (enum ibv_event_type)type);
}

static struct lip_ctx *lip_ctx_by(uintptr_t ctx) { return lip_ctx_of((struct ibv_context *)ctx); }

static uint32_t lip_ntohl(uint32_t v) { return ntohl(v); }

// lip_send_wr_operands sets w's immediate (given in host order) and the
// remote operands in the member of the union its opcode uses (cgo does not
// name union members).
static void lip_send_wr_operands(struct ibv_send_wr *w, uint32_t imm, uint64_t raddr, uint32_t rkey,
				 uint64_t compare_add, uint64_t swap)
{
	w->imm_data = htonl(imm);
	if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		w->wr.atomic.remote_addr = raddr;
		w->wr.atomic.rkey = rkey;
		w->wr.atomic.compare_add = compare_add;
		w->wr.atomic.swap = swap;
	} else {
		w->wr.rdma.remote_addr = raddr;
		w->wr.rdma.rkey = rkey;
	}
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/ibv"
)

// hotpath is hotpath.c and divert.c as layer 2 drives them.
type hotpath struct{}

var (
	_ shim.Hotpath    = hotpath{}
	_ shim.Undiverter = hotpath{}
	_ shim.Waker      = hotpath{}
	_ shim.EventGiver = hotpath{}
	_ shim.Progresser = hotpath{}
	_ shim.Nudger     = hotpath{}
	_ shim.SRQHotpath = hotpath{}
)

// DivertSRQ hands the SRQ's posts to the runtime (lip_srq_divert) and
// reads the receives its ring holds that no completion retired.
func (hotpath) DivertSRQ(ctx uintptr, srq verbs.SRQ) ([]verbs.RecvWR, error) {
	s, ok := srq.(*ibv.SRQ)
	if !ok {
		return nil, fmt.Errorf("divert SRQ: not the application's (%T)", srq)
	}
	ls := C.lip_srq_of((*C.struct_ibv_srq)(s.CPtr()))
	if ls == nil {
		return nil, fmt.Errorf("divert SRQ: the hot path does not follow it")
	}
	if r, err := C.lip_srq_divert(ls); r != 0 {
		return nil, fmt.Errorf("lip_srq_divert: %w", err)
	}
	if ls.overflow != 0 {
		return nil, fmt.Errorf("divert SRQ: %d posts overran its shadow ring", uint64(ls.overflow))
	}
	var out []verbs.RecvWR
	rq := unsafe.Slice(ls.rq, int(ls.mask)+1)
	for k := uint64(ls.tail); k < uint64(ls.head); k++ {
		e := &rq[k&uint64(ls.mask)]
		if e.flags&(C.LIP_SQE_VOID|C.LIP_RQE_DONE) != 0 {
			continue
		}
		if e.flags&C.LIP_SQE_PARTIAL != 0 {
			return nil, fmt.Errorf("divert SRQ: receive %#x has more SGEs (%d) than the shadow ring keeps", uint64(e.wr_id), uint32(e.num_sge))
		}
		out = append(out, verbs.RecvWR{WRID: uint64(e.wr_id), SGList: sges(e.sge[:], int(e.num_sge))})
	}
	return out, nil
}

// lipQP is the hot path's entry of q, held until the returned release
// (lip_qp_hold: a destroy of the QP meanwhile frees it only after the
// release). nil when the hot path does not know q; release is then a
// no-op.
func lipQP(q shim.AppQP) (lq *C.struct_lip_qp, release func()) {
	lq = C.lip_qp_by(C.uintptr_t(q.Ctx), C.uint32_t(q.QPN))
	if lq == nil {
		return nil, func() {}
	}
	return lq, func() { C.lip_qp_unhold(lq) }
}

func (hotpath) Arm(q shim.AppQP, armed bool) {
	lq, release := lipQP(q)
	defer release()
	if lq != nil {
		a := C.int(0)
		if armed {
			a = 1
		}
		C.lip_qp_arm(lq, a)
	}
}

// Progress reads the QP's send ring positions (lip_qp_progress).
func (hotpath) Progress(q shim.AppQP) (posted, retired uint64, ok bool) {
	lq, release := lipQP(q)
	defer release()
	if lq == nil {
		return 0, 0, false
	}
	var p, r C.uint64_t
	C.lip_qp_progress(lq, &p, &r)
	return uint64(p), uint64(r), true
}

// Nudge posts layer 1's nudge on the QP (lip_nudge); the error wraps the
// errno that says why not.
func (hotpath) Nudge(q shim.AppQP) error {
	lq, release := lipQP(q)
	defer release()
	if lq == nil {
		return fmt.Errorf("nudge QP %#x: the hot path does not know it: %w", q.QPN, syscall.ENOENT)
	}
	if r := C.lip_nudge(lq); r != 0 {
		return fmt.Errorf("lip_nudge QP %#x: %w", q.QPN, syscall.Errno(r))
	}
	return nil
}

// Divert hands the QP to the runtime and reads its rings, which nothing
// else touches from then on.
func (hotpath) Divert(q shim.AppQP) (shim.Rings, error) {
	lq, release := lipQP(q)
	defer release()
	if lq == nil {
		return shim.Rings{}, fmt.Errorf("divert QP %#x: the hot path does not know it", q.QPN)
	}
	if r, err := C.lip_divert(lq); r != 0 {
		return shim.Rings{}, fmt.Errorf("lip_divert QP %#x: %w", q.QPN, err)
	}
	return readRings(lq), nil
}

// Undivert gives the QP's posts back to the hot path, its rings reloaded
// with st (lip_undivert); its CQs stay diverted until Release.
func (hotpath) Undivert(q shim.AppQP, st shim.Rings) error {
	lq, release := lipQP(q)
	defer release()
	if lq == nil {
		return fmt.Errorf("undivert QP %#x: the hot path does not know it", q.QPN)
	}
	if st.Unreplayable != "" {
		return fmt.Errorf("undivert QP %#x: its WRs are not whole: %s", q.QPN, st.Unreplayable)
	}
	ch, err := newUndivertChains(&st)
	if err != nil {
		return fmt.Errorf("undivert QP %#x: %w", q.QPN, err)
	}
	defer ch.free()
	if r, err := C.lip_undivert(lq, ch.sends, ch.recvs, C.uint64_t(st.NotifsDone), C.uint64_t(st.RecvsDone)); r != 0 {
		return fmt.Errorf("lip_undivert QP %#x: %w", q.QPN, err)
	}
	return nil
}

// undivertChains holds a Rings' WRs as the chains lip_undivert takes, in
// one C allocation (C must not hold Go pointers): the send WRs, the
// receive WRs, their SGEs, then the inline payloads. An inline WR's SGEs
// cover a copy of its payload (Rings.Inline), so the ring's inline copy
// is made from it.
type undivertChains struct {
	mem   unsafe.Pointer
	sends *C.struct_ibv_send_wr
	recvs *C.struct_ibv_recv_wr
}

func (u *undivertChains) free() { C.free(u.mem) }

// newUndivertChains builds st's chains (nil when st has none of a kind).
// Errors: an inline copy that does not match its WR's SGEs (Rings.Inline),
// no memory.
func newUndivertChains(st *shim.Rings) (*undivertChains, error) {
	if len(st.Inline) != 0 && len(st.Inline) != len(st.Sends) {
		return nil, fmt.Errorf("%d inline copies for %d sends", len(st.Inline), len(st.Sends))
	}
	nsge, ninl := 0, 0
	for i := range st.Sends {
		w, inl := &st.Sends[i], inlineOf(st, i)
		if err := checkInline(w, inl); err != nil {
			return nil, fmt.Errorf("send %d (wr_id %#x): %w", i, w.WRID, err)
		}
		nsge += len(w.SGList)
		ninl += len(inl)
	}
	for i := range st.Recvs {
		nsge += len(st.Recvs[i].SGList)
	}
	offRecv := len(st.Sends) * C.sizeof_struct_ibv_send_wr
	offSGE := offRecv + len(st.Recvs)*C.sizeof_struct_ibv_recv_wr
	offInl := offSGE + nsge*C.sizeof_struct_ibv_sge
	u := &undivertChains{}
	if offInl+ninl == 0 {
		return u, nil
	}
	if u.mem = C.calloc(1, C.size_t(offInl+ninl)); u.mem == nil {
		return nil, fmt.Errorf("calloc %d bytes for the WRs: %w", offInl+ninl, syscall.ENOMEM)
	}
	sends := unsafe.Slice((*C.struct_ibv_send_wr)(u.mem), len(st.Sends))
	recvs := unsafe.Slice((*C.struct_ibv_recv_wr)(unsafe.Add(u.mem, offRecv)), len(st.Recvs))
	sges := unsafe.Slice((*C.struct_ibv_sge)(unsafe.Add(u.mem, offSGE)), nsge)
	inl := unsafe.Slice((*byte)(unsafe.Add(u.mem, offInl)), ninl)
	k, off := 0, 0
	for i := range st.Sends {
		w, cw := &st.Sends[i], &sends[i]
		sg := sges[k : k+len(w.SGList)]
		k += len(w.SGList)
		fillSGEs(sg, w.SGList)
		if w.SendFlags&verbs.SendInline != 0 {
			off += pointAtCopy(sg, inl[off:], inlineOf(st, i))
		}
		cw.wr_id = C.uint64_t(w.WRID)
		cw.opcode = uint32(w.Opcode)
		cw.send_flags = C.uint(w.SendFlags)
		cw.num_sge = C.int(len(sg))
		if len(sg) > 0 {
			cw.sg_list = &sg[0]
		}
		if i+1 < len(sends) {
			cw.next = &sends[i+1]
		}
		C.lip_send_wr_operands(cw, C.uint32_t(w.ImmData), C.uint64_t(w.RemoteAddr), C.uint32_t(w.RKey),
			C.uint64_t(w.CompareAdd), C.uint64_t(w.Swap))
	}
	for i := range st.Recvs {
		w, cw := &st.Recvs[i], &recvs[i]
		sg := sges[k : k+len(w.SGList)]
		k += len(w.SGList)
		fillSGEs(sg, w.SGList)
		cw.wr_id = C.uint64_t(w.WRID)
		cw.num_sge = C.int(len(sg))
		if len(sg) > 0 {
			cw.sg_list = &sg[0]
		}
		if i+1 < len(recvs) {
			cw.next = &recvs[i+1]
		}
	}
	if len(sends) > 0 {
		u.sends = &sends[0]
	}
	if len(recvs) > 0 {
		u.recvs = &recvs[0]
	}
	return u, nil
}

// inlineOf is the inline copy of st.Sends[i] (nil when there is none).
func inlineOf(st *shim.Rings, i int) []byte {
	if i < len(st.Inline) {
		return st.Inline[i]
	}
	return nil
}

// checkInline: an inline WR's copy holds its SGEs' bytes; other WRs have
// none.
func checkInline(w *verbs.SendWR, inl []byte) error {
	if w.SendFlags&verbs.SendInline == 0 {
		if inl != nil {
			return fmt.Errorf("not inline, but has an inline copy")
		}
		return nil
	}
	var n uint64
	for _, s := range w.SGList {
		n += uint64(s.Length)
	}
	if uint64(len(inl)) != n {
		return fmt.Errorf("inline copy of %d bytes for %d bytes of SGEs", len(inl), n)
	}
	return nil
}

func fillSGEs(dst []C.struct_ibv_sge, src []verbs.SGE) {
	for j, e := range src {
		dst[j] = C.struct_ibv_sge{addr: C.uint64_t(e.Addr), length: C.uint32_t(e.Length), lkey: C.uint32_t(e.LKey)}
	}
}

// pointAtCopy copies payload into dst (C memory) and points sg, the SGEs
// of an inline WR, at consecutive pieces of it, their lengths kept.
// It returns the bytes used.
func pointAtCopy(sg []C.struct_ibv_sge, dst, payload []byte) int {
	n := copy(dst, payload)
	off := 0
	for j := range sg {
		sg[j].addr = C.uint64_t(uintptr(unsafe.Pointer(unsafe.SliceData(dst))) + uintptr(off))
		off += int(sg[j].length)
	}
	return n
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

// GiveBack returns a kept async event to the application (asyncev.c): its
// next ibv_get_async_event of the context gets it, and one blocked there
// wakes.
func (hotpath) GiveBack(ctx uintptr, qpn uint32, ev verbs.EventType) error {
	if r, err := C.lip_give_back(C.uintptr_t(ctx), C.uint32_t(qpn), C.int(ev)); r != 0 {
		return fmt.Errorf("give %v of QP %#x back: lip_async_give: %w", ev, qpn, err)
	}
	return nil
}
