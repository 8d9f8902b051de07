package sim

import (
	"encoding/binary"

	"github.com/ibpath/ibpath/verbs"
)

// onRequest is the responder: PSN checks, then execution of the request
// against registered memory and the receive queue, then the response.
func (q *QP) onRequest(p *packet) {
	switch q.state {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD:
	default:
		return // a QP in RESET, INIT or ERR silently drops requests
	}
	if q.state == verbs.QPSRTR && !q.commEst {
		q.commEst = true
		q.raise(verbs.EventCommEst)
	}
	d := psnDiff(p.psn, q.ePSN)
	countSeq(p, d)
	if d > 0 {
		// An earlier message was lost: one NAK per sequence error.
		if !q.nakSent {
			q.nakSent = true
			q.respond(pktNakSeq, q.ePSN, 1, p)
		}
		return
	}
	if d < 0 {
		q.duplicate(p)
		return
	}
	switch p.op {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		q.execWrite(p)
	case verbs.WRSend, verbs.WRSendWithImm:
		q.execSend(p)
	case verbs.WRRDMARead:
		q.execRead(p)
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAdd:
		q.execAtomic(p)
	}
}

func (q *QP) advance(p *packet) {
	q.staleExec(p)
	q.nakSent = false
	q.ePSN = (q.ePSN + p.npkts) & psnMask
}

func (q *QP) allows(a verbs.AccessFlags) bool { return q.attr.QPAccessFlags&a != 0 }

func (q *QP) execWrite(p *packet) {
	if p.op == verbs.WRRDMAWriteWithImm && q.rq.empty() {
		q.rnr(p)
		return
	}
	if !q.allows(verbs.AccessRemoteWrite) {
		q.invalidReq(p)
		return
	}
	if p.length > 0 { // a zero-length WRITE checks no R_Key
		dst, ok := q.hca.span(q.pd, p.rkey, p.raddr, p.length, verbs.AccessRemoteWrite)
		if !ok {
			q.accessErr(p)
			return
		}
		copySegs([][]byte{dst}, payloadSegs(p))
	}
	if p.op == verbs.WRRDMAWriteWithImm {
		r := q.rq.front()
		q.consumeRecv()
		q.recvDone(r.wrid, verbs.WCRecvRDMAWithImm, p, true)
	}
	q.advance(p)
	q.respond(pktAck, (p.psn+p.npkts-1)&psnMask, 1, p)
}

func (q *QP) execSend(p *packet) {
	if q.rq.empty() {
		q.rnr(p)
		return
	}
	r := q.rq.front()
	var segs [maxSGE][]byte
	var room uint64
	n := 0
	for _, s := range r.sges {
		b, ok := q.hca.span(q.pd, s.LKey, s.Addr, s.Length, verbs.AccessLocalWrite)
		if !ok {
			q.recvError(r, verbs.WCLocProtErr, pktNakRemOp, p)
			return
		}
		segs[n] = b
		n++
		room += uint64(s.Length)
	}
	if uint64(p.length) > room {
		q.recvError(r, verbs.WCLocLenErr, pktNakInvReq, p)
		return
	}
	copySegs(segs[:n], payloadSegs(p))
	q.consumeRecv()
	q.recvDone(r.wrid, verbs.WCRecv, p, p.op == verbs.WRSendWithImm)
	q.advance(p)
	q.respond(pktAck, (p.psn+p.npkts-1)&psnMask, 1, p)
}

func (q *QP) execRead(p *packet) {
	if !q.allows(verbs.AccessRemoteRead) {
		q.invalidReq(p)
		return
	}
	var src []byte
	if p.length > 0 {
		b, ok := q.hca.span(q.pd, p.rkey, p.raddr, p.length, verbs.AccessRemoteRead)
		if !ok {
			q.accessErr(p)
			return
		}
		src = b
	}
	q.advance(p)
	r := q.respond(pktReadResp, p.psn, p.npkts, p)
	if r != nil {
		r.rdata = src
	}
}

func (q *QP) execAtomic(p *packet) {
	if !q.allows(verbs.AccessRemoteAtomic) {
		q.invalidReq(p)
		return
	}
	if p.raddr%8 != 0 {
		q.invalidReq(p)
		return
	}
	b, ok := q.hca.span(q.pd, p.rkey, p.raddr, 8, verbs.AccessRemoteAtomic)
	if !ok {
		q.accessErr(p)
		return
	}
	orig := binary.LittleEndian.Uint64(b)
	switch p.op {
	case verbs.WRAtomicFetchAdd:
		binary.LittleEndian.PutUint64(b, orig+p.cmp)
	case verbs.WRAtomicCmpAndSwp:
		if orig == p.cmp {
			binary.LittleEndian.PutUint64(b, p.swap)
		}
	}
	q.atomicCache[q.atomicNext] = atomicEntry{psn: p.psn, orig: orig, valid: true}
	q.atomicNext = (q.atomicNext + 1) % len(q.atomicCache)
	q.advance(p)
	if r := q.respond(pktAtomicResp, p.psn, 1, p); r != nil {
		r.orig = orig
	}
}

// duplicate answers a request already executed (its ACK was lost): WRITE
// and SEND are acknowledged again without executing, a READ is read again,
// an atomic returns its saved result.
func (q *QP) duplicate(p *packet) {
	switch {
	case p.op == verbs.WRRDMARead:
		var src []byte
		if p.length > 0 {
			b, ok := q.hca.span(q.pd, p.rkey, p.raddr, p.length, verbs.AccessRemoteRead)
			if !ok {
				return
			}
			src = b
		}
		if r := q.respond(pktReadResp, p.psn, p.npkts, p); r != nil {
			r.rdata = src
		}
	case p.op.IsAtomic():
		for _, e := range q.atomicCache {
			if e.valid && e.psn == p.psn {
				if r := q.respond(pktAtomicResp, p.psn, 1, p); r != nil {
					r.orig = e.orig
				}
				return
			}
		}
	default:
		q.respond(pktAck, (q.ePSN-1)&psnMask, 1, p)
	}
}

func (q *QP) rnr(p *packet) {
	q.nakSent = true
	if r := q.respond(pktNakRNR, p.psn, 1, p); r != nil {
		r.rnrTimer = q.attr.MinRNRTimer
	}
}

// accessErr: the request violates the QP's or the MR's access rights. The
// responder raises QP_ACCESS_ERR and fails; the requester gets a NAK.
// invalidReq answers a request the QP cannot take: an operation its
// access flags do not enable (rxe check_op_valid, qib/hfi1 nack_inv), or
// a misaligned atomic. The requester gets REM_INV_REQ_ERR; the responder
// raises QP_REQ_ERR (mlx5 maps WQ_INVAL_REQ_ERROR to it) and goes to ERR.
func (q *QP) invalidReq(p *packet) {
	q.raise(verbs.EventQPReqErr)
	q.respond(pktNakInvReq, p.psn, 1, p)
	q.enterErr(^uint64(0), verbs.WCWRFlushErr)
}

func (q *QP) accessErr(p *packet) {
	q.raise(verbs.EventQPAccessErr)
	q.respond(pktNakAccess, p.psn, 1, p)
	q.enterErr(^uint64(0), verbs.WCWRFlushErr)
}

// recvError fails the receive WR r with status, NAKs the requester and
// moves the responder to ERR.
func (q *QP) recvError(r *recvWQE, status verbs.WCStatus, nak pktKind, p *packet) {
	q.consumeRecv()
	q.recvCQ.push(verbs.WC{WRID: r.wrid, Status: status, QPNum: q.qpn}, false)
	q.respond(nak, p.psn, 1, p)
	q.enterErr(^uint64(0), verbs.WCWRFlushErr)
}

// consumeRecv takes the front receive WQE off the QP's receive queue or
// its SRQ; an SRQ whose armed limit the count falls below raises
// SRQ_LIMIT_REACHED once and disarms (rule 99).
func (q *QP) consumeRecv() {
	q.rq.head++
	if s := q.srq; s != nil && s.limit > 0 && s.rq.len() < s.limit {
		s.limit = 0
		s.raise(verbs.EventSRQLimitReached)
	}
}

func (q *QP) recvDone(wrid uint64, op verbs.WCOpcode, p *packet, withImm bool) {
	wc := verbs.WC{WRID: wrid, Status: verbs.WCSuccess, Opcode: op, ByteLen: p.length, QPNum: q.qpn,
		SrcQP: p.sqpn, SLID: p.slid, SL: p.sl}
	if withImm {
		wc.ImmData = p.imm
		wc.WCFlags |= verbs.WCFlagWithImm
	}
	if p.global {
		wc.WCFlags |= verbs.WCFlagGRH
	}
	q.recvCQ.push(wc, p.flags&verbs.SendSolicited != 0)
}

// respond sends a response along the responder's primary path and returns
// the packet (nil if it was dropped at once) so the caller can fill data.
func (q *QP) respond(kind pktKind, psn, npkts uint32, req *packet) *packet {
	f := q.ctx.fab()
	r := f.newPacket()
	r.kind = kind
	r.sqpn, r.dqpn = q.qpn, req.sqpn
	r.psn, r.npkts = psn, npkts
	bytes := uint32(0)
	if kind == pktReadResp {
		bytes = req.length
	}
	if !f.transmit(q, &q.prim, r, bytes) {
		return nil
	}
	return r
}
