package sim

import (
	"encoding/binary"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

func isRdAtomic(op verbs.WROpcode) bool { return op == verbs.WRRDMARead || op.IsAtomic() }

// pump transmits send WRs in order while the QP may: RTS (or, in SQD, only
// what was already in progress), no RNR wait, and within max_rd_atomic and
// IBV_SEND_FENCE limits.
func (q *QP) pump() {
	if !q.hca.alive || q.rnrWait || (q.state != verbs.QPSRTS && q.state != verbs.QPSSQD) {
		return
	}
	f := q.ctx.fab()
	for q.sqNext < q.sqTail {
		if q.state == verbs.QPSSQD && q.sqNext >= q.sqHigh {
			break
		}
		w := &q.sq[q.sqNext&q.sqMask]
		rd := isRdAtomic(w.op)
		if rd {
			if q.attr.MaxRdAtomic == 0 {
				q.enterErr(q.sqNext, verbs.WCLocQPOpErr)
				return
			}
			if q.rdInFlight >= int(q.attr.MaxRdAtomic) {
				break
			}
		}
		if w.flags&verbs.SendFence != 0 && q.rdInFlight > 0 {
			break
		}
		if q.awaitPort() {
			break // the port serves the QPs waiting for it in turn
		}
		if !w.sent {
			if !q.resolveLocal(w) {
				q.enterErr(q.sqNext, verbs.WCLocProtErr)
				return
			}
			w.psn = q.nextPSN
			w.npkts = q.npkts(w)
			q.nextPSN = (q.nextPSN + w.npkts) & psnMask
			w.sent = true
		} else {
			f.stats.Retransmits++
		}
		if q.sqHead == q.sqNext {
			q.lastProgress = f.now // the ACK timer starts with the first WR in flight
		}
		if rd {
			q.rdInFlight++
		}
		q.sendRequest(w)
		q.sqNext++
		if q.sqNext > q.sqHigh {
			q.sqHigh = q.sqNext
		}
	}
	q.armTimer()
}

// npkts is how many PSNs a message spans: one per path-MTU packet (a READ
// reserves one per response packet), at least one.
func (q *QP) npkts(w *sendWQE) uint32 {
	if w.op.IsAtomic() {
		return 1
	}
	mtu := uint32(q.attr.PathMTU.Bytes())
	if mtu == 0 || w.length == 0 {
		return 1
	}
	return (w.length + mtu - 1) / mtu
}

// resolveLocal checks the local SGEs' keys, PD and access (LOCAL_WRITE for
// the targets of READ and atomics) and records the memory they name.
func (q *QP) resolveLocal(w *sendWQE) bool {
	w.local = w.local[:0]
	if w.isInline {
		return true
	}
	need := verbs.AccessFlags(0)
	if isRdAtomic(w.op) {
		need = verbs.AccessLocalWrite
	}
	for _, s := range w.sges {
		b, ok := q.hca.span(q.pd, s.LKey, s.Addr, s.Length, need)
		if !ok {
			return false
		}
		w.local = append(w.local, b)
	}
	return true
}

func (q *QP) sendRequest(w *sendWQE) {
	f := q.ctx.fab()
	p := f.newPacket()
	p.kind = pktRequest
	p.sqpn, p.dqpn = q.qpn, q.attr.DestQPN
	p.psn, p.npkts = w.psn, w.npkts
	p.op, p.flags, p.length = w.op, w.flags, w.length
	p.raddr, p.rkey, p.imm, p.cmp, p.swap = w.raddr, w.rkey, w.imm, w.cmp, w.swap
	p.wqe = w
	bytes := w.length
	switch {
	case w.op == verbs.WRRDMARead:
		bytes = 16
	case w.op.IsAtomic():
		bytes = 28
	}
	f.stats.Requests++
	f.transmit(q, &q.prim, p, bytes)
}

// rewind makes idx the next WR to transmit (go-back-N).
func (q *QP) rewind(idx uint64) {
	q.sqNext = idx
	q.rdInFlight = 0
	for i := q.sqHead; i < idx; i++ {
		w := &q.sq[i&q.sqMask]
		if isRdAtomic(w.op) && !w.done {
			q.rdInFlight++
		}
	}
}

func (q *QP) armTimer() {
	if q.timerArmed || q.sqHead == q.sqNext {
		return
	}
	to := verbs.TimeoutDuration(q.prim.timeout)
	if to == 0 {
		return // timeout 0: wait forever
	}
	f := q.ctx.fab()
	q.timerArmed = true
	d := q.lastProgress + to - f.now
	if d < 0 {
		d = 0
	}
	if f.cfg.TimerLate > 0 {
		d += time.Duration(f.rng.Int64N(int64(f.cfg.TimerLate) + 1))
	}
	f.schedule(d, event{kind: evRetryTimer, qp: q, gen: q.incarn})
}

func (q *QP) onRetryTimer(gen uint32) {
	if gen != q.incarn {
		return
	}
	q.timerArmed = false
	if (q.state != verbs.QPSRTS && q.state != verbs.QPSSQD) || q.sqHead == q.sqNext {
		return
	}
	f := q.ctx.fab()
	to := verbs.TimeoutDuration(q.prim.timeout)
	if q.rnrWait || f.now < q.lastProgress+to {
		q.armTimer()
		return
	}
	f.stats.RetryTimeouts++
	if q.prim.port != nil {
		q.prim.port.cnt.ackTimeouts++
	}
	if q.retries < int(q.attr.RetryCnt) || (f.cfg.EndlessRetry7 && q.attr.RetryCnt == 7) {
		q.retries++
		if f.tracer != nil {
			f.trace(q.hca, "retry", "qp %#x local ACK timeout, retry %d/%d from psn %d",
				q.qpn, q.retries, q.attr.RetryCnt, q.sq[q.sqHead&q.sqMask].psn)
		}
		q.rewind(q.sqHead)
		q.lastProgress = f.now
		q.pump()
		return
	}
	q.retryExhausted()
}

func (q *QP) onRNRTimer(gen uint32) {
	if gen != q.incarn || !q.rnrWait {
		return
	}
	q.rnrWait = false
	q.lastProgress = q.ctx.fab().now
	q.pump()
}

// onResponse handles ACKs, read and atomic responses and NAKs.
func (q *QP) onResponse(p *packet) {
	if q.state != verbs.QPSRTS && q.state != verbs.QPSSQD {
		return
	}
	switch p.kind {
	case pktAck, pktReadResp, pktAtomicResp:
		q.ackUpTo((p.psn+p.npkts-1)&psnMask, p)
	case pktNakSeq:
		if q.prim.port != nil {
			q.prim.port.cnt.seqNaks++
		}
		q.ackUpTo((p.psn-1)&psnMask, nil)
		if idx, ok := q.findPSN(p.psn); ok && idx < q.sqNext {
			// A sequence NAK restarts the requester like a timeout and
			// counts against retry_cnt (hfi1_restart_rc, qib_restart_rc,
			// rxe's completer): a peer that only NAKs exhausts it.
			f := q.ctx.fab()
			if q.retries >= int(q.attr.RetryCnt) && !(f.cfg.EndlessRetry7 && q.attr.RetryCnt == 7) {
				q.retryExhausted()
				return
			}
			q.retries++
			q.rewind(idx)
			q.lastProgress = f.now
			q.pump()
		}
	case pktNakRNR:
		q.ackUpTo((p.psn-1)&psnMask, nil)
		idx, ok := q.findPSN(p.psn)
		if !ok || q.rnrWait {
			return
		}
		q.rnrRetries++
		if q.attr.RNRRetry != 7 && q.rnrRetries > int(q.attr.RNRRetry) {
			q.enterErr(idx, verbs.WCRNRRetryExcErr)
			return
		}
		f := q.ctx.fab()
		q.rewind(idx)
		q.rnrWait = true
		q.lastProgress = f.now
		f.schedule(verbs.RNRTimerDuration(p.rnrTimer), event{kind: evRNRTimer, qp: q, gen: q.incarn})
	case pktNakInvReq, pktNakAccess, pktNakRemOp:
		q.ackUpTo((p.psn-1)&psnMask, nil)
		if idx, ok := q.findPSN(p.psn); ok {
			st := map[pktKind]verbs.WCStatus{pktNakInvReq: verbs.WCRemInvReqErr,
				pktNakAccess: verbs.WCRemAccessErr, pktNakRemOp: verbs.WCRemOpErr}[p.kind]
			q.enterErr(idx, st)
		}
	}
}

// findPSN finds the transmitted WR whose PSN range holds psn.
func (q *QP) findPSN(psn uint32) (uint64, bool) {
	for i := q.sqHead; i < q.sqHigh; i++ {
		w := &q.sq[i&q.sqMask]
		if d := psnDiff(psn, w.psn); d >= 0 && d < int32(w.npkts) {
			return i, true
		}
	}
	return 0, false
}

// ackUpTo completes, in order, the WRs acknowledged up to PSN last. A READ
// or atomic completes only with its response (p); an ACK beyond one whose
// response was lost makes the requester resend from it.
func (q *QP) ackUpTo(last uint32, p *packet) {
	f := q.ctx.fab()
	progress := false
	for q.sqHead < q.sqHigh {
		w := &q.sq[q.sqHead&q.sqMask]
		if psnDiff(last, (w.psn+w.npkts-1)&psnMask) < 0 {
			break
		}
		if isRdAtomic(w.op) && !w.done {
			if p == nil || (p.kind != pktReadResp && p.kind != pktAtomicResp) || p.psn != w.psn {
				if q.sqNext > q.sqHead {
					q.rewind(q.sqHead)
				}
				break
			}
			q.finishRead(w, p)
			w.done = true
			if q.sqHead < q.sqNext {
				q.rdInFlight--
			}
		}
		q.complete(w)
		q.sqHead++
		progress = true
	}
	if q.sqNext < q.sqHead {
		q.sqNext = q.sqHead
		q.rdInFlight = 0
	}
	if progress {
		q.retries, q.rnrRetries = 0, 0
		q.lastProgress = f.now
		q.checkDrained()
	}
	q.pump()
}

// finishRead lands a READ response or an atomic's original value in the
// WR's local memory.
func (q *QP) finishRead(w *sendWQE, p *packet) {
	if p.kind == pktAtomicResp {
		if len(w.local) == 1 && len(w.local[0]) == 8 {
			binary.LittleEndian.PutUint64(w.local[0], p.orig)
		}
		return
	}
	copySegs(w.local, [][]byte{p.rdata})
}

// complete reports a successful WR if it is signaled.
func (q *QP) complete(w *sendWQE) {
	if !w.signaled {
		return
	}
	wc := verbs.WC{WRID: w.wrid, Status: verbs.WCSuccess, Opcode: verbs.WCOpcodeFor(w.op), QPNum: q.qpn}
	switch {
	case w.op == verbs.WRRDMARead:
		wc.ByteLen = w.length
	case w.op.IsAtomic():
		wc.ByteLen = 8
	}
	q.sendCQ.push(wc, false)
}

// checkDrained raises SQ_DRAINED once an SQD QP has no WR in progress.
func (q *QP) checkDrained() {
	if q.state != verbs.QPSSQD || !q.draining || q.sqHead < q.sqHigh {
		return
	}
	q.draining = false
	if q.attr.EnSQDAsyncNotify {
		q.raise(verbs.EventSQDrained)
	}
}

// copySegs copies src into dst segment by segment, as far as both go.
func copySegs(dst, src [][]byte) int {
	n, di, si, doff, soff := 0, 0, 0, 0, 0
	for di < len(dst) && si < len(src) {
		c := copy(dst[di][doff:], src[si][soff:])
		n += c
		doff += c
		soff += c
		if doff == len(dst[di]) {
			di, doff = di+1, 0
		}
		if soff == len(src[si]) {
			si, soff = si+1, 0
		}
	}
	return n
}
