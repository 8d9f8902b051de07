package shim

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/verbs"
)

// A live shim does its background work on goroutines, on the wall clock:
// it reads the port events of its own contexts and the completion
// channels of the backup devices, ticks layer 1 (ARMED polls, probes,
// failback), scans for backups to connect, and ticks the Conns that
// switch back. A stepped runtime (NewSteppedRuntime) starts no goroutine
// and reads the time of a clock of its owner's: the owner calls Step, on
// that clock, whenever the clock moved or the application called into
// the runtime, and Step does the same work in the same order, all of it
// on the owner's goroutine. Nothing then depends on how goroutines are
// scheduled, and a run on a seeded simulated fabric (internal/simrun)
// replays exactly.

// Stepped configures a stepped runtime.
type Stepped struct {
	// Clock is the runtime's time: layer 1's timers and layer 2's
	// (handshake bound, switch-back probes), the scans for backups.
	Clock verbs.Clock
	// Epoch is the time of day at Clock 0: the time of the events the
	// runtime reports and logs.
	Epoch time.Time
	// APM tunes layer 1 (apm.Config; zero fields take the shim's
	// defaults), and PeerTTL is how long it reuses an adapter's
	// description (0: DefaultPeerTTL).
	APM     apm.Config
	PeerTTL time.Duration
	// PSN, when set, draws the starting PSNs layer 2 announces when it
	// resets a QP (crossnic.Conn.SetPSNSource); nil: crypto/rand.
	PSN func() uint32
}

// stepper is a stepped runtime's schedule. mu guards it: the runtime's
// hooks (tickLater, startScan, layer 1's Spawn) may come from any
// goroutine that calls into the runtime.
type stepper struct {
	clock   verbs.Clock
	epoch   time.Time
	apm     apm.Config
	peerTTL time.Duration
	psn     func() uint32

	mu        sync.Mutex
	spawned   []func()      // layer 1's background work, run by the next Step
	l1Pending bool          // layer 1's Tick asked to be called at l1Due
	l1Due     time.Duration //
	scanning  bool          // the scan for backups runs: next at scanDue, after scanWait
	scanDue   time.Duration //
	scanWait  time.Duration //
	switchDue time.Duration // the next tick of the Conns away from home (while fo.ticking)
}

// stepRounds bounds the passes of one Step over the work due at one
// instant (each pass may make more due at once: an event read, a QP
// taken back by layer 1).
const stepRounds = 16

// NewSteppedRuntime returns an empty runtime that starts no goroutine,
// with layer 1 when cfg.APM is on: its owner calls Step.
func NewSteppedRuntime(cfg Config, log *slog.Logger, o Stepped) (*Runtime, error) {
	if o.Clock == nil {
		return nil, errors.New("shim: a stepped runtime needs a clock")
	}
	st := &stepper{clock: o.Clock, epoch: o.Epoch, apm: o.APM, peerTTL: o.PeerTTL, psn: o.PSN}
	return newRuntime(cfg, log, st), nil
}

func (s *stepper) timeOfDay() time.Time { return s.epoch.Add(s.clock.Now()) }

// spawn queues layer 1's background work for the next Step.
func (s *stepper) spawn(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spawned = append(s.spawned, f)
}

// startScan starts the scan for backups: its first pass comes scanMin
// later, or at the next connect (rescan).
func (s *stepper) startScan() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scanning, s.scanWait, s.scanDue = true, scanMin, s.clock.Now()+scanMin
}

// startSwitch starts ticking the Conns away from home: the first tick
// comes switchTick later. Called with fo.mu held (tickLater).
func (s *stepper) startSwitch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.switchDue = s.clock.Now() + switchTick
}

// Step does the background work of a stepped runtime that is due at the
// clock's current time, until none is left at this instant: the port and
// device events of its own contexts (layer 1 first, then layer 2's
// failover), the completion events of the backup devices (the peer's
// fallback notification), layer 1's background lookups and its Tick,
// the scan for backups, the ticks of the Conns switching back. It
// returns the clock's time at which it must be called again at the
// latest (ok false: not before the clock or the application next does
// something). A runtime made by NewRuntime does its work on goroutines:
// Step does nothing and returns ok false.
func (r *Runtime) Step() (next time.Duration, ok bool) {
	s := r.st
	if s == nil {
		return 0, false
	}
	for range stepRounds {
		if !r.stepOnce() {
			break
		}
	}
	return r.nextStep()
}

// stepOnce is one pass of Step; it reports whether it did anything.
func (r *Runtime) stepOnce() bool {
	s := r.st
	did := r.stepWatchers()
	did = r.stepNotify() || did
	s.mu.Lock()
	spawned := s.spawned
	s.spawned = nil
	s.mu.Unlock()
	for _, f := range spawned {
		f()
		did = true
	}
	now := s.clock.Now()
	if l1 := r.l1; l1 != nil {
		s.mu.Lock()
		due := s.l1Pending && now >= s.l1Due
		s.mu.Unlock()
		if l1.Kicked() || due {
			wait, pending := l1.Tick()
			s.mu.Lock()
			s.l1Pending, s.l1Due = pending, now+wait
			s.mu.Unlock()
			did = true
		}
	}
	s.mu.Lock()
	scan := s.scanning && now >= s.scanDue
	wait := s.scanWait
	s.mu.Unlock()
	select {
	case <-r.rescan:
		scan, wait = s.scanning, scanMin
	default:
	}
	if scan {
		wait = r.scanOnce(wait)
		s.mu.Lock()
		s.scanWait, s.scanDue = wait, now+wait
		s.mu.Unlock()
		did = true
	}
	r.fo.mu.Lock()
	ticking := r.fo.ticking
	r.unlockFO()
	s.mu.Lock()
	tick := ticking && now >= s.switchDue
	s.mu.Unlock()
	if tick {
		r.switchTickOnce()
		s.mu.Lock()
		s.switchDue = now + switchTick
		s.mu.Unlock()
		did = true
	}
	return did
}

// nextStep is when Step must be called again at the latest.
func (r *Runtime) nextStep() (time.Duration, bool) {
	s := r.st
	r.fo.mu.Lock()
	ticking := r.fo.ticking
	r.unlockFO()
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Duration
	ok := false
	due := func(t time.Duration) {
		if !ok || t < next {
			next, ok = t, true
		}
	}
	if r.l1 != nil && r.l1.kicked.Load() {
		due(s.clock.Now())
	}
	if s.l1Pending {
		due(s.l1Due)
	}
	if s.scanning {
		due(s.scanDue)
	}
	if ticking {
		due(s.switchDue)
	}
	if len(s.spawned) > 0 {
		due(s.clock.Now())
	}
	return next, ok
}

// stepWatchers reads the pending events of the runtime's own contexts,
// device by device in name order, and hands each on (portEvent); it
// reports whether it read any. A context that fails is logged once and
// read no more.
func (r *Runtime) stepWatchers() bool {
	r.mu.Lock()
	names, ws := inKeyOrder(r.watchers, func(w *watcher) bool { return w.ctx != nil && !w.failed })
	r.mu.Unlock()
	read := false
	for i, w := range ws {
		for {
			ev, err := w.ctx.GetAsyncEvent()
			if errors.Is(err, verbs.EAGAIN) {
				break
			}
			if err != nil {
				w.failed = true
				r.log.Warn("libibpath: the device's events cannot be read any more on the shim's context", "device", names[i], "err", err)
				break
			}
			read = true
			r.portEvent(names[i], ev)
			w.ctx.AckAsyncEvent(ev)
		}
	}
	return read
}

// stepNotify reads the completion channels of the backup devices, in the
// order of the application's contexts; it reports whether it read any
// event.
func (r *Runtime) stepNotify() bool {
	r.l2mu.Lock()
	_, sets := inKeyOrder(r.shadows, func(s *shadowSet) bool { return s.ch != nil })
	r.l2mu.Unlock()
	read := false
	for _, s := range sets {
		if n, _ := r.backupEvents(s); n > 0 {
			read = true
		}
	}
	return read
}

// inKeyOrder returns the keys of m whose values keep, in order, and their
// values: a stepped runtime reads its devices in an order that does not
// depend on map iteration, so that a run replays exactly.
func inKeyOrder[K cmp.Ordered, V any](m map[K]V, keep func(V) bool) ([]K, []V) {
	keys := make([]K, 0, len(m))
	for k, v := range m {
		if keep(v) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	vals := make([]V, len(keys))
	for i, k := range keys {
		vals[i] = m[k]
	}
	return keys, vals
}
