package asyncev

import (
	"sync"
	"sync/atomic"
)

// Subscription receives the events of one pump on C, in the order the
// device reported them. A subscriber must keep reading C: while its buffer
// is full the pump waits for it, and so do every other subscriber and the
// acknowledgement of the event (see Pump).
//
// C is closed when the subscription is closed or the pump stops; events
// already buffered can still be read.
type Subscription struct {
	C <-chan Event

	ch        chan Event
	leave     chan struct{} // closed by Close: the pump must stop sending
	leaveOnce sync.Once
	finished  chan struct{} // closed right after ch, by whoever closes ch
	pump      atomic.Pointer[Pump]
}

// detached marks a subscription closed before it was ever attached.
var detached = new(Pump)

// NewSubscription returns a subscription not yet attached to a pump, with
// room for buffer events. Pass it in Options.Subscribers so it exists
// before the pump reads its first event; Pump.Subscribe is the shorthand
// for a pump already running. A subscription belongs to one pump only.
func NewSubscription(buffer int) *Subscription {
	if buffer < 0 {
		buffer = 0
	}
	ch := make(chan Event, buffer)
	return &Subscription{C: ch, ch: ch, leave: make(chan struct{}), finished: make(chan struct{})}
}

// Close unsubscribes. When it returns the pump sends nothing more and C is
// closed. It does not wait for the subscriber to read what is buffered, so
// it is safe to call from the goroutine that reads C, even while the pump
// is blocked sending to it. Close is idempotent and safe to call
// concurrently.
func (s *Subscription) Close() {
	s.leaveOnce.Do(func() { close(s.leave) })
	if s.pump.CompareAndSwap(nil, detached) {
		s.finish()
		return
	}
	if p := s.pump.Load(); p != detached {
		p.unsubscribe(s)
	}
	<-s.finished
}

// finish closes C. It runs exactly once per subscription: on the pump
// goroutine, in Subscribe when the pump has already stopped, or in Close
// when the subscription was never attached.
func (s *Subscription) finish() {
	close(s.ch)
	close(s.finished)
}

// left reports whether Close has been called.
func (s *Subscription) left() bool {
	select {
	case <-s.leave:
		return true
	default:
		return false
	}
}
