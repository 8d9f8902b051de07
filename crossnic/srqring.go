package crossnic

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// srqRing records the receives posted to an SRQ until they complete. An
// SRQ's receives are consumed in the order posted, but their completions
// reach the application through its QPs' CQs, polled in any order: a
// receive retires by its wr_id (the oldest outstanding one with it), and
// the ring's head moves past every retired one. It holds twice the SRQ's
// WRs so that receives retired out of order leave room.
type srqRing struct {
	recs       []srqRec
	sge        []verbs.SGE
	per        int
	mask       uint64
	head, tail uint64
	live       int
	scratch    verbs.RecvWR
	lastSGE    []verbs.SGE
}

type srqRec struct {
	wrid uint64
	nsge uint8
	done bool
}

func (r *srqRing) init(maxWR, per int) {
	n := 1
	for n < 2*maxWR {
		n <<= 1
	}
	r.recs, r.sge, r.per, r.mask = make([]srqRec, n), make([]verbs.SGE, n*per), per, uint64(n-1)
	r.lastSGE = make([]verbs.SGE, 0, per)
}

func (r *srqRing) len() int { return r.live }

// record copies a receive posted to the SRQ.
func (r *srqRing) record(w *verbs.RecvWR) error {
	if r.tail-r.head >= uint64(len(r.recs)) {
		return fmt.Errorf("crossnic: SRQ ring full (%d slots, %d outstanding)", len(r.recs), r.live)
	}
	if len(w.SGList) > r.per {
		return fmt.Errorf("crossnic: SRQ receive %d: %d SGEs above the SRQ's %d", w.WRID, len(w.SGList), r.per)
	}
	slot := int(r.tail & r.mask)
	r.recs[slot] = srqRec{wrid: w.WRID, nsge: uint8(len(w.SGList))}
	copy(r.sge[slot*r.per:], w.SGList)
	r.tail++
	r.live++
	return nil
}

// dropLast forgets the receive recorded last (its post failed).
func (r *srqRing) dropLast() {
	if r.tail > r.head {
		r.tail--
		r.live--
	}
}

// at is the receive at ring index i (valid until the next call).
func (r *srqRing) at(i uint64) *verbs.RecvWR {
	slot := int(i & r.mask)
	r.scratch = verbs.RecvWR{WRID: r.recs[slot].wrid, SGList: r.sge[slot*r.per : slot*r.per+int(r.recs[slot].nsge)]}
	return &r.scratch
}

// retire retires the oldest outstanding receive with wr_id wrid; last
// then returns a copy of it. False when none is outstanding.
func (r *srqRing) retire(wrid uint64) bool {
	for i := r.head; i < r.tail; i++ {
		rec := &r.recs[i&r.mask]
		if rec.done || rec.wrid != wrid {
			continue
		}
		w := r.at(i)
		r.lastSGE = append(r.lastSGE[:0], w.SGList...)
		rec.done = true
		r.live--
		for r.head < r.tail && r.recs[r.head&r.mask].done {
			r.head++
		}
		return true
	}
	return false
}

// last is a copy of the receive retire retired last.
func (r *srqRing) last() *verbs.RecvWR {
	r.scratch = verbs.RecvWR{WRID: r.scratch.WRID, SGList: r.lastSGE}
	return &r.scratch
}

// each calls fn for each outstanding receive, oldest first, until it
// returns false.
func (r *srqRing) each(fn func(w *verbs.RecvWR) bool) {
	for i := r.head; i < r.tail; i++ {
		if r.recs[i&r.mask].done {
			continue
		}
		if !fn(r.at(i)) {
			return
		}
	}
}
