package runtime

import (
	"log/slog"
	"sync"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/asyncev"
	"github.com/ibpath/ibpath/verbs"
)

// Layer1 runs an apm.Manager: one event pump per device context, one loop
// goroutine feeding their events to the manager, and the ARMED poller
// calling the manager's Tick. The manager is only ever touched under mu.
type Layer1 struct {
	mu      sync.Mutex
	mgr     *apm.Manager
	log     *slog.Logger
	forward func(asyncev.Event)
	pumps   []*asyncev.Pump
	poller  *asyncev.Poller
	events  chan asyncev.Event
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// StartLayer1 starts driving mgr for the given device contexts. forward,
// if not nil, receives every async event after the manager has seen it,
// on the loop goroutine: it must not block for long.
func StartLayer1(mgr *apm.Manager, ctxs []verbs.Context, log *slog.Logger, forward func(asyncev.Event)) *Layer1 {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Layer1{mgr: mgr, log: log, forward: forward, events: make(chan asyncev.Event, 64), stop: make(chan struct{})}
	l.poller = asyncev.StartPoller(l.tick, asyncev.PollerOptions{})
	for _, c := range ctxs {
		sub := asyncev.NewSubscription(64)
		p := asyncev.Start(c, asyncev.Options{Subscribers: []*asyncev.Subscription{sub}})
		l.pumps = append(l.pumps, p)
		l.wg.Add(1)
		go l.fanIn(c, sub)
	}
	l.wg.Add(1)
	go l.loop()
	return l
}

func (l *Layer1) fanIn(ctx verbs.Context, sub *asyncev.Subscription) {
	defer l.wg.Done()
	for ev := range sub.C {
		l.mu.Lock()
		l.mgr.HandleEvent(ctx, ev.AsyncEvent)
		l.mu.Unlock()
		l.poller.Kick()
		select {
		case l.events <- ev:
		case <-l.stop:
			return
		}
	}
}

// loop logs and forwards events in the order they were handled per device.
func (l *Layer1) loop() {
	defer l.wg.Done()
	for {
		select {
		case ev := <-l.events:
			l.log.Info("async event", "event", ev.String())
			if l.forward != nil {
				l.forward(ev)
			}
		case <-l.stop:
			return
		}
	}
}

func (l *Layer1) tick() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mgr.Tick()
}

// Do runs fn with the manager, serialised with event handling (for
// operator commands and status), and wakes the poller afterwards.
func (l *Layer1) Do(fn func(*apm.Manager)) {
	l.mu.Lock()
	fn(l.mgr)
	l.mu.Unlock()
	l.poller.Kick()
}

// Close stops every goroutine and waits for them. The device contexts stay
// open; they belong to the caller.
func (l *Layer1) Close() {
	l.once.Do(func() {
		for _, p := range l.pumps {
			p.Close()
		}
		close(l.stop)
		l.poller.Close()
		l.wg.Wait()
	})
}
