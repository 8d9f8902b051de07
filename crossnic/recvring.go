package crossnic

import (
	"fmt"
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

type recvRecord struct {
	wrid uint64
	nsge uint8
}

// RecvRing records the receive WRs posted on a protected QP until they
// complete, so the outstanding ones can be reposted on the backup QP (and
// back). It counts completed receives: the receive counter of the
// handshake. Recording allocates nothing.
type RecvRing struct {
	recs       []recvRecord
	sge        []verbs.SGE
	per        int
	mask       uint64
	head, tail uint64
	completed  uint64
	scratch    verbs.RecvWR
}

// NewRecvRing sizes a ring for a QP's capabilities.
func NewRecvRing(c verbs.QPCap) (*RecvRing, error) {
	if c.MaxRecvWR < 1 || c.MaxRecvSGE < 0 || c.MaxRecvSGE > 255 {
		return nil, fmt.Errorf("crossnic: receive ring: bad capabilities %+v", c)
	}
	n := 1
	for n < c.MaxRecvWR {
		n <<= 1
	}
	per := max(c.MaxRecvSGE, 1)
	return &RecvRing{recs: make([]recvRecord, n), sge: make([]verbs.SGE, n*per), per: per, mask: uint64(n - 1)}, nil
}

// Record copies a receive WR that was just posted.
func (r *RecvRing) Record(wr *verbs.RecvWR) error {
	if r.tail-r.head >= uint64(len(r.recs)) {
		return ErrRingFull
	}
	if len(wr.SGList) > r.per {
		return fmt.Errorf("crossnic: record receive %d: %d SGEs above the ring's %d", wr.WRID, len(wr.SGList), r.per)
	}
	slot := int(r.tail & r.mask)
	r.recs[slot] = recvRecord{wrid: wr.WRID, nsge: uint8(len(wr.SGList))}
	copy(r.sge[slot*r.per:], wr.SGList)
	r.tail++
	return nil
}

// Complete retires the oldest receive: receives complete in posting order,
// one completion each (successful or not).
func (r *RecvRing) Complete(success bool) error {
	if r.head == r.tail {
		return fmt.Errorf("crossnic: receive completion with no receive outstanding")
	}
	r.head++
	if success {
		r.completed++
	}
	return nil
}

// dropLast forgets the receive recorded last (its post failed).
func (r *RecvRing) dropLast() {
	if r.tail > r.head {
		r.tail--
	}
}

// headWRID is the wr_id of the oldest outstanding receive (the next to
// complete); false when none is outstanding.
func (r *RecvRing) headWRID() (uint64, bool) {
	if r.head == r.tail {
		return 0, false
	}
	return r.recs[r.head&r.mask].wrid, true
}

// Completed is the receive counter: successful receive completions so far.
func (r *RecvRing) Completed() uint64 { return r.completed }

// Len is the number of outstanding receives.
func (r *RecvRing) Len() int { return int(r.tail - r.head) }

// Outstanding calls fn for each outstanding receive, oldest first. The WR
// passed is the ring's and valid only during the call.
func (r *RecvRing) Outstanding(fn func(wr *verbs.RecvWR) bool) {
	for i := r.head; i < r.tail; i++ {
		slot := int(i & r.mask)
		r.scratch = verbs.RecvWR{WRID: r.recs[slot].wrid, SGList: r.sge[slot*r.per : slot*r.per+int(r.recs[slot].nsge)]}
		if !fn(&r.scratch) {
			return
		}
	}
}

// Footprint is the memory the ring holds, in bytes.
func (r *RecvRing) Footprint() int {
	return len(r.recs)*int(unsafe.Sizeof(recvRecord{})) + len(r.sge)*int(unsafe.Sizeof(verbs.SGE{}))
}
