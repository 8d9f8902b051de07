package sim

import (
	"github.com/ibpath/ibpath/verbs"
)

// PostSend implements ibv_post_send. On a QP in ERR every WR completes at
// once with WR_FLUSH_ERR, as on mlx5.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	const op = "ibv_post_send"
	if q.destroyed {
		return 0, verbs.Errorf(op, verbs.EINVAL, "QP destroyed")
	}
	if err := q.ctx.usable(op); err != nil {
		return 0, err
	}
	n := 0
	var err error
	for i := range wrs {
		if err = q.postOneSend(&wrs[i]); err != nil {
			break
		}
		n++
	}
	if n > 0 {
		q.pump()
	}
	return n, err
}

func (q *QP) postOneSend(wr *verbs.SendWR) error {
	const op = "ibv_post_send"
	switch wr.Opcode {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRSend, verbs.WRSendWithImm,
		verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAdd:
	default:
		return verbs.Errorf(op, verbs.EINVAL, "opcode %v not supported on RC here", wr.Opcode)
	}
	if len(wr.SGList) > q.cap.MaxSendSGE {
		return verbs.Errorf(op, verbs.EINVAL, "%d SGEs above max_send_sge %d", len(wr.SGList), q.cap.MaxSendSGE)
	}
	var total uint64
	for _, s := range wr.SGList {
		total += uint64(s.Length)
	}
	if total > maxMsgSize {
		return verbs.Errorf(op, verbs.EINVAL, "message of %d bytes above max_msg_sz", total)
	}
	inline := wr.SendFlags&verbs.SendInline != 0
	if inline {
		if wr.Opcode == verbs.WRRDMARead || wr.Opcode.IsAtomic() {
			return verbs.Errorf(op, verbs.EINVAL, "IBV_SEND_INLINE with %v", wr.Opcode)
		}
		if total > uint64(q.cap.MaxInlineData) {
			return verbs.Errorf(op, verbs.EINVAL, "%d inline bytes above max_inline_data %d", total, q.cap.MaxInlineData)
		}
	}
	if wr.Opcode.IsAtomic() && (len(wr.SGList) != 1 || wr.SGList[0].Length != 8) {
		return verbs.Errorf(op, verbs.EINVAL, "atomic needs one 8-byte SGE")
	}
	switch q.state {
	case verbs.QPSErr:
		q.sendCQ.push(verbs.WC{WRID: wr.WRID, Status: verbs.WCWRFlushErr, QPNum: q.qpn}, false)
		return nil
	case verbs.QPSRTS, verbs.QPSSQD:
	default:
		return verbs.Errorf(op, verbs.EINVAL, "QP %#x is %v, not ready to send", q.qpn, q.state)
	}
	if q.sqTail-q.sqHead >= uint64(len(q.sq)) {
		return verbs.Errorf(op, verbs.ENOMEM, "send queue full (%d WRs)", len(q.sq))
	}
	w := &q.sq[q.sqTail&q.sqMask]
	w.wrid, w.op, w.flags, w.imm = wr.WRID, wr.Opcode, wr.SendFlags, wr.ImmData
	w.raddr, w.rkey, w.cmp, w.swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	w.sges = append(w.sges[:0], wr.SGList...)
	w.length = uint32(total)
	w.isInline = inline
	w.sent, w.done = false, false
	w.signaled = q.sqSigAll || wr.SendFlags&verbs.SendSignaled != 0
	w.local = w.local[:0]
	if inline {
		// Inline data is copied now and names memory by address, not key.
		w.inline = w.inline[:0]
		for _, s := range wr.SGList {
			m := q.hca.host.memAt(s.Addr, s.Length)
			if m == nil && s.Length > 0 {
				return verbs.Errorf(op, verbs.EINVAL, "inline SGE %#x+%d is not host memory known to the simulator", s.Addr, s.Length)
			}
			w.inline = append(w.inline, m...)
		}
	}
	q.sqTail++
	return nil
}

// PostRecv implements ibv_post_recv.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	const op = "ibv_post_recv"
	if q.destroyed {
		return 0, verbs.Errorf(op, verbs.EINVAL, "QP destroyed")
	}
	if err := q.ctx.usable(op); err != nil {
		return 0, err
	}
	if q.srq != nil && len(wrs) > 0 {
		// rxe_post_recv refuses; the QP has no receive queue of its own
		return 0, verbs.Errorf(op, verbs.EINVAL, "QP %#x receives through an SRQ (post to the SRQ)", q.qpn)
	}
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGList) > q.cap.MaxRecvSGE {
			return i, verbs.Errorf(op, verbs.EINVAL, "%d SGEs above max_recv_sge %d", len(wr.SGList), q.cap.MaxRecvSGE)
		}
		switch q.state {
		case verbs.QPSReset:
			return i, verbs.Errorf(op, verbs.EINVAL, "QP %#x is RESET", q.qpn)
		case verbs.QPSErr:
			q.recvCQ.push(verbs.WC{WRID: wr.WRID, Status: verbs.WCWRFlushErr, QPNum: q.qpn}, false)
			continue
		}
		if q.rq.full() {
			return i, verbs.Errorf(op, verbs.ENOMEM, "receive queue full (%d WRs)", len(q.rq.wqe))
		}
		q.rq.push(wr)
	}
	return len(wrs), nil
}
