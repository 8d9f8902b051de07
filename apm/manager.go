package apm

import (
	"errors"
	"fmt"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// rtrAltTimeout is the alternate's timeout loaded at INIT->RTR (14: 67 ms).
const rtrAltTimeout = 14

// Manager runs layer 1 for the QPs of one process. It is not safe for
// concurrent use: one runtime loop owns it.
type Manager struct {
	clock verbs.Clock
	cfg   Config
	peers PeerResolver
	next  Handover
	devs  []*device
	byQP  map[verbs.QP]*entry
	stats Stats
	// drained lists, by device name, the ports an operator drained
	// (drain.go).
	drained map[string][]uint8
	// ports is the flap damping of the devices' ports, paths that of
	// each QP's home path (Config.Damping; damping.go).
	ports *pathsel.Damper[pathsel.PortKey]
	paths *pathsel.Damper[verbs.QP]
}

// device is an open adapter with the QPs registered on it.
type device struct {
	ctx     verbs.Context
	desc    pathsel.HCA
	descErr error
	entries []*entry
	drained []uint8 // ports drained by an operator, shown DOWN in desc
}

// entry is one protected QP.
type entry struct {
	qp         verbs.QP
	dev        *device
	m          *fsm.APM
	nextPoll   time.Duration // Rearming: next ARMED query
	gap        time.Duration // Rearming: current backoff
	busyAt     time.Duration // Rearming: the load or the last traffic (Traffic), for Config.RearmIdle
	nextProbe  time.Duration // next look for a better alternate
	armedAt    time.Duration
	nextMig    time.Duration // armed: next query for a migration nobody reported
	migGap     time.Duration // armed: the migration poll's current period (MigrationPoll to MigrationPollMax)
	peerUntil  time.Duration // awaiting-peer: re-arm at the latest then
	migrations int
	preloaded  *pathsel.Alternate // chosen at INIT->RTR, armed at RTR->RTS
	damped     bool               // its failback is held by its home port's or path's damping (counted once)
}

// Stats counts what the manager did.
type Stats struct {
	Registered       int
	Loads            int // alternates loaded with REARM
	Armed            int // ARMED observed
	Migrations       int // migrations ibpath asked for (proactive, operator, failback)
	HWMigrations     int // migrations the HCA did by itself (PATH_MIG, or found by the migration poll)
	PolledMigrations int // of HWMigrations, those the migration poll found before any event
	MigrationPolls   int // ibv_query_qp calls of the migration poll
	RearmPolls       int // ibv_query_qp calls of the ARMED poll of QPs in REARM
	Failbacks        int
	FailbacksHeld    int // failbacks put off by a hold-down: the home path's far port was not ACTIVE
	FailbacksDamped  int // failbacks put off because the home port or path flapped (Config.Damping), once per QP and suppression
	Handovers        int
	NoAlternate      int // loads that found no healthy alternate
	ModifyFallbacks  int // application modifies retried without the APM bits
	PeerFollowed     int // re-arms after a migration that the data path showed the peer had followed (before PeerWait)
	AltKept          int // new alternates an ARMED QP's device refused (it keeps the armed one)
	Nudges           int // zero-length WRITEs posted after a migration (Config.Nudge)
	NudgeFailures    int // nudges the embedder could not post
}

// New returns a manager. peers describes the adapters paths lead to; next
// receives QPs APM cannot protect (nil: errors surface unchanged).
func New(clock verbs.Clock, cfg Config, peers PeerResolver, next Handover) (*Manager, error) {
	if clock == nil || peers == nil {
		return nil, errors.New("apm: new manager: clock and peer resolver are required")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ports, err := pathsel.NewDamper[pathsel.PortKey](c.Damping)
	if err != nil {
		return nil, fmt.Errorf("apm: config: %w", err)
	}
	paths, _ := pathsel.NewDamper[verbs.QP](c.Damping) // the same configuration
	return &Manager{clock: clock, cfg: c, peers: peers, next: next, byQP: map[verbs.QP]*entry{}, ports: ports, paths: paths}, nil
}

// Stats returns the counters.
func (m *Manager) Stats() Stats { return m.stats }

func (m *Manager) device(ctx verbs.Context) *device {
	for _, d := range m.devs {
		if d.ctx == ctx {
			return d
		}
	}
	d := &device{ctx: ctx, drained: m.drained[ctx.Device().Name]}
	d.refresh()
	m.devs = append(m.devs, d)
	return d
}

func (d *device) refresh() {
	d.desc, d.descErr = pathsel.Describe(d.ctx)
	d.markDrained()
}

func ref(attr verbs.QPAttr) fsm.PathRef {
	return fsm.PathRef{Port: attr.PortNum, Bits: attr.AHAttr.SrcPathBits}
}

// Register protects a QP that is already connected (RTR, RTS or SQD). A
// QP in RTS is armed at once (RTS->RTS); one in RTR when it reaches RTS.
// On a link layer or device without APM it is recorded as unsupported
// with the reason, and nothing else happens.
func (m *Manager) Register(ctx verbs.Context, qp verbs.QP) error {
	if _, ok := m.byQP[qp]; ok {
		return fmt.Errorf("apm: register QP %#x: already registered", qp.QPN())
	}
	attr, _, err := qp.Query(verbs.QPAttrState | verbs.QPAttrPort | verbs.QPAttrAV)
	if err != nil {
		return fmt.Errorf("apm: register QP %#x: %w", qp.QPN(), err)
	}
	switch attr.QPState {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD:
	default:
		return fmt.Errorf("apm: register QP %#x: it is %v; register after INIT->RTR", qp.QPN(), attr.QPState)
	}
	e := m.add(ctx, qp, ref(attr))
	// The device's ports as they are now: the manager hears port events
	// only while it protects a QP of the context, and a QP registered
	// after a quiet spell (one brought home by the next layer) must not
	// be judged by ports seen down before it.
	e.dev.refresh()
	m.start(e, attr.PortNum)
	if attr.QPState != verbs.QPSRTR {
		m.drainNewEntry(e) // an RTR QP's at RTS (ModifyQP), once it can arm
	}
	return nil
}

func (m *Manager) add(ctx verbs.Context, qp verbs.QP, home fsm.PathRef) *entry {
	d := m.device(ctx)
	e := &entry{qp: qp, dev: d, m: fsm.NewAPM(home, m.cfg.Failback), nextProbe: m.clock.Now() + m.cfg.ProbeInterval}
	d.entries = append(d.entries, e)
	m.byQP[qp] = e
	m.stats.Registered++
	return e
}

// start decides whether APM can protect e at all, then asks to arm it.
func (m *Manager) start(e *entry, port uint8) {
	if e.dev.descErr != nil {
		m.step(e, fsm.APMEvent{Kind: fsm.EvUnsupported, Reason: e.dev.descErr.Error()})
		return
	}
	if err := pathsel.Support(e.dev.desc, port); err != nil {
		m.step(e, fsm.APMEvent{Kind: fsm.EvUnsupported, Reason: err.Error()})
		return
	}
	m.step(e, fsm.APMEvent{Kind: fsm.EvArmRequested})
}

// Unregister forgets a QP (before the application destroys it).
func (m *Manager) Unregister(qp verbs.QP) {
	e, ok := m.byQP[qp]
	if !ok {
		return
	}
	delete(m.byQP, qp)
	m.paths.Forget(qp)
	es := e.dev.entries
	for i, x := range es {
		if x == e {
			e.dev.entries = append(es[:i], es[i+1:]...)
			break
		}
	}
}

// ModifyQP is ibv_modify_qp with layer 1 folded in, for the shim: at
// INIT->RTR it specifies the alternate path in the same call, at RTR->RTS
// it adds REARM (RTS->RTS arming is Register's). If the device refuses the
// added attributes, the application's own call is retried without them
// and the reason is kept in the QP's status: APM never breaks a modify.
func (m *Manager) ModifyQP(ctx verbs.Context, qp verbs.QP, attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if attr == nil || mask&verbs.QPAttrState == 0 {
		return qp.Modify(attr, mask)
	}
	cur := qp.State()
	switch {
	case attr.QPState == verbs.QPSReset || attr.QPState == verbs.QPSErr:
		// The application resets or tears down its QP: not a fault for
		// the next layer to take over.
		m.Unregister(qp)
	case cur == verbs.QPSInit && attr.QPState == verbs.QPSRTR && mask&verbs.QPAttrAltPath == 0:
		return m.modifyToRTR(ctx, qp, attr, mask)
	case cur == verbs.QPSRTR && attr.QPState == verbs.QPSRTS && mask&verbs.QPAttrPathMigState == 0:
		if e, ok := m.byQP[qp]; ok && e.m.State == fsm.APMUnprotected {
			if err := m.modifyToRTS(e, attr, mask); err != nil {
				return err
			}
			m.drainNewEntry(e)
			return nil
		}
	}
	return qp.Modify(attr, mask)
}

func (m *Manager) modifyToRTR(ctx verbs.Context, qp verbs.QP, attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	qa, _, err := qp.Query(verbs.QPAttrPort)
	if err != nil {
		return qp.Modify(attr, mask)
	}
	port := qa.PortNum
	e := m.add(ctx, qp, fsm.PathRef{Port: port, Bits: attr.AHAttr.SrcPathBits})
	// The local ACK timeout comes only at RTR->RTS, which loads the
	// alternate again with it; until then use the common default.
	cur := pathsel.Path{Port: port, AH: attr.AHAttr, PKeyIndex: qa.PKeyIndex, Timeout: rtrAltTimeout}
	alt, reason := m.choose(e, cur, nil)
	if reason != "" {
		if err := qp.Modify(attr, mask); err != nil {
			m.Unregister(qp)
			return err
		}
		m.start(e, port) // records unsupported, or will arm at RTS
		return nil
	}
	a := *attr
	a.AltAHAttr, a.AltPortNum, a.AltPKeyIndex, a.AltTimeout = alt.AH, alt.Port, alt.PKeyIndex, alt.Timeout
	aerr := qp.Modify(&a, mask|verbs.QPAttrAltPath)
	if aerr == nil {
		e.preloaded = &alt
		return nil
	}
	m.stats.ModifyFallbacks++
	if err := qp.Modify(attr, mask); err != nil {
		m.Unregister(qp)
		return err
	}
	m.start(e, port)
	m.refused(e, "INIT->RTR", alt, aerr)
	return nil
}

// refused keeps why the device refused the alternate added to an
// application's modify (which then went through without it).
func (m *Manager) refused(e *entry, which string, alt pathsel.Alternate, err error) {
	if e.m.State != fsm.APMUnprotected {
		return
	}
	m.step(e, fsm.APMEvent{Kind: fsm.EvNoAlternate,
		Reason: fmt.Sprintf("the device refused the %v alternate on port %d in the application's %s: %v", alt.Kind, alt.Port, which, err)})
}

func (m *Manager) modifyToRTS(e *entry, attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	a := *attr
	add := verbs.QPAttrPathMigState
	a.PathMigState = verbs.MigRearm
	if e.preloaded == nil {
		qa, _, err := e.qp.Query(verbs.QPAttrPort | verbs.QPAttrAV)
		if err == nil {
			cur := pathsel.Path{Port: qa.PortNum, AH: qa.AHAttr, PKeyIndex: qa.PKeyIndex, Timeout: attr.Timeout}
			if alt, reason := m.choose(e, cur, nil); reason == "" {
				e.preloaded = &alt
			}
		}
		if e.preloaded == nil {
			return e.qp.Modify(attr, mask)
		}
	}
	alt := *e.preloaded
	a.AltAHAttr, a.AltPortNum, a.AltPKeyIndex, a.AltTimeout = alt.AH, alt.Port, alt.PKeyIndex, attr.Timeout
	add |= verbs.QPAttrAltPath
	if aerr := e.qp.Modify(&a, mask|add); aerr != nil {
		m.stats.ModifyFallbacks++
		e.preloaded = nil
		if err := e.qp.Modify(attr, mask); err != nil {
			return err
		}
		m.refused(e, "RTR->RTS", alt, aerr)
		return nil
	}
	// The alternate is loaded with REARM in the application's own call.
	e.preloaded = nil
	m.step(e, fsm.APMEvent{Kind: fsm.EvAltLoaded, Path: fsm.PathRef{Port: alt.Port, Bits: alt.Bits()}})
	return nil
}

// choose asks pathsel for an alternate; reason is non-empty when there is
// none.
func (m *Manager) choose(e *entry, cur pathsel.Path, prefer *pathsel.Ref) (pathsel.Alternate, string) {
	if e.dev.descErr != nil {
		return pathsel.Alternate{}, e.dev.descErr.Error()
	}
	peer, err := m.peers.Peer(cur.AH)
	if err != nil {
		return pathsel.Alternate{}, err.Error()
	}
	alt, err := pathsel.Choose(e.dev.desc, peer, cur, prefer, m.cfg.Policy)
	if err != nil {
		return pathsel.Alternate{}, err.Error()
	}
	return alt, ""
}
