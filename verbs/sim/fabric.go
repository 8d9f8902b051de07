package sim

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// Config holds the timing model of a fabric. Zero fields take the defaults
// of DefaultConfig.
type Config struct {
	// Seed drives every random choice (loss, SetDelay, SetCongestion, TimerLate draws).
	Seed uint64
	// LinkLatency is the one-way latency between two ports on one leaf
	// switch, including HCA processing.
	LinkLatency time.Duration
	// SpineLatency is added when a packet crosses a spine switch.
	SpineLatency time.Duration
	// ArmDelay is how long an alternate path takes to load after REARM
	// before the QP reports ARMED.
	ArmDelay time.Duration
	// PortActivateDelay is the time from a link coming up (INIT) to the
	// subnet manager making the port ACTIVE.
	PortActivateDelay time.Duration
	// Spines is the number of spine switches joining the leaves.
	Spines int
	// EndlessRetry7 makes a requester whose retry_cnt is 7 retransmit
	// without end, as soft-RoCE (rdma_rxe) does: its completer counts
	// retries down only below 7. The IB spec, and the default here, give
	// such a QP RETRY_EXC_ERR after 7 retries.
	EndlessRetry7 bool
	// StrictMem makes RegMR refuse a buffer that did not come from
	// AllocMem of a PD on the same host, as verbs/ibv refuses memory on
	// the Go heap (the HCA would read it after the runtime moved or freed
	// it). Off, any buffer can be registered.
	StrictMem bool
	// TimerLate makes every local ACK timer fire late by a uniform draw
	// in [0, TimerLate]: a transport timer is a lower bound, and a
	// software transport's fires on a kernel tick (rdmavt arms its retry
	// timer in jiffies, plus busy_jiffies under load). Zero: on time.
	TimerLate time.Duration
	// Profile chooses the device behaviours on which the sources differ
	// (profile.go); "" is ProfileStrict. A name that ParseProfile refuses
	// is taken as strict: parse user input with ParseProfile first.
	Profile Profile
}

// DefaultConfig is the timing model used when a Config field is zero.
var DefaultConfig = Config{
	LinkLatency:       1 * time.Microsecond,
	SpineLatency:      500 * time.Nanosecond,
	ArmDelay:          20 * time.Microsecond,
	PortActivateDelay: 2 * time.Millisecond,
	Spines:            2,
}

// Fabric is one simulated subnet: hosts with HCAs, leaf switches that
// ports are cabled to, and spine switches joining the leaves.
type Fabric struct {
	mu  sync.Mutex
	cfg Config
	beh behaviour
	rng *rand.Rand

	now    time.Duration
	seq    uint64
	events eventHeap

	hosts    []*Host
	leaves   []*Switch
	spines   []*Switch
	lids     map[uint16]*Port // every LID of every LMC range
	gids     map[verbs.GID]*Port
	nextLID  uint16
	smLID    uint16
	drops    []psnDrop
	holds    []psnHold
	tracer   func(TraceRecord)
	pktFree  []*packet
	stats    Stats
	stale    []StaleExecution // the first few of Stats.StaleExecuted
	addrNext uint64           // next simulated virtual address for registered memory
}

// Stats counts what the fabric did, for benchmarks and tests.
type Stats struct {
	Events        uint64 // events processed
	Requests      uint64 // request packets sent (including retransmissions)
	Retransmits   uint64 // request packets sent again
	Dropped       uint64 // packets lost (faults, loss rates, broken routes)
	Completions   uint64 // work completions generated
	Migrations    uint64 // automatic or manual path migrations
	RetryTimeouts uint64 // local ACK timeouts that fired
	// StaleExecuted counts requests a responder executed after their
	// requester QP was reset or destroyed (StaleExecution);
	// StaleEffective those of them that did something (Effective);
	// StaleCrossed those taken by a responder reset (or another QP)
	// since they were sent: packets of an earlier connection at both
	// ends (Crossed).
	StaleExecuted  uint64
	StaleEffective uint64
	StaleCrossed   uint64
}

// New returns an empty fabric.
func New(cfg Config) *Fabric {
	d := DefaultConfig
	if cfg.LinkLatency == 0 {
		cfg.LinkLatency = d.LinkLatency
	}
	if cfg.SpineLatency == 0 {
		cfg.SpineLatency = d.SpineLatency
	}
	if cfg.ArmDelay == 0 {
		cfg.ArmDelay = d.ArmDelay
	}
	if cfg.PortActivateDelay == 0 {
		cfg.PortActivateDelay = d.PortActivateDelay
	}
	if cfg.Spines == 0 {
		cfg.Spines = d.Spines
	}
	if _, err := ParseProfile(string(cfg.Profile)); err != nil {
		cfg.Profile = ProfileStrict
	}
	if cfg.Profile == "" {
		cfg.Profile = ProfileStrict
	}
	f := &Fabric{
		cfg:      cfg,
		beh:      cfg.Profile.behaviour(),
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		lids:     map[uint16]*Port{},
		gids:     map[verbs.GID]*Port{},
		nextLID:  2,
		smLID:    1,
		addrNext: 0x7f0000000000,
	}
	for i := 0; i < cfg.Spines; i++ {
		f.spines = append(f.spines, &Switch{fab: f, name: spineName(i), alive: true, spine: true})
	}
	return f
}

// Now is the virtual time. Fabric implements verbs.Clock.
func (f *Fabric) Now() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Stats returns the counters so far.
func (f *Fabric) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Hosts returns the hosts in the order they were added.
func (f *Fabric) Hosts() []*Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Host(nil), f.hosts...)
}

// Host returns the host with the given name, or nil.
func (f *Fabric) Host(name string) *Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

// Pending reports how many events are scheduled.
func (f *Fabric) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.events)
}

// NextEvent reports when the next scheduled event is due; false when
// nothing is scheduled. A driver with nothing of its own to do before
// then may advance the clock that far at once.
func (f *Fabric) NextEvent() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.events) == 0 {
		return 0, false
	}
	return f.events[0].at, true
}

// Step processes the next scheduled event, advancing virtual time to it.
// It reports false when nothing is scheduled.
func (f *Fabric) Step() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.step(-1)
}

// RunUntilIdle processes events until none is left or maxEvents have run
// (maxEvents <= 0 means no limit), and returns how many ran. A fabric with
// periodic faults scheduled is never idle before they end.
func (f *Fabric) RunUntilIdle(maxEvents int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for (maxEvents <= 0 || n < maxEvents) && f.step(-1) {
		n++
	}
	return n
}

// RunUntil processes every event scheduled at or before t, then sets the
// clock to t.
func (f *Fabric) RunUntil(t time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.step(t) {
	}
	if t > f.now {
		f.now = t
	}
}

// RunFor runs the fabric for d of virtual time.
func (f *Fabric) RunFor(d time.Duration) {
	f.mu.Lock()
	t := f.now + d
	f.mu.Unlock()
	f.RunUntil(t)
}

// step runs one event due at or before limit (limit < 0: any).
func (f *Fabric) step(limit time.Duration) bool {
	if len(f.events) == 0 {
		return false
	}
	if limit >= 0 && f.events[0].at > limit {
		return false
	}
	ev := f.events.pop()
	if ev.at > f.now {
		f.now = ev.at
	}
	f.stats.Events++
	f.dispatch(ev)
	return true
}

// schedule queues an event at now+d.
func (f *Fabric) schedule(d time.Duration, ev event) {
	ev.at = f.now + d
	f.seq++
	ev.seq = f.seq
	f.events.push(ev)
}

// At schedules fn to run at virtual time t (or now, if t has passed) with
// the fabric lock held. fn may call the fabric's unexported helpers only;
// it is how scheduled faults are built.
func (f *Fabric) at(t time.Duration, fn func()) {
	d := t - f.now
	if d < 0 {
		d = 0
	}
	f.schedule(d, event{kind: evFunc, fn: fn})
}

func (f *Fabric) dispatch(ev event) {
	switch ev.kind {
	case evPacket:
		f.deliver(ev.pkt)
	case evRetryTimer:
		ev.qp.onRetryTimer(ev.gen)
	case evRNRTimer:
		ev.qp.onRNRTimer(ev.gen)
	case evArm:
		ev.qp.onArmLoaded(ev.gen)
	case evFunc:
		ev.fn()
	}
}
