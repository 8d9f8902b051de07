package crossnic

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// sendRecord is one posted send WR, copied at post time (the application
// may reuse its SGE array and inline buffer as soon as the post returns).
// It is kept compact; its SGEs and inline bytes live in arrays the ring
// shares, at the record's slot.
type sendRecord struct {
	wrid, raddr, cmp, swap uint64
	rkey, imm              uint32
	flags                  verbs.SendFlags
	op                     verbs.WROpcode
	nsge                   uint8
	ninline                uint16
}

func (rec *sendRecord) signaledIn(sigAll bool) bool {
	return sigAll || rec.flags&verbs.SendSignaled != 0
}

// SendRing records every send WR posted on a protected QP until it is
// known complete, so the outstanding ones can be rewound onto a backup QP.
// Its capacity is the QP's max_send_wr; recording allocates nothing.
type SendRing struct {
	recs       []sendRecord
	sge        []verbs.SGE // perSGE per slot
	inline     []byte      // perInline per slot
	perSGE     int
	perInline  int
	mask       uint64
	head, tail uint64 // outstanding: [head, tail)
	atomics    int    // outstanding atomics
	foreign    int    // outstanding WRs a backup QP cannot carry (!Replayable)
	sigAll     bool
	notifsDone uint64 // receive-consuming WRs completed: the send counter
	scratch    verbs.SendWR
}

// ErrRingFull: more WRs outstanding than the QP's send queue holds.
var ErrRingFull = errors.New("crossnic: shadow ring full")

// NewSendRing sizes a ring for a QP's capabilities.
func NewSendRing(c verbs.QPCap, sqSigAll bool) (*SendRing, error) {
	if c.MaxSendWR < 1 || c.MaxSendSGE < 0 || c.MaxSendSGE > 255 || c.MaxInlineData < 0 || c.MaxInlineData > 65535 {
		return nil, fmt.Errorf("crossnic: send ring: bad capabilities %+v", c)
	}
	n := 1
	for n < c.MaxSendWR {
		n <<= 1
	}
	per := max(c.MaxSendSGE, 1)
	return &SendRing{recs: make([]sendRecord, n), sge: make([]verbs.SGE, n*per), inline: make([]byte, n*c.MaxInlineData),
		perSGE: per, perInline: c.MaxInlineData, mask: uint64(n - 1), sigAll: sqSigAll}, nil
}

// MemReader returns n bytes of local memory at addr, for copying inline
// data; nil when the memory is not readable.
type MemReader func(addr uint64, n uint32) []byte

// Record copies a WR that was just posted on the default QP. Inline data is
// copied through read (needed only for IBV_SEND_INLINE WRs).
func (r *SendRing) Record(wr *verbs.SendWR, read MemReader) error {
	if r.tail-r.head >= uint64(len(r.recs)) {
		return ErrRingFull
	}
	if len(wr.SGList) > r.perSGE {
		return fmt.Errorf("crossnic: record WR %d: %d SGEs above the ring's %d", wr.WRID, len(wr.SGList), r.perSGE)
	}
	slot := int(r.tail & r.mask)
	rec := &r.recs[slot]
	*rec = sendRecord{wrid: wr.WRID, raddr: wr.RemoteAddr, cmp: wr.CompareAdd, swap: wr.Swap, rkey: wr.RKey,
		imm: wr.ImmData, flags: wr.SendFlags, op: wr.Opcode, nsge: uint8(len(wr.SGList))}
	copy(r.sge[slot*r.perSGE:], wr.SGList)
	if wr.SendFlags&verbs.SendInline != 0 {
		dst := r.inline[slot*r.perInline : (slot+1)*r.perInline]
		n := 0
		for _, s := range wr.SGList {
			var b []byte
			if read != nil {
				b = read(s.Addr, s.Length)
			}
			if b == nil && s.Length > 0 || n+len(b) > len(dst) {
				return fmt.Errorf("crossnic: record WR %d: inline data at %#x+%d not readable or too long", wr.WRID, s.Addr, s.Length)
			}
			n += copy(dst[n:], b)
		}
		rec.ninline = uint16(n)
	}
	if wr.Opcode.IsAtomic() {
		r.atomics++
	}
	if !Replayable(wr.Opcode) {
		r.foreign++
	}
	r.tail++
	return nil
}

// wr materializes the record at index i into the ring's scratch WR.
func (r *SendRing) wr(i uint64) (*verbs.SendWR, []byte) {
	slot := int(i & r.mask)
	rec := &r.recs[slot]
	r.scratch = verbs.SendWR{WRID: rec.wrid, Opcode: rec.op, SendFlags: rec.flags, ImmData: rec.imm,
		RemoteAddr: rec.raddr, RKey: rec.rkey, CompareAdd: rec.cmp, Swap: rec.swap,
		SGList: r.sge[slot*r.perSGE : slot*r.perSGE+int(rec.nsge)]}
	return &r.scratch, r.inline[slot*r.perInline : slot*r.perInline+int(rec.ninline)]
}

// dropLast forgets the WR recorded last (its post failed).
func (r *SendRing) dropLast() {
	if r.tail == r.head {
		return
	}
	r.tail--
	r.forget(&r.recs[r.tail&r.mask])
}

// forget uncounts a record leaving the outstanding ones.
func (r *SendRing) forget(rec *sendRecord) {
	if rec.op.IsAtomic() {
		r.atomics--
	}
	if !Replayable(rec.op) {
		r.foreign--
	}
}

// inlineAt is the offset in the ring's inline array of the copy of WR i.
func (r *SendRing) inlineAt(i uint64) int { return int(i&r.mask) * r.perInline }

// Len is the number of outstanding WRs.
func (r *SendRing) Len() int { return int(r.tail - r.head) }

// Unreplayable says, when an outstanding WR is one a backup QP cannot
// carry (!Replayable), which: replay is then unsafe. "" otherwise.
func (r *SendRing) Unreplayable() string {
	if r.foreign == 0 {
		return ""
	}
	for i := r.head; i < r.tail; i++ {
		if rec := &r.recs[i&r.mask]; !Replayable(rec.op) {
			return fmt.Sprintf("WR %d is a %v, which a backup QP cannot carry", rec.wrid, rec.op)
		}
	}
	return ""
}

// AtomicOutstanding reports whether an outstanding WR is an atomic, which
// makes replay unsafe.
func (r *SendRing) AtomicOutstanding() bool { return r.atomics > 0 }

// NotifsDone is the number of receive-consuming WRs (SEND, SEND_WITH_IMM,
// RDMA_WRITE_WITH_IMM) known complete.
func (r *SendRing) NotifsDone() uint64 { return r.notifsDone }

// CompleteSignaled retires the WRs a successful completion covers: on RC,
// completions come in posting order and an unsignaled WR is complete once
// a later signaled one is, so it retires up to and including the oldest
// signaled WR. It returns how many it retired (0: no signaled WR was
// outstanding, a bookkeeping error of the caller).
func (r *SendRing) CompleteSignaled() int {
	for i := r.head; i < r.tail; i++ {
		if r.recs[i&r.mask].signaledIn(r.sigAll) {
			n := int(i + 1 - r.head)
			r.retire(i + 1)
			return n
		}
	}
	return 0
}

// retireWRID retires the WRs up to and including the first one before
// end whose wr_id is wrid (an error completion: it completes that WR, and
// the unsignaled ones before it finished or completed in error before it).
// It reports whether one was found.
func (r *SendRing) retireWRID(end, wrid uint64) bool {
	if !r.hasWRID(end, wrid) {
		return false
	}
	for i := r.head; i < min(end, r.tail); i++ {
		if r.recs[i&r.mask].wrid == wrid {
			r.retire(i + 1)
			return true
		}
	}
	return false
}

// hasWRID reports whether a WR before end has wr_id wrid.
func (r *SendRing) hasWRID(end, wrid uint64) bool {
	for i := r.head; i < min(end, r.tail); i++ {
		if r.recs[i&r.mask].wrid == wrid {
			return true
		}
	}
	return false
}

// completeSuccess retires what a successful send completion covers among
// the WRs before end: up to the oldest signaled one, or, when none is
// signaled, all of them (the completion is of a WR posted after them,
// unrecorded, so they completed before it).
func (r *SendRing) completeSuccess(end uint64) {
	end = min(end, r.tail)
	for i := r.head; i < end; i++ {
		if r.recs[i&r.mask].signaledIn(r.sigAll) {
			r.retire(i + 1)
			return
		}
	}
	r.retire(end)
}

// truncate forgets the WRs from index i on (they completed without a QP,
// the newest of the ring).
func (r *SendRing) truncate(i uint64) {
	for r.tail > max(i, r.head) {
		r.dropLast()
	}
}

// retire drops the records before end, counting what they completed.
func (r *SendRing) retire(end uint64) {
	for ; r.head < end; r.head++ {
		rec := &r.recs[r.head&r.mask]
		if rec.op.ConsumesRecv() {
			r.notifsDone++
		}
		r.forget(rec)
	}
}

// Outstanding calls fn for each outstanding WR, oldest first, until fn
// returns false. The WR and inline bytes passed are the ring's and valid
// only during the call: copy what you keep.
func (r *SendRing) Outstanding(fn func(wr *verbs.SendWR, inline []byte) bool) {
	for i := r.head; i < r.tail; i++ {
		if !fn(r.wr(i)) {
			return
		}
	}
}

// Footprint is the memory the ring holds, in bytes.
func (r *SendRing) Footprint() int {
	return len(r.recs)*int(unsafe.Sizeof(sendRecord{})) + len(r.sge)*int(unsafe.Sizeof(verbs.SGE{})) + len(r.inline)
}
