package shim

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/asyncev"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/verbs"
)

// Layer1 runs layer 1 (InfiniBand Automatic Path Migration) for the RC
// QPs of the process: it owns an apm.Manager, folds the alternate path
// into the application's own INIT->RTR and RTR->RTS (Modify), feeds it
// the port events of the shim's own contexts (PortEvent) and the QP events
// the application reads (QPEvent), drives its timer (ARMED polls, probes,
// failback, and the migration poll that notices a migration nobody read
// an event for) on a goroutine, answers relayed arm and migrate (Command),
// and reports each QP's state (Status, Changed) and the QPs it can no
// longer protect (HandOver).
//
// The adapter at the other end of each path is described by ibpathd
// (lookup_hca, through SetSession); without a session QPs stay
// unprotected, with that reason.
//
// Every method is safe for concurrent use; the manager is touched only
// under one lock. Hooks (HandOver, Changed) are called without it, one at
// a time, in the order the changes happened.
//
// Where the runtime calls it:
//
//	NewRuntime (IBPATH_APM on)        NewLayer1(Layer1Options{HandOver, Changed, Log})
//	interposed ibv_modify_qp          Modify (the whole modify), then Runtime.Modified
//	SetReporter(session) / (nil)      SetSession(session) / SetSession(nil)
//	portEvent (the shim's context)    PortEvent, before layer 2 looks at the fault
//	AsyncEvent (the application read) QPEvent for QP events
//	Command                           Command; when it answers !ok, as before
//	Destroying / Closed               Destroying / ContextClosed
//	decideLayer1, Changed hook        Status(...).Apply(&qp.status), then report
//	Close                             Close
type Layer1 struct {
	log    *slog.Logger
	peers  *l1Peers
	hooks  Layer1Options
	poller *asyncev.Poller

	mu    sync.Mutex // mgr and everything below
	mgr   *apm.Manager
	qps   map[l1Key]*l1QP
	letGo map[l1Key]bool // QPs layer 1 protected and let go to layer 2 (LetGo)
	await map[l1Key]bool // QPs waiting for their peer after a migration (collect; layer1_follow.go)
	idle  map[l1Key]bool // QPs idle in REARM (collect; layer1_rearm.go)
	// nextRearmWatch is when watchRearm next reads the idle QPs'
	// progress; rearmTraffic counts the QPs it found moving
	nextRearmWatch time.Duration
	rearmTraffic   int
	ctxs           map[string][]verbs.Context // application contexts with protected QPs, by device
	closed         bool

	nmu        sync.Mutex // queue, delivering and nudges
	queue      []l1Notice
	delivering bool
	nudges     NudgeStats

	kicked atomic.Bool // without a poller: Tick is due at once (Kicked)

	once sync.Once
}

// Layer1Options configures NewLayer1. Zero fields take the defaults.
type Layer1Options struct {
	// APM tunes the manager (apm.DefaultConfig for its zero fields,
	// except FailbackHold: DefaultFailbackHold).
	APM apm.Config
	// Clock is the manager's time; nil: the wall clock. Tests give the
	// simulated fabric's.
	Clock verbs.Clock
	// PeerTTL is how long a peer's adapter description from ibpathd is
	// reused before it is asked again (port states change). Default
	// 250 ms; ibpathd itself caches other nodes' answers for 1 s.
	PeerTTL time.Duration
	// LookupTimeout bounds one lookup_hca. Default 1 s.
	LookupTimeout time.Duration
	// HandOver, when set, is called when layer 1 can no longer protect a
	// QP (PATH_MIG_ERR, both paths down, a QP or device error): the next
	// layer takes over.
	HandOver func(Layer1HandOver)
	// Changed, when set, is called with a QP's new layer-1 status each
	// time it changes, with the PathMigrated event when its primary path
	// moved.
	Changed func(Layer1Change)
	// Progress, when set, gives how far a QP's sends got in the data path:
	// the send WRs posted and those retired by successful completions
	// (the shim's shadow rings); ok is false for a QP it does not follow.
	// After a migration ibpath made, a QP waits for its peer to follow
	// before it re-arms; a completion of a WR posted after the migration
	// proves it did (apm.Manager.PeerFollowed), so the QP re-arms then,
	// not after apm.Config.PeerWait. Called without layer 1's lock.
	Progress func(ctx verbs.Context, qp verbs.QP) (posted, retired uint64, ok bool)
	// Nudge, when set, posts layer 1's nudge on a QP through the data
	// path (Nudger) right after each migration layer 1 made: a
	// zero-length RDMA WRITE that moves the peer and gets the WRs in
	// flight on the dead path resent at once (apm.Config.Nudge,
	// layer1_nudge.go). Called without layer 1's lock, from the goroutine
	// that made the migration, after it.
	Nudge func(ctx verbs.Context, qp verbs.QP) error
	// Log receives layer 1's logs; nil discards them.
	Log *slog.Logger
	// Now is the time of day of the migrations reported (Changed); nil:
	// the wall clock.
	Now func() time.Time
	// Spawn, when set, runs layer 1's background work (a peer's
	// description asked for again) instead of a goroutine, and layer 1
	// starts no timer goroutine: its owner calls Tick when Tick asked
	// (or at once when Kicked says so). The stepped runtime's
	// (NewSteppedRuntime).
	Spawn func(func())
}

// Layer1HandOver names a QP that layer 1 gave up, and why.
type Layer1HandOver struct {
	Device string
	QPN    uint32
	QP     verbs.QP
	Reason string
}

// Layer1Change is a QP's new layer-1 status; Migrated is set when its
// primary path moved (status.EvPathMigrated, for ibpathd).
type Layer1Change struct {
	Device   string
	QPN      uint32
	Status   Layer1Status
	Migrated *Layer1Migration
}

// Layer1Migration is a move of a QP's primary path.
type Layer1Migration struct {
	From, To string // "port 1", "port 2+1"
	Port     uint8  // the new primary port
	FromPort uint8  // the port it left
	At       time.Time
}

type l1Key struct {
	dev string
	qpn uint32
}

// l1QP is a QP the manager protects.
type l1QP struct {
	ctx   verbs.Context
	qp    verbs.QP
	route ownerproto.Route // the other end
	last  apm.QPStatus     // as last reported through Changed
	// While the QP waits for its peer after a migration (awaiting-peer):
	// the sends posted when layer 1 first saw it waiting (layer1_follow.go).
	follow l1Follow
	// While it is idle in REARM: its send positions at the last look
	// (layer1_rearm.go).
	rearm l1Rearm
}

// l1Notice is one hook call waiting to be made.
type l1Notice struct {
	handOver *Layer1HandOver
	change   *Layer1Change
	nudge    *l1Nudge
}

// Defaults of Layer1Options.
const (
	DefaultPeerTTL       = 250 * time.Millisecond
	DefaultLookupTimeout = time.Second
	// DefaultFailbackHold is how long the home path must be armed before
	// auto failback moves traffic back. The peer learns that this port
	// came back only through ibpathd's descriptions (cached up to 1 s by
	// its ibpathd, PeerTTL by its shim, then its next probe), and must
	// have armed its own home path before this end moves, or this end's
	// packets reach a port the peer does not listen on: the hold covers
	// that, which apm's 200 ms (meant for peers described at once) does
	// not.
	DefaultFailbackHold = 2 * time.Second
)

// NewLayer1 starts layer 1 (its timer goroutine, idle until a QP is
// protected). Close stops it.
func NewLayer1(o Layer1Options) (*Layer1, error) {
	if o.Clock == nil {
		o.Clock = newWallClock()
	}
	if o.PeerTTL <= 0 {
		o.PeerTTL = DefaultPeerTTL
	}
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = DefaultLookupTimeout
	}
	if o.APM.FailbackHold == 0 {
		o.APM.FailbackHold = DefaultFailbackHold
	}
	if o.Progress != nil && o.APM.RearmIdle == 0 {
		o.APM.RearmIdle = DefaultRearmIdle // layer1_rearm.go
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Layer1{log: o.Log, peers: newL1Peers(o.PeerTTL, o.LookupTimeout, o.Now, o.Spawn), hooks: o,
		qps: map[l1Key]*l1QP{}, letGo: map[l1Key]bool{}, await: map[l1Key]bool{}, idle: map[l1Key]bool{}, ctxs: map[string][]verbs.Context{}}
	if o.Nudge != nil {
		o.APM.Nudge = l.queueNudge
	}
	mgr, err := apm.New(o.Clock, o.APM, l.peers, l1HandOver{l})
	if err != nil {
		return nil, fmt.Errorf("layer 1: %w", err)
	}
	l.mgr = mgr
	// The poller calls Tick at once, then when Tick asks (at least every
	// 100 ms while any QP is protected), and at once after a Kick.
	if o.Spawn != nil {
		l.kicked.Store(true)
		return l, nil
	}
	l.poller = asyncev.StartPoller(l.tick, asyncev.PollerOptions{MinInterval: l1PollMin, MaxInterval: l1PollMax})
	return l, nil
}

// The bounds of the pause between two ticks while Tick has work pending.
const (
	l1PollMin = 20 * time.Microsecond
	l1PollMax = 100 * time.Millisecond
)

// kick asks for a tick soon: the poller's, or the owner's (Kicked).
func (l *Layer1) kick() {
	if l.poller == nil {
		l.kicked.Store(true)
		return
	}
	l.poller.Kick()
}

// Tick does layer 1's timed work (ARMED polls, probes, failback, the
// migration poll, the peers' follow) for an owner that runs it
// (Layer1Options.Spawn): it returns when to call again, if pending,
// clamped as the poller clamps it.
func (l *Layer1) Tick() (next time.Duration, pending bool) {
	next, pending = l.tick()
	return min(max(next, l1PollMin), l1PollMax), pending
}

// Kicked reports, once, that a Tick is due at once (something changed).
func (l *Layer1) Kicked() bool { return l.kicked.Swap(false) }

// SetSession attaches the ibpathd session peers' adapters are described
// through, or detaches it (nil) when the session ends.
func (l *Layer1) SetSession(s HCALookup) { l.peers.setSession(s) }

// Close stops the timer goroutine and the background lookups; later
// Modify calls pass straight through. The QPs and contexts stay the
// application's.
func (l *Layer1) Close() {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		if l.poller != nil {
			l.poller.Close()
		}
		l.peers.close()
	})
}

// Modify is the application's ibv_modify_qp with layer 1 folded in: for
// an RC QP on an InfiniBand port it adds the alternate path to INIT->RTR
// and REARM to RTR->RTS (apm.Manager.ModifyQP), retrying without them if
// the device refuses (the reason is kept in the QP's status); a reset or
// ERR of a protected QP forgets it. Any other QP or transition is passed
// to qp as is. ctx and qp call the provider directly; qp must be the same
// value at every call for one QP. The error is the application's.
func (l *Layer1) Modify(ctx verbs.Context, qp verbs.QP, attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	k := l1Key{ctx.Device().Name, qp.QPN()}
	toRTR := attr != nil && mask&verbs.QPAttrState != 0 && attr.QPState == verbs.QPSRTR && qp.State() == verbs.QPSInit
	eligible := false
	if toRTR && mask&verbs.QPAttrAV != 0 {
		if why := l1Eligible(ctx, qp); why != "" {
			l.log.Debug("libibpath: layer 1 passes the QP through", "device", k.dev, "qpn", k.qpn, "why", why)
		} else {
			eligible = true
			// Asked before taking the lock: the manager asks for the peer
			// inside this modify.
			l.peers.prefetch(routeOfAH(attr.AHAttr))
		}
	}
	l.mu.Lock()
	q := l.qps[k]
	var err error
	switch {
	case l.closed:
		err = qp.Modify(attr, mask)
	case q != nil:
		err = l.mgr.ModifyQP(q.ctx, q.qp, attr, mask)
	case eligible:
		err = l.mgr.ModifyQP(ctx, qp, attr, mask)
		if _, ok := l.mgr.QPStatus(qp); ok {
			l.qps[k] = &l1QP{ctx: ctx, qp: qp, route: routeOfAH(attr.AHAttr)}
			l.addContext(k.dev, ctx)
		}
	default:
		err = qp.Modify(attr, mask)
	}
	l.collect()
	l.mu.Unlock()
	l.deliver()
	l.kick()
	return err
}

// Readopt protects again a QP that layer 1 let go to layer 2 (LetGo) and
// that layer 2 brought home: its failover (after layer 1 handed it over,
// or on a fault of its own) ended with a switch back that reset the QP
// and connected it anew, to RTS, with no alternate path. Layer 1
// registers it with the manager, which loads an alternate and arms it
// RTS->RTS, as for a QP the application connected. It reports whether
// layer 1 now protects the QP: false for one it did not let go, one that
// is not RC on an InfiniBand port, or when the manager refuses it
// (logged).
func (l *Layer1) Readopt(ctx verbs.Context, qp verbs.QP) bool {
	k := l1Key{ctx.Device().Name, qp.QPN()}
	l.mu.Lock()
	was := l.letGo[k]
	delete(l.letGo, k)
	l.mu.Unlock()
	if !was {
		return false
	}
	if why := l1Eligible(ctx, qp); why != "" {
		l.log.Debug("libibpath: layer 1 leaves the QP brought home to layer 2", "device", k.dev, "qpn", k.qpn, "why", why)
		return false
	}
	a, _, err := qp.Query(verbs.QPAttrAV)
	if err != nil {
		l.log.Warn("libibpath: layer 1 cannot protect the QP brought home", "device", k.dev, "qpn", k.qpn, "err", fmt.Errorf("ibv_query_qp: %w", err))
		return false
	}
	route := routeOfAH(a.AHAttr)
	l.peers.prefetch(route)
	l.mu.Lock()
	ok := false
	switch {
	case l.closed || l.qps[k] != nil:
	default:
		if err := l.mgr.Register(ctx, qp); err != nil { // LetGo unregistered it
			l.log.Warn("libibpath: layer 1 cannot protect the QP brought home", "device", k.dev, "qpn", k.qpn, "err", err)
			break
		}
		l.qps[k] = &l1QP{ctx: ctx, qp: qp, route: route}
		l.addContext(k.dev, ctx)
		ok = true
		l.log.Info("libibpath: layer 1 protects the QP again after layer 2's switch back", "device", k.dev, "qpn", k.qpn)
	}
	l.collect()
	l.mu.Unlock()
	l.deliver()
	l.kick()
	return ok
}

// l1Eligible says why layer 1 leaves a QP alone, or "" when it arms it:
// an RC QP whose port is InfiniBand (RoCE has no APM; the runtime reports
// those QPs itself).
func l1Eligible(ctx verbs.Context, qp verbs.QP) string {
	qa, ia, err := qp.Query(verbs.QPAttrPort)
	if err != nil {
		return fmt.Sprintf("ibv_query_qp: %v", err)
	}
	if ia.QPType != verbs.QPTRC {
		return fmt.Sprintf("%v QP: layer 1 protects RC QPs", ia.QPType)
	}
	pa, err := ctx.QueryPort(qa.PortNum)
	if err != nil {
		return fmt.Sprintf("ibv_query_port %d: %v", qa.PortNum, err)
	}
	if pa.LinkLayer != verbs.LinkLayerInfiniBand {
		return fmt.Sprintf("port %d is %v: no automatic path migration", qa.PortNum, pa.LinkLayer)
	}
	return ""
}

func (l *Layer1) addContext(dev string, ctx verbs.Context) {
	for _, c := range l.ctxs[dev] {
		if c == ctx {
			return
		}
	}
	l.ctxs[dev] = append(l.ctxs[dev], ctx)
}

// Destroying forgets a QP before the application destroys it.
func (l *Layer1) Destroying(dev string, qpn uint32) {
	l.mu.Lock()
	k := l1Key{dev, qpn}
	if q := l.qps[k]; q != nil {
		l.mgr.Unregister(q.qp)
		l.forget(k)
	}
	delete(l.letGo, k)
	l.mu.Unlock()
}

// LetGo forgets a QP that layer 2 took over (diverted), and remembers
// that layer 1 protected it: Readopt takes it back once layer 2 brought it
// home. It reports whether layer 1 protected it.
func (l *Layer1) LetGo(dev string, qpn uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l1Key{dev, qpn}
	q := l.qps[k]
	if q == nil {
		return false
	}
	l.mgr.Unregister(q.qp)
	l.forget(k)
	l.letGo[k] = true
	return true
}

// ContextClosed forgets an application context and its QPs.
func (l *Layer1) ContextClosed(ctx verbs.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, q := range l.qps {
		if q.ctx == ctx {
			l.mgr.Unregister(q.qp)
			l.forget(k)
		}
	}
}

// forget drops a QP (and its context when it was the last); l.mu held.
func (l *Layer1) forget(k l1Key) {
	q := l.qps[k]
	delete(l.qps, k)
	delete(l.await, k)
	delete(l.idle, k)
	if q == nil {
		return
	}
	for _, o := range l.qps {
		if o.ctx == q.ctx {
			return
		}
	}
	cs := l.ctxs[k.dev]
	for i, c := range cs {
		if c == q.ctx {
			l.ctxs[k.dev] = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(l.ctxs[k.dev]) == 0 {
		delete(l.ctxs, k.dev)
	}
}

// Stats returns the manager's counters.
func (l *Layer1) Stats() apm.Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mgr.Stats()
}

func (l *Layer1) tick() (time.Duration, bool) {
	watching := l.followPeers()
	idle := l.watchRearm()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, false
	}
	wait, pending := l.mgr.Tick()
	l.collect()
	l.mu.Unlock()
	l.deliver()
	if watching && (!pending || wait > followPoll) {
		wait, pending = followPoll, true
	}
	if idle && (!pending || wait > rearmWatchEvery) {
		wait, pending = rearmWatchEvery, true
	}
	return wait, pending
}

// l1HandOver is the manager's next layer: it queues the hook's call.
type l1HandOver struct{ l *Layer1 }

// HandOver implements apm.Handover; the manager calls it under l.mu.
func (h l1HandOver) HandOver(qp verbs.QP, reason string) {
	st, _ := h.l.mgr.QPStatus(qp)
	h.l.log.Warn("libibpath: layer 1 cannot protect the QP any more", "device", st.Device, "qpn", qp.QPN(), "reason", reason)
	h.l.enqueue(l1Notice{handOver: &Layer1HandOver{Device: st.Device, QPN: qp.QPN(), QP: qp, Reason: reason}})
}

// collect queues a Changed call for every QP whose status changed since
// the last one, and drops the QPs the manager forgot (reset by the
// application). l.mu held.
func (l *Layer1) collect() {
	for k, q := range l.qps {
		st, ok := l.mgr.QPStatus(q.qp)
		if !ok {
			l.forget(k)
			continue
		}
		if st.State == fsm.APMAwaitPeer {
			l.await[k] = true
		} else if l.await[k] {
			delete(l.await, k)
			q.follow = l1Follow{}
		}
		l.collectIdle(k, q, st.State)
		if st == q.last {
			continue
		}
		c := &Layer1Change{Device: k.dev, QPN: k.qpn, Status: l.status(st)}
		if st.DampedUntil != q.last.DampedUntil && st.DampedUntil != 0 {
			l.log.Info("libibpath: failback held: the home port or path flapped (flap damping)", "device", k.dev, "qpn", k.qpn,
				"home", st.Home.String(), "until", c.Status.FailbackHeldUntil.Format(time.TimeOnly))
		}
		if st.Migrations != q.last.Migrations && st.Primary != q.last.Primary && q.last.Primary.Port != 0 {
			c.Migrated = &Layer1Migration{From: q.last.Primary.String(), To: st.Primary.String(), Port: st.Primary.Port,
				FromPort: q.last.Primary.Port, At: l.hooks.Now()}
			l.log.Info("libibpath: path migrated", "device", k.dev, "qpn", k.qpn, "from", c.Migrated.From, "to", c.Migrated.To)
		}
		q.last = st
		l.enqueue(l1Notice{change: c})
	}
}

func (l *Layer1) enqueue(n l1Notice) {
	if n.handOver != nil && l.hooks.HandOver == nil || n.change != nil && l.hooks.Changed == nil ||
		n.nudge != nil && l.hooks.Nudge == nil {
		return
	}
	l.nmu.Lock()
	l.queue = append(l.queue, n)
	l.nmu.Unlock()
}

// deliver makes the queued hook calls, without l.mu. One goroutine
// delivers at a time, in order; a call made meanwhile (a hook that calls
// back into Layer1 included) leaves its notices to it.
func (l *Layer1) deliver() {
	l.nmu.Lock()
	if l.delivering {
		l.nmu.Unlock()
		return
	}
	l.delivering = true
	for len(l.queue) > 0 {
		n := l.queue[0]
		l.queue = l.queue[1:]
		l.nmu.Unlock()
		switch {
		case n.handOver != nil:
			l.hooks.HandOver(*n.handOver)
		case n.nudge != nil:
			l.nudge(*n.nudge)
		default:
			l.hooks.Changed(*n.change)
		}
		l.nmu.Lock()
	}
	l.delivering = false
	l.nmu.Unlock()
}
