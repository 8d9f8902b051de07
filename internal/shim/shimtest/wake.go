package shimtest

import (
	"fmt"

	"github.com/ibpath/ibpath/internal/shim/datapath"
	"github.com/ibpath/ibpath/verbs"
)

var _ datapath.Waker = (*Hotpath)(nil)

// Wake counts the runtime's wake-ups per CQ (channel.c delivers them as
// completion events to an application that asked for one).
func (h *Hotpath) Wake(cq verbs.CQ) {
	h.wakeMu.Lock()
	defer h.wakeMu.Unlock()
	h.wakes[cq]++
}

// WakesOf is how many times the runtime woke the application for cq.
func (h *Hotpath) WakesOf(cq verbs.CQ) int {
	h.wakeMu.Lock()
	defer h.wakeMu.Unlock()
	return h.wakes[cq]
}

// ArmLane requests the next event of the backup CQs behind cq on the
// lane, as the shim's req_notify_cq does for an application arming cq
// (lip_express_arm).
func (h *Hotpath) ArmLane(cq verbs.CQ) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.x == nil {
		return nil
	}
	for _, qpn := range h.x.cqs[cq] {
		l := h.laneOf(qpn)
		if l == nil {
			continue
		}
		for _, b := range []verbs.CQ{l.lane.BackupCQ, l.lane.BackupRecvCQ} {
			if b != nil {
				if err := b.ReqNotify(false); err != nil {
					return fmt.Errorf("arm a backup CQ of QP %#x: ibv_req_notify_cq: %w", qpn, err)
				}
			}
		}
	}
	return nil
}

var _ datapath.EventGiver = (*Hotpath)(nil)

// GivenBack is an async event the runtime gave back to the application.
type GivenBack struct {
	Ctx uintptr
	QPN uint32
	Ev  verbs.EventType
}

// GiveBack records a kept event the runtime gives back (asyncev.c queues
// it for the application's next ibv_get_async_event).
func (h *Hotpath) GiveBack(ctx uintptr, qpn uint32, ev verbs.EventType) error {
	h.wakeMu.Lock()
	defer h.wakeMu.Unlock()
	h.given = append(h.given, GivenBack{ctx, qpn, ev})
	return nil
}

// Given is what the runtime gave back so far, in order.
func (h *Hotpath) Given() []GivenBack {
	h.wakeMu.Lock()
	defer h.wakeMu.Unlock()
	return append([]GivenBack(nil), h.given...)
}
