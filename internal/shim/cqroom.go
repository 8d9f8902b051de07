package shim

import (
	"sync"

	"github.com/ibpath/ibpath/verbs"
)

// CQ headroom. A switch back puts completions of its own in the default
// QP's CQs, which belong to the application and are sized for its WRs
// alone: the probe's, the switch-back notification's, the peer's
// notification (it consumes the control receive), and their flushes when
// the QP goes to ERR, which rdma_rxe can deliver after the QP's reset.
// An overrun puts the QP in error with no answer to the peer (seen in the
// lab: ib_write_lat's single CQ holds one entry). So with the switch back
// on, the C side creates (and resizes) every application CQ with
// Config.CQHeadroom entries more and reports each through CQCreated, and
// each QP switching back holds a share of its CQs' headroom from its
// reset to its return home (crossnic.Room); a QP that finds no share free
// waits on the backup for one.

const (
	// shareShared is what a QP switching back holds of a CQ that both
	// its queues complete into: two of each side (a completion of its
	// own and a late flush of the one before the reset).
	shareShared = 4
	// shareSplit is what it holds of each of two split CQs.
	shareSplit = 2
)

// cqRooms is the headroom of the application's CQs and what of it QPs
// switching back hold.
type cqRooms struct {
	mu sync.Mutex
	by map[verbs.CQ]*cqRoom
}

type cqRoom struct{ headroom, held int }

// CQCreated records the headroom cq was created or resized with beyond
// what the application asked for (0: none could be added, the device's
// CQ limit). What QPs hold of it stays held.
func (r *Runtime) CQCreated(cq verbs.CQ, headroom int) {
	r.rooms.mu.Lock()
	defer r.rooms.mu.Unlock()
	if r.rooms.by == nil {
		r.rooms.by = map[verbs.CQ]*cqRoom{}
	}
	if x := r.rooms.by[cq]; x != nil {
		x.headroom = headroom
		return
	}
	r.rooms.by[cq] = &cqRoom{headroom: headroom}
}

// CQDestroyed forgets cq's headroom.
func (r *Runtime) CQDestroyed(cq verbs.CQ) {
	r.rooms.mu.Lock()
	defer r.rooms.mu.Unlock()
	delete(r.rooms.by, cq)
}

// qpRoom is one QP's share of its CQs' headroom: a crossnic.Room.
type qpRoom struct {
	rooms *cqRooms
	need  []cqNeed
}

type cqNeed struct {
	cq verbs.CQ
	n  int
}

// roomFor is the share a QP completing into scq and rcq needs.
func (r *Runtime) roomFor(scq, rcq verbs.CQ) *qpRoom {
	if scq == rcq {
		return &qpRoom{rooms: &r.rooms, need: []cqNeed{{scq, shareShared}}}
	}
	return &qpRoom{rooms: &r.rooms, need: []cqNeed{{scq, shareSplit}, {rcq, shareSplit}}}
}

// fits reports whether the QP's CQs have room for its share at all (when
// no other QP holds any): false means it can never switch back.
func (q *qpRoom) fits() bool {
	q.rooms.mu.Lock()
	defer q.rooms.mu.Unlock()
	return q.has(func(x *cqRoom) int { return x.headroom })
}

// has reports whether every CQ of the QP is known and has its share of
// free(cq) entries. rooms.mu held.
func (q *qpRoom) has(free func(*cqRoom) int) bool {
	for _, n := range q.need {
		if x := q.rooms.by[n.cq]; x == nil || free(x) < n.n {
			return false
		}
	}
	return true
}

// Take reserves the share when every CQ has it free.
func (q *qpRoom) Take() bool {
	q.rooms.mu.Lock()
	defer q.rooms.mu.Unlock()
	if !q.has(func(x *cqRoom) int { return x.headroom - x.held }) {
		return false
	}
	for _, n := range q.need {
		q.rooms.by[n.cq].held += n.n
	}
	return true
}

// Give returns the share (to the CQs still known).
func (q *qpRoom) Give() {
	q.rooms.mu.Lock()
	defer q.rooms.mu.Unlock()
	for _, n := range q.need {
		if x := q.rooms.by[n.cq]; x != nil {
			x.held = max(x.held-n.n, 0)
		}
	}
}

// cqHeld is what QPs hold of cq's headroom, and the headroom (for the
// tests).
func (r *Runtime) cqHeld(cq verbs.CQ) (held, headroom int) {
	r.rooms.mu.Lock()
	defer r.rooms.mu.Unlock()
	if x := r.rooms.by[cq]; x != nil {
		return x.held, x.headroom
	}
	return 0, 0
}
