package shim

import (
	"errors"
	"fmt"
	"time"

	"github.com/ibpath/ibpath/asyncev"
	"github.com/ibpath/ibpath/verbs"
)

// PortState is the last port event the shim saw on a port.
type PortState struct {
	Device string
	Port   uint8
	Up     bool
	Event  verbs.EventType
}

// watcher is the shim's own context on one device and its event pump.
type watcher struct {
	ctx    verbs.Context
	pump   *asyncev.Pump // nil in a stepped runtime: Step reads ctx
	stop   func()
	failed bool // stepped: ctx could not be read (stepWatchers)
}

// watch opens a context of the shim's own on dev (port and device events
// reach every context of a device, so the shim sees them even when the
// application never reads its async events, and without touching the
// application's async fd) and pumps its events on a goroutine until Close.
func (r *Runtime) watch(dev string) {
	ctx, err := r.prov.Open(dev)
	if err != nil {
		r.mu.Lock()
		delete(r.watchers, dev)
		r.mu.Unlock()
		r.log.Warn("libibpath: no context of its own on the device; port events are seen only when the application reads them", "device", dev, "err", err)
		return
	}
	if r.st != nil {
		// stepped: Step reads its events (stepped.go)
		r.mu.Lock()
		closed := r.closed
		if !closed {
			r.watchers[dev] = &watcher{ctx: ctx, stop: func() {}}
		}
		r.mu.Unlock()
		if closed {
			ctx.Close()
		}
		return
	}
	wctx, stop, notified := withFDNotifier(ctx)
	sub := asyncev.NewSubscription(64)
	opts := asyncev.Options{Subscribers: []*asyncev.Subscription{sub}}
	if notified {
		// woken by the fd's readiness (level-triggered: nothing is
		// missed), the pump need not read on a timer as well: an idle
		// program's shim then wakes for nothing (BenchmarkShimIdle)
		opts.MaxWait = watchMaxWait
	}
	w := &watcher{ctx: ctx, pump: asyncev.Start(wctx, opts), stop: stop}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		w.close()
		return
	}
	r.watchers[dev] = w
	r.mu.Unlock()
	r.log.Debug("libibpath: following the device's events on a context of its own", "device", dev)
	go func() {
		for ev := range sub.C {
			r.portEvent(dev, ev.AsyncEvent)
		}
	}()
}

// watchMaxWait is how often the shim's pump reads a device's events
// with nothing signalled when the async fd wakes it: a backstop, not the
// path events take.
const watchMaxWait = 10 * time.Second

func (w *watcher) close() {
	if w.pump != nil {
		w.pump.Close()
	}
	w.stop()
	w.ctx.Close()
}

// portEvent records a port or device event seen on the shim's context;
// PORT_ERR and DEVICE_FATAL start layer 2's failover of the armed QPs
// there.
func (r *Runtime) portEvent(dev string, ev verbs.AsyncEvent) {
	if ev.Type == verbs.EventPortErr {
		// noted before layer 1 acts on it: the migrations it makes
		// now are timed from it (migrationTook)
		r.mu.Lock()
		r.portErr[portKey{dev, ev.Port}] = r.now()
		r.mu.Unlock()
	}
	if r.l1 != nil {
		r.l1.PortEvent(dev, ev) // layer 1 first: it migrates, and hands over what it cannot save
	}
	defer func() {
		if ev.Type == verbs.EventPortErr || ev.Type == verbs.EventDeviceFatal {
			r.deviceFault(dev, ev)
		}
	}()
	switch ev.Type {
	case verbs.EventPortActive, verbs.EventPortErr:
		up := ev.Type == verbs.EventPortActive
		r.mu.Lock()
		r.ports[portKey{dev, ev.Port}] = PortState{Device: dev, Port: ev.Port, Up: up, Event: ev.Type}
		r.portFlap(dev, ev.Port, up)
		r.mu.Unlock()
		r.log.Info(fmt.Sprintf("libibpath: %s %v port %d", dev, ev.Type, ev.Port))
	case verbs.EventDeviceFatal:
		r.log.Warn(fmt.Sprintf("libibpath: %s DEVICE_FATAL", dev))
	default:
		r.log.Debug(fmt.Sprintf("libibpath: %s %v", dev, ev.Type))
	}
}

type portKey struct {
	dev  string
	port uint8
}

// migrationTook is how long a layer 1 migration of a QP of dev off port
// from, seen at at, took from that port's error: its last PORT_ERR seen
// before at, within a minute (0 when none: a migration the device made
// on its own after retries, a fail back off a healthy port).
func (r *Runtime) migrationTook(dev string, from uint8, at time.Time) time.Duration {
	r.mu.Lock()
	errAt, ok := r.portErr[portKey{dev, from}]
	r.mu.Unlock()
	if !ok || errAt.After(at) || at.Sub(errAt) > time.Minute {
		return 0
	}
	return at.Sub(errAt)
}

// Ports returns the port states seen so far.
func (r *Runtime) Ports() []PortState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]PortState, 0, len(r.ports))
	for _, p := range r.ports {
		out = append(out, p)
	}
	return out
}

// Close stops following events and closes the shim's own contexts.
func (r *Runtime) Close() {
	r.mu.Lock()
	if !r.closed {
		close(r.stop)
	}
	r.closed = true
	ws := r.watchers
	r.watchers = map[string]*watcher{}
	r.mu.Unlock()
	if r.l1 != nil {
		r.l1.Close()
	}
	r.l2mu.Lock()
	for _, s := range r.shadows {
		s.closed = true
		if s.wait != nil {
			s.wait.Close()
		}
		s.bak.Close()
	}
	r.shadows = map[uintptr]*shadowSet{}
	r.l2mu.Unlock()
	for _, w := range ws {
		if w.ctx != nil { // nil: still opening; watch closes it
			w.close()
		}
	}
}

// fdContext is a context whose async fd can be waited on: AsyncReady
// fires when the fd becomes readable, through the runtime's poller on a
// duplicate of the fd, so the pump sleeps instead of polling. The wait
// starts again only once the pump has read everything (EAGAIN), so it
// neither spins on events the pump has not read yet nor misses one that
// came in between.
type fdContext struct {
	verbs.Context
	ready   chan struct{}
	drained chan struct{}
}

func (c *fdContext) AsyncReady() <-chan struct{} { return c.ready }

// GetAsyncEvent reads the next event; EAGAIN lets the waiter watch the
// fd again.
func (c *fdContext) GetAsyncEvent() (verbs.AsyncEvent, error) {
	ev, err := c.Context.GetAsyncEvent()
	if errors.Is(err, verbs.EAGAIN) {
		select {
		case c.drained <- struct{}{}:
		default:
		}
	}
	return ev, err
}

// withFDNotifier wraps ctx when it exposes its async fd (AsyncFD() int);
// stop ends the waiting goroutine; notified says whether it did wrap it.
// Without an fd, ctx is returned as is (the pump polls it).
func withFDNotifier(ctx verbs.Context) (verbs.Context, func(), bool) {
	fc, ok := ctx.(interface{ AsyncFD() int })
	if !ok {
		return ctx, func() {}, false
	}
	w, err := newFDWait(fc.AsyncFD())
	if err != nil {
		return ctx, func() {}, false
	}
	c := &fdContext{Context: ctx, ready: make(chan struct{}, 1), drained: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-c.drained:
			}
			if err := w.Wait(); err != nil {
				return
			}
			select {
			case c.ready <- struct{}{}:
			default:
			}
		}
	}()
	return c, func() {
		close(done)
		w.Close()
	}, true
}
