package crossnic

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// Errors of rewind planning.
var (
	// ErrAtomicOutstanding: an atomic may have executed; replaying it could
	// execute it twice, so the error must surface instead.
	ErrAtomicOutstanding = errors.New("crossnic: an atomic is outstanding: replay is unsafe")
	// ErrUnreplayable: an outstanding WR names keys or state of the
	// default device (LOCAL_INV, BIND_MW, SEND_WITH_INV, TSO: !Replayable).
	ErrUnreplayable = errors.New("crossnic: a WR the backup cannot carry is outstanding: replay is unsafe")
	// ErrCounterMismatch: the peer's receive counter contradicts what was
	// sent (behind what already completed, or beyond what was posted).
	ErrCounterMismatch = errors.New("crossnic: peer receive counter inconsistent with the send ring")
	// ErrReadUnanswered: an RDMA READ the peer executed (a notification
	// posted after it was consumed) got no response here. Its data may
	// never have landed, and reading again could read what the peer
	// changed once it saw the later notification ("done reading").
	ErrReadUnanswered = errors.New("crossnic: a READ the peer executed got no response: replay is unsafe")
)

// Plan is what a rewind does with the outstanding send WRs.
type Plan struct {
	// Delivered are the WRs the peer's receive counter proves executed:
	// everything up to the last notification it consumed (RC executes in
	// order). They are not sent again; the signaled ones among them get a
	// success completion synthesized for the application.
	Delivered int
	// Replay is how many WRs follow them; they go to the backup QP, keys
	// translated. Bulk WRITEs among them may execute a second time, which
	// is allowed (idempotent); notifications had not been consumed.
	Replay int
}

// PlanRewind decides the rewind from the peer's receive counter: the number
// of receive completions the peer's QP produced from this QP's sends.
func (r *SendRing) PlanRewind(peerRecv uint64) (Plan, error) {
	if r.atomics > 0 {
		return Plan{}, ErrAtomicOutstanding
	}
	if why := r.Unreplayable(); why != "" {
		return Plan{}, fmt.Errorf("%w: %s", ErrUnreplayable, why)
	}
	if peerRecv < r.notifsDone {
		// The peer's HCA ACKed a message and died before the receive's
		// completion reached its memory: replaying from its counter would
		// deliver that message twice, skipping it would lose track of a
		// receive. Neither is safe.
		return Plan{}, fmt.Errorf("%w: the peer's counter %d is behind the %d notifications already completed here", ErrCounterMismatch, peerRecv, r.notifsDone)
	}
	consumed := peerRecv - r.notifsDone // notifications among the outstanding WRs
	delivered, read := 0, -1
	for i := r.head; i < r.tail && consumed > 0; i++ {
		switch rec := &r.recs[i&r.mask]; {
		case rec.op == verbs.WRRDMARead && read < 0:
			read = int(i - r.head)
		case rec.op.ConsumesRecv():
			consumed--
			delivered = int(i + 1 - r.head)
			if read >= 0 {
				// A READ before this notification is still outstanding:
				// executed at the peer, its response lost.
				return Plan{}, fmt.Errorf("%w (WR %d)", ErrReadUnanswered, r.recs[(r.head+uint64(read))&r.mask].wrid)
			}
		}
	}
	if consumed > 0 {
		return Plan{}, fmt.Errorf("%w: peer consumed %d more notifications than are outstanding", ErrCounterMismatch, consumed)
	}
	return Plan{Delivered: delivered, Replay: r.Len() - delivered}, nil
}

// TakeDelivered retires the first n outstanding WRs as complete (the ones a
// plan found delivered) and calls fn for each signaled one, so the caller
// can give the application its success completion. The WR passed is valid
// only during the call.
func (r *SendRing) TakeDelivered(n int, fn func(wr *verbs.SendWR)) {
	end := r.head + uint64(min(n, r.Len()))
	for i := r.head; i < end; i++ {
		if r.recs[i&r.mask].signaledIn(r.sigAll) && fn != nil {
			w, _ := r.wr(i)
			fn(w)
		}
	}
	r.retire(end)
}

// KeyMap translates keys of the default HCA to those of the backup.
type KeyMap struct {
	// LKeys maps a local default lkey to the lkey of the same memory
	// registered on the backup HCA (shadow registration).
	LKeys map[uint32]uint32
	// RKey maps the remote default rkey of a WR to the remote backup
	// rkey, usually through a Directory.
	RKey func(defaultRKey uint32) (uint32, bool)
}

// TranslateRecv is Translate for a receive WR: its SGEs' lkeys moved to
// the backup HCA, in sges (which must have room for them).
func (k *KeyMap) TranslateRecv(sges []verbs.SGE, src *verbs.RecvWR) (verbs.RecvWR, error) {
	if len(src.SGList) > cap(sges) {
		return verbs.RecvWR{}, fmt.Errorf("crossnic: translate receive %d: %d SGEs, room for %d", src.WRID, len(src.SGList), cap(sges))
	}
	r := verbs.RecvWR{WRID: src.WRID, SGList: sges[:len(src.SGList)]}
	for i, s := range src.SGList {
		lk, ok := k.LKeys[s.LKey]
		if !ok {
			return verbs.RecvWR{}, fmt.Errorf("crossnic: receive %d: no backup for lkey %#x", src.WRID, s.LKey)
		}
		s.LKey = lk
		r.SGList[i] = s
	}
	return r, nil
}

// Translate writes into dst the WR src with its keys moved to the backup
// HCAs, its SGEs in sges (which must have room for them). Inline WRs keep
// no keys to translate. It fails when a mapping is unknown: such a WR
// cannot be replayed.
func (k *KeyMap) Translate(dst *verbs.SendWR, sges []verbs.SGE, src *verbs.SendWR) error {
	*dst = *src
	if len(src.SGList) > cap(sges) {
		return fmt.Errorf("crossnic: translate WR %d: %d SGEs, room for %d", src.WRID, len(src.SGList), cap(sges))
	}
	dst.SGList = sges[:len(src.SGList)]
	for i, s := range src.SGList {
		if src.SendFlags&verbs.SendInline == 0 {
			lk, ok := k.LKeys[s.LKey]
			if !ok {
				return fmt.Errorf("crossnic: translate WR %d: no backup for lkey %#x", src.WRID, s.LKey)
			}
			s.LKey = lk
		}
		dst.SGList[i] = s
	}
	switch src.Opcode {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAdd:
		zeroWrite := src.Opcode != verbs.WRRDMARead && !src.Opcode.IsAtomic() && sgeBytes(src.SGList) == 0
		if zeroWrite {
			break // a zero-length WRITE checks no rkey
		}
		if k.RKey == nil {
			return fmt.Errorf("crossnic: translate WR %d: no remote key mapping", src.WRID)
		}
		rk, ok := k.RKey(src.RKey)
		if !ok {
			return fmt.Errorf("crossnic: translate WR %d: no backup for remote rkey %#x", src.WRID, src.RKey)
		}
		dst.RKey = rk
	}
	return nil
}

func sgeBytes(s []verbs.SGE) uint64 {
	var n uint64
	for _, x := range s {
		n += uint64(x.Length)
	}
	return n
}
