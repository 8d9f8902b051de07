package demo

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// Application traffic shape.
const (
	slotSize  = 4096             // bytes of bulk data per notification
	nSlots    = 16               // ring of slots; twice the window, so a slot is never rewritten in flight
	window    = 8                // notifications in flight per endpoint
	recvDepth = 32               // receives kept posted
	recvBase  = 1_000_000_000    // receive wr_ids start here; send wr_ids are 2*seq and 2*seq+1
	magic     = 0x41504249       // "IBPA"
	pauseMin  = time.Millisecond // a longer gap between completions is a pause
)

// traffic is the application's bookkeeping for one endpoint.
type traffic struct {
	nextSeq    uint32 // next notification to send
	expect     uint32 // next notification expected from the peer
	nextRecv   uint64
	inflight   int // send WRs posted and not completed
	failed     bool
	stalled    bool
	stallSince time.Duration
	lastOK     time.Duration // last successful completion
	pullGap    time.Duration // the gap in completions across the cable pull
	nextDone   uint64        // wr_id of the next send completion due
	orderErrs  int           // send completions other than the one due
	wrongQPN   int           // completions naming another QP

	posted, sendOK, sendErr, recvOK, recvErr, verified, dataErrs int
	errSeq                                                       []verbs.WCStatus
	winOK, winVerified                                           int // since the last window summary
}

// fill writes the pattern of notification seq into a slot.
func fill(b []byte, tag byte, seq uint32) {
	binary.LittleEndian.PutUint32(b[0:], magic)
	binary.LittleEndian.PutUint32(b[4:], seq)
	for i := 8; i < len(b); i++ {
		b[i] = byte(uint32(i)*7 + seq*13 + uint32(tag))
	}
}

// check reports whether a slot holds the pattern of notification seq.
func check(b []byte, tag byte, seq uint32) bool {
	if binary.LittleEndian.Uint32(b[0:]) != magic || binary.LittleEndian.Uint32(b[4:]) != seq {
		return false
	}
	for i := 8; i < len(b); i++ {
		if b[i] != byte(uint32(i)*7+seq*13+uint32(tag)) {
			return false
		}
	}
	return true
}

func slot(b []byte, i int) []byte { return b[i*slotSize : (i+1)*slotSize] }

// canPost: the endpoint is healthy and its window has room for a pair.
func (e *endpoint) canPost() bool {
	return e.healthy() && e.t.inflight+2 <= 2*window
}

// healthy: the application has seen no error and its QP takes WRs: in RTS,
// or, protected, through a connection whose error has not surfaced.
func (e *endpoint) healthy() bool {
	if e.l2 != nil {
		sq, _ := e.l2.conn.State()
		return !e.t.failed && sq != fsm.SQSurfaced
	}
	return !e.t.failed && e.qp.State() == verbs.QPSRTS
}

// postSend and postRecv post through layer 2 when the QP is protected.
func (e *endpoint) postSend(wrs []verbs.SendWR) (int, error) {
	if e.l2 != nil {
		return e.l2.conn.PostSend(wrs)
	}
	return e.qp.PostSend(wrs)
}

func (e *endpoint) postRecv(wrs []verbs.RecvWR) (int, error) {
	if e.l2 != nil {
		return e.l2.conn.PostRecv(wrs)
	}
	return e.qp.PostRecv(wrs)
}

// postPair posts the bulk WRITE of the next notification and the
// WRITE_WITH_IMM carrying its sequence number, both signaled.
func (e *endpoint) postPair() error {
	seq := e.t.nextSeq
	if st, ok := e.dev.host.mgr.QPStatus(e.qp); ok && st.State == fsm.APMAwaitPeer && e.awaitFrom < 0 {
		e.awaitFrom = int64(seq)
	}
	i := int(seq % nSlots)
	fill(slot(e.buf, i), e.tag, seq)
	raddr := e.peer.mr.Addr() + uint64((nSlots+i)*slotSize)
	rkey := e.peer.mr.RKey()
	wrs := []verbs.SendWR{
		{WRID: uint64(seq) * 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList:     []verbs.SGE{{Addr: e.mr.Addr() + uint64(i*slotSize), Length: slotSize, LKey: e.mr.LKey()}},
			RemoteAddr: raddr, RKey: rkey},
		{WRID: uint64(seq)*2 + 1, Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled,
			ImmData: seq, RemoteAddr: raddr, RKey: rkey},
	}
	n, err := e.postSend(wrs)
	e.t.posted += n
	e.t.inflight += n
	if err != nil {
		return fmt.Errorf("ibv_post_send on %v (seq %d): %w", e, seq, err)
	}
	e.t.nextSeq++
	return nil
}

// postRecvs tops the receive queue up to recvDepth.
func (e *endpoint) postRecvs(n int) error {
	wrs := make([]verbs.RecvWR, n)
	for i := range wrs {
		wrs[i] = verbs.RecvWR{WRID: recvBase + e.t.nextRecv}
		e.t.nextRecv++
	}
	if _, err := e.postRecv(wrs); err != nil {
		return fmt.Errorf("ibv_post_recv on %v: %w", e, err)
	}
	return nil
}

// onNotify checks the bulk data that came before notification seq.
// It returns a description of the problem, or "" when all is well.
func (e *endpoint) onNotify(seq uint32) string {
	want := e.t.expect
	e.t.expect = seq + 1
	switch {
	case seq != want:
		e.t.dataErrs++
		return fmt.Sprintf("notification %d out of order (expected %d)", seq, want)
	case !check(slot(e.buf, nSlots+int(seq%nSlots)), e.peer.tag, seq):
		e.t.dataErrs++
		return fmt.Sprintf("bulk data before notification %d is corrupt", seq)
	}
	e.t.verified++
	e.t.winVerified++
	return ""
}

// noteSend checks that a send completion is of the next WR posted: on RC
// every signaled WR completes once, in posting order.
func (e *endpoint) noteSend(wrid uint64) bool {
	ok := wrid == e.t.nextDone
	if !ok {
		e.t.orderErrs++
	}
	e.t.nextDone = wrid + 1
	return ok
}

// noteError records an error completion in the endpoint's status sequence
// (consecutive repeats collapsed).
func (e *endpoint) noteError(st verbs.WCStatus) {
	e.t.failed = true
	if n := len(e.t.errSeq); n == 0 || e.t.errSeq[n-1] != st {
		e.t.errSeq = append(e.t.errSeq, st)
	}
}
