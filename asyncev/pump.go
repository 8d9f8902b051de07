package asyncev

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// Pump reads the async events of one device context on its own goroutine
// and delivers each to every subscriber. Run at most one pump per context:
// events are consumed as they are read.
//
// Delivery. Every event read goes to every subscriber attached at that
// moment, in the order the device reported them; nothing is dropped. If a
// subscriber's buffer is full the pump waits for it (back-pressure): the
// other subscribers, the acknowledgement and the reading of later events
// wait too, and later events stay queued in the device context meanwhile.
// The wait ends when the subscriber reads, unsubscribes, or the pump is
// closed.
//
// No subscribers. The pump reads nothing while no subscriber is attached:
// events stay queued in the device context (the kernel's queue on real
// hardware) and go to the first subscriber(s). To have several subscribers
// see the same events from the start, pass them in Options.Subscribers.
// A consequence: a failed context is only noticed while someone listens.
//
// Acknowledgement. An event is acknowledged (AckAsyncEvent) once every
// subscriber has received it, not processed it. Until then the QP or CQ it
// names cannot be destroyed; afterwards nothing keeps it alive, so a
// subscriber must not use the QP or CQ of an event it received unless it
// coordinates with whoever destroys them.
//
// End. A read error other than EAGAIN (EINVAL after the context is
// closed, EIO after the device died) ends the pump: Err reports it, Done is
// closed and so is every subscription's channel. Close ends it as well.
type Pump struct {
	ctx     verbs.Context
	device  string
	ready   <-chan struct{} // nil without verbs.AsyncNotifier
	minPoll time.Duration
	maxWait time.Duration
	timer   *time.Timer // owned by the pump goroutine

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	wake     chan struct{} // cap 1: the subscriber set changed

	mu     sync.Mutex
	subs   []*Subscription // attached, in subscription order
	gone   []*Subscription // unsubscribed; C not yet closed
	exited bool
	err    error
}

// Start starts a pump on ctx. The caller keeps ownership of ctx: close the
// pump before closing ctx (or expect the pump to end with EINVAL).
func Start(ctx verbs.Context, opts Options) *Pump {
	opts = opts.withDefaults()
	p := &Pump{
		ctx:     ctx,
		device:  ctx.Device().Name,
		minPoll: opts.MinPoll,
		maxWait: opts.MaxWait,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	if n, ok := ctx.(verbs.AsyncNotifier); ok {
		p.ready = n.AsyncReady()
	}
	for _, s := range opts.Subscribers {
		p.attach(s)
	}
	p.timer = time.NewTimer(time.Hour)
	p.timer.Stop()
	go p.run()
	return p
}

// Device is the name of the pump's device.
func (p *Pump) Device() string { return p.device }

// Subscribe attaches a new subscriber with room for buffer events. It
// receives every event read from now on (and, if it is the first
// subscriber, those that were waiting for one). On a pump that has
// stopped, C is closed at once.
func (p *Pump) Subscribe(buffer int) *Subscription {
	s := NewSubscription(buffer)
	p.attach(s)
	return s
}

// Done is closed when the pump goroutine has exited.
func (p *Pump) Done() <-chan struct{} { return p.done }

// Err reports why the pump ended: nil while it runs or when it was stopped
// by Close, otherwise the read error, which wraps the verbs errno
// (errors.Is(err, verbs.EINVAL)).
func (p *Pump) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Close stops the pump and waits for its goroutine to exit, closing every
// subscription's channel. An event read but not yet delivered to everyone
// is acknowledged and dropped. Close returns promptly even while the pump
// is blocked on a subscriber that does not read. It is idempotent and safe
// to call concurrently, from any goroutine including a subscriber's.
func (p *Pump) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

func (p *Pump) attach(s *Subscription) {
	p.mu.Lock()
	if !s.pump.CompareAndSwap(nil, p) {
		p.mu.Unlock()
		if s.pump.Load() == detached {
			return // closed before it was attached: C is already closed
		}
		panic("asyncev: subscription attached to a second pump")
	}
	if p.exited {
		p.mu.Unlock()
		s.finish()
		return
	}
	p.subs = append(p.subs, s)
	p.mu.Unlock()
	p.signal()
}

func (p *Pump) unsubscribe(s *Subscription) {
	p.mu.Lock()
	if i := slices.Index(p.subs, s); i >= 0 && !p.exited {
		p.subs = slices.Delete(p.subs, i, i+1)
		p.gone = append(p.gone, s)
	}
	p.mu.Unlock()
	p.signal()
}

// signal wakes the pump goroutine to look at its subscribers again.
func (p *Pump) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// reap closes the channels of unsubscribed subscriptions. Only the pump
// goroutine sends on them, so only it closes them.
func (p *Pump) reap() {
	p.mu.Lock()
	gone := p.gone
	p.gone = nil
	p.mu.Unlock()
	for _, s := range gone {
		s.finish()
	}
}

func (p *Pump) stopping() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

func (p *Pump) run() {
	var err error
	defer func() { p.exit(err) }()
	poll := p.minPoll
	for !p.stopping() {
		subs := p.waitSubscribers()
		if subs == nil {
			return
		}
		ev, rerr := p.ctx.GetAsyncEvent()
		if rerr != nil {
			if !errors.Is(rerr, verbs.EAGAIN) {
				err = p.wrap(rerr)
				return
			}
			if !p.waitEvent(&poll) {
				return
			}
			continue
		}
		poll = p.minPoll
		ok := p.deliver(Event{Device: p.device, AsyncEvent: ev}, subs)
		p.ctx.AckAsyncEvent(ev)
		if !ok {
			return
		}
	}
}

func (p *Pump) wrap(err error) error {
	var ve *verbs.Error
	if errors.As(err, &ve) && ve.Op == "ibv_get_async_event" {
		return fmt.Errorf("asyncev: %s: %w", p.device, err)
	}
	return fmt.Errorf("asyncev: %s: ibv_get_async_event: %w", p.device, err)
}

// waitSubscribers returns a snapshot of the subscribers once there is at
// least one, or nil when the pump is stopping.
func (p *Pump) waitSubscribers() []*Subscription {
	for {
		p.reap()
		p.mu.Lock()
		subs := slices.Clone(p.subs)
		p.mu.Unlock()
		if len(subs) > 0 {
			return subs
		}
		select {
		case <-p.stop:
			return nil
		case <-p.wake:
		}
	}
}

// waitEvent waits until an event may be pending; false means stop.
func (p *Pump) waitEvent(poll *time.Duration) bool {
	d := p.maxWait
	if p.ready == nil {
		d = *poll
	}
	p.timer.Reset(d)
	defer p.timer.Stop()
	select {
	case <-p.stop:
		return false
	case <-p.ready: // nil channel without a notifier: never ready
	case <-p.wake: // subscriber set changed: look again
	case <-p.timer.C:
		if p.ready == nil {
			*poll = min(2**poll, p.maxWait)
		}
	}
	return true
}

// deliver sends e to every subscriber in subs that has not left; false
// means the pump is stopping.
func (p *Pump) deliver(e Event, subs []*Subscription) bool {
	for _, s := range subs {
	send:
		for !s.left() {
			select {
			case s.ch <- e:
				break send
			case <-s.leave:
			case <-p.wake:
				p.reap() // C of s stays open: s.left() is checked first
			case <-p.stop:
				return false
			}
		}
	}
	return true
}

func (p *Pump) exit(err error) {
	p.mu.Lock()
	p.exited = true
	p.err = err
	subs := append(p.subs, p.gone...)
	p.subs, p.gone = nil, nil
	p.mu.Unlock()
	for _, s := range subs {
		s.finish()
	}
	close(p.done)
}
