package asyncev

import (
	"sync"
	"time"
)

// Defaults for PollerOptions.
const (
	DefaultPollerMinInterval = 50 * time.Microsecond
	DefaultPollerMaxInterval = 10 * time.Millisecond
)

// PollerOptions tune a Poller. Zero fields take the defaults.
type PollerOptions struct {
	// MinInterval is the shortest pause between two calls while work is
	// pending, and the pause used when poll asks for "again soon"
	// (next <= 0). Default 50µs: an HCA loads an alternate path in tens of
	// microseconds.
	MinInterval time.Duration
	// MaxInterval caps the pause poll may ask for. Default 10ms, so a QP
	// that became ARMED is noticed within that time at worst.
	MaxInterval time.Duration
}

func (o PollerOptions) withDefaults() PollerOptions {
	if o.MinInterval <= 0 {
		o.MinInterval = DefaultPollerMinInterval
	}
	if o.MaxInterval <= 0 {
		o.MaxInterval = DefaultPollerMaxInterval
	}
	if o.MinInterval > o.MaxInterval {
		o.MinInterval = o.MaxInterval
	}
	return o
}

// Poller is the ARMED poller. Linux verbs raises no event when a QP's
// alternate path becomes ARMED after a REARM, so the apm layer must query
// its QPs until they are; Poller is the goroutine that calls its check.
//
// The goroutine calls poll at once. While poll reports pending it calls
// again after next, clamped to [MinInterval, MaxInterval] (next <= 0 means
// MinInterval). When poll reports nothing pending it waits for Kick (a new
// REARM was requested) or Close. poll is never called concurrently with
// itself, and a Kick that arrives during a call is not lost: it causes
// another call.
type Poller struct {
	poll     func() (time.Duration, bool)
	min, max time.Duration

	kick     chan struct{} // cap 1
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// StartPoller starts the poller goroutine.
func StartPoller(poll func() (next time.Duration, pending bool), opts PollerOptions) *Poller {
	opts = opts.withDefaults()
	p := &Poller{
		poll: poll,
		min:  opts.MinInterval,
		max:  opts.MaxInterval,
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go p.run()
	return p
}

// Kick asks for a call of poll soon: at once if the poller is idle, or
// instead of finishing the current pause. It never blocks; kicks coalesce.
func (p *Poller) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Close stops the poller and waits for its goroutine, including a call of
// poll in progress, so it must not be called from poll. Idempotent and
// safe to call concurrently.
func (p *Poller) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

// Done is closed when the poller goroutine has exited.
func (p *Poller) Done() <-chan struct{} { return p.done }

func (p *Poller) run() {
	defer close(p.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		next, pending := p.poll()
		var wait <-chan time.Time // nil: idle until Kick
		if pending {
			timer.Reset(min(max(next, p.min), p.max))
			wait = timer.C
		}
		select {
		case <-p.stop:
			timer.Stop()
			return
		case <-p.kick:
		case <-wait:
		}
		timer.Stop()
	}
}
