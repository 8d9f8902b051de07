package shim

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// Port is what the shim knows of a port of an opened device.
type Port struct {
	Num       uint8
	LinkLayer verbs.LinkLayer
	LID       uint16
}

// QPInfo describes a QP the application created.
type QPInfo struct {
	QPN  uint32
	Type verbs.QPType
	// SRQ: the QP receives through an SRQ; SRQFollowed: one the shim
	// follows (SRQCreated mirrored it): layer 2 protects its QPs
	SRQ         bool
	SRQFollowed bool
	SendCap     uint32
	RecvCap     uint32
	// WRAPI: made by ibv_create_qp_ex to post through ibv_wr_* operations
	// the shim does not follow (local invalidate, memory windows, SEND
	// with invalidate, TSO, atomic write, flush); the others it follows
	// as it follows ibv_post_send.
	WRAPI bool
}

// Modify is a successful (or failed) ibv_modify_qp of the application.
type Modify struct {
	QPN     uint32
	Mask    verbs.QPAttrMask
	State   verbs.QPState // when Mask has QPAttrState
	Port    uint8         // when Mask has QPAttrPort
	DLID    uint16        // when Mask has QPAttrAV
	DGID    verbs.GID
	Global  bool
	DestQPN uint32 // when Mask has QPAttrDestQPN
	Err     int    // errno, 0 on success
	// Attr is the whole attribute set the application passed (the fields
	// Mask names are meaningful): layer 2 keeps the connect attributes
	// (PSNs, path, timers) to reconnect the default QP for a switch back.
	Attr verbs.QPAttr
}

// Reporter receives what the daemon should know (the ibpathd session).
type Reporter interface {
	ReportQP(status.QP) error
	QPGone(device string, qpn uint32) error
	Event(status.Event) error
}

type device struct {
	name  string
	ports map[uint8]Port
	def   verbs.Context // the application's context as verbs (nil when not wrapped)
}

type qp struct {
	dev    *device
	info   QPInfo
	status status.QP
	route  ownerproto.Route // the other end, once connected
	// connect is what the application's successful modifies set (the
	// fields connMask names): initial PSNs, path and timers, with which
	// layer 2 reconnects the default QP for a switch back.
	connect  verbs.QPAttr
	connMask verbs.QPAttrMask
	cmUp     bool // its rdma_cm connection is established (cmevent.go)
	// unprotected says why no layer protects the QP, known at its
	// creation (an SRQ not followed, a UD QP...): it stays its status's
	// reason whatever layer 1 later says of its port
	unprotected string
	// kept: the fatal events of the QP kept from the application while
	// layer 2 carried it (asyncevent.go), given back if its failover
	// surfaces
	kept []verbs.EventType
}

// Runtime is the shim's view of the process's verbs objects. It is safe
// for concurrent use (the application may call verbs from any thread).
type Runtime struct {
	cfg Config
	log *slog.Logger

	rooms cqRooms // the application CQs' headroom (cqroom.go)

	mu       sync.Mutex
	devs     map[uintptr]*device // by the context's address
	qps      map[qpKey]*qp
	rep      Reporter
	prov     verbs.Provider
	watchers map[string]*watcher
	ports    map[portKey]PortState
	portErr  map[portKey]time.Time           // when each port's last PORT_ERR was seen (migrationTook)
	drained  map[portKey]bool                // ports an operator drained (drain.go)
	views    map[portKey]ownerproto.PortView // ibpathd's views of the node's ports (views.go)
	// damp is the flap damping of the ports whose events the shim's
	// contexts saw (Config.Damping; damping.go), on fo.clock.
	damp   *pathsel.Damper[pathsel.PortKey]
	closed bool
	stop   chan struct{}

	l2mu     sync.Mutex // serialises the shadows (crossnic.Shadow is single-threaded)
	shadows  map[uintptr]*shadowSet
	scanning bool
	rescan   chan struct{}
	// republishAt: when the scan sends the publications again after a
	// republication that failed (unix ns; 0: none due)
	republishAt atomic.Int64
	// peerMRs: the peers' MR entries, fetched ahead by the scan (peermrs.go)
	peerMRs peerMRs
	// repGen counts SetReporter calls: which session is current
	repGen atomic.Uint64

	l1 *Layer1 // nil: layer 1 off (IBPATH_APM=off, or it could not start)

	cmHidden atomic.Uint64 // rdma_cm events kept from the application (cmevent.go)
	evKept   atomic.Uint64 // async events kept from the application (asyncevent.go)
	evGiven  atomic.Uint64 // kept events given back: their failover surfaced
	// fatalKept: contexts whose DEVICE_FATAL was kept and not given back
	fatalKept map[uintptr]bool

	fo failover // layer 2's failover (its own lock, taken before l2mu and mu)

	// st runs the runtime's background work on the caller's clock, in
	// Step, instead of goroutines (stepped.go); nil: goroutines.
	st *stepper
	// now is the runtime's time of day: the wall clock, or the stepped
	// clock's.
	now func() time.Time
}

type qpKey struct {
	ctx uintptr
	qpn uint32
}

// NewRuntime returns an empty runtime, with layer 1 running when
// cfg.APM is on.
func NewRuntime(cfg Config, log *slog.Logger) *Runtime {
	return newRuntime(cfg, log, nil)
}

// newRuntime is NewRuntime, stepped when st is set.
func newRuntime(cfg Config, log *slog.Logger, st *stepper) *Runtime {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{cfg: cfg, log: log, devs: map[uintptr]*device{}, qps: map[qpKey]*qp{},
		watchers: map[string]*watcher{}, ports: map[portKey]PortState{}, portErr: map[portKey]time.Time{}, stop: make(chan struct{}), shadows: map[uintptr]*shadowSet{},
		rescan: make(chan struct{}, 1), st: st, now: time.Now,
		fo: failover{qps: map[qpKey]*l2qp{}, srqs: map[verbs.SRQ]*l2srq{}, cqs: map[verbs.CQ]*cqRoute{}, cqCtx: map[verbs.CQ]uintptr{}, out: make([]verbs.WC, 64), clock: newWallClock()}}
	if st != nil {
		r.now, r.fo.clock = st.timeOfDay, st.clock
	}
	r.damp = newPortDamper(cfg.Damping, log)
	r.startLayer1()
	return r
}

// SetReporter attaches (or, with nil, detaches) the daemon session, and
// reports every QP known so far to it.
func (r *Runtime) SetReporter(rep Reporter) {
	r.mu.Lock()
	r.rep = rep
	r.repGen.Add(1)
	var all []status.QP
	for _, q := range r.qps {
		all = append(all, q.status)
	}
	r.mu.Unlock()
	if r.l1 != nil {
		if s, ok := rep.(HCALookup); ok {
			r.l1.SetSession(s)
		} else {
			r.l1.SetSession(nil)
		}
	}
	if rep == nil {
		return
	}
	for _, q := range all {
		if err := rep.ReportQP(q); err != nil {
			r.log.Warn("libibpath: report QP to ibpathd", "qpn", q.QPN, "err", err)
			return
		}
	}
	if p, ok := rep.(Publisher); ok {
		r.republishAll(p)
	}
}

// report sends q to the session, if any. Called without r.mu: layer 1's
// goroutine reports too, while SetReporter may swap the session.
func (r *Runtime) report(q status.QP) {
	r.mu.Lock()
	rep := r.rep
	r.mu.Unlock()
	if rep != nil {
		if err := rep.ReportQP(q); err != nil {
			r.log.Debug("libibpath: report QP to ibpathd", "qpn", q.QPN, "err", err)
		}
	}
}

// Opened records a device context the application opened; def, when not
// nil, is that context as verbs (layer 2 mirrors its resources on a
// backup device).
func (r *Runtime) Opened(ctx uintptr, name string, ports []Port, def verbs.Context) {
	d := &device{name: name, ports: map[uint8]Port{}, def: def}
	for _, p := range ports {
		d.ports[p.Num] = p
	}
	r.mu.Lock()
	r.devs[ctx] = d
	r.mu.Unlock()
	r.log.Info("libibpath: device opened", "device", name, "ports", len(ports))
	// Opened now, before the application's ibv_open_device returns, so
	// no port event after it is missed; pumped in the background.
	r.watchOnce(name)
	r.mu.Lock()
	l2 := def != nil && r.cfg.Record && r.prov != nil && !r.closed
	r.mu.Unlock()
	if l2 {
		r.setupShadow(ctx, name, def)
	}
}

// watchOnce follows dev's events on a context of the shim's own
// (watch), unless it does already.
func (r *Runtime) watchOnce(dev string) {
	r.mu.Lock()
	watch := r.prov != nil && !r.closed && r.watchers[dev] == nil
	if watch {
		r.watchers[dev] = &watcher{} // claimed; filled in by watch
	}
	r.mu.Unlock()
	if watch {
		r.watch(dev)
	}
}

// Closed forgets a context and its QPs.
func (r *Runtime) Closed(ctx uintptr) {
	r.forgetContext(ctx)
	r.closeShadow(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.devs, ctx)
	for k := range r.qps {
		if k.ctx == ctx {
			delete(r.qps, k)
		}
	}
}

// Created records a new QP and says whether the shim protects it (keeps
// its shadow rings): RC QPs without an SRQ, when recording is on.
func (r *Runtime) Created(ctx uintptr, info QPInfo) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.devs[ctx]
	if d == nil {
		return false
	}
	q := &qp{dev: d, info: info}
	q.status = status.QP{Device: d.name, QPN: info.QPN, Layer: status.LayerNone, APM: "-"}
	protect := r.cfg.Record && info.Type == verbs.QPTRC && (!info.SRQ || info.SRQFollowed) && !info.WRAPI
	switch {
	case info.Type == verbs.QPTXRCSend || info.Type == verbs.QPTXRCRecv:
		q.status.Reason = fmt.Sprintf("%v QP: XRC passes through (its receives come from XRC SRQs, which layer 2 does not follow); only RC QPs are protected", info.Type)
	case info.Type != verbs.QPTRC:
		q.status.Reason = fmt.Sprintf("%v QP: only RC QPs are protected", info.Type)
	case info.SRQ && !info.SRQFollowed:
		q.status.Reason = "the QP uses a shared receive queue the shim does not follow (made by ibv_create_srq_ex, before the shim, or without a backup device)"
	case info.WRAPI:
		q.status.Reason = "the QP asks for ibv_wr_* operations the shim does not follow (local invalidate, memory windows, SEND with invalidate, TSO, atomic write or flush): layer 2 cannot replay it"
	}
	q.unprotected = q.status.Reason
	r.qps[qpKey{ctx, info.QPN}] = q
	r.log.Debug("libibpath: QP created", "device", d.name, "qpn", info.QPN, "type", info.Type, "protected", protect)
	return protect
}

// Modified records an application modify, after the provider answered.
func (r *Runtime) Modified(ctx uintptr, m Modify) {
	r.mu.Lock()
	q := r.qps[qpKey{ctx, m.QPN}]
	if q == nil || m.Err != 0 {
		r.mu.Unlock()
		return
	}
	q.connect.Apply(&m.Attr, m.Mask)
	q.connMask |= m.Mask
	s := &q.status
	if m.Mask&verbs.QPAttrPort != 0 {
		s.Port = m.Port
		s.Primary = status.Path{Device: q.dev.name, Port: m.Port, PathBits: s.Primary.PathBits, GIDIndex: s.Primary.GIDIndex}
		s.Home = s.Primary
	}
	if m.Mask&verbs.QPAttrAV != 0 && s.Primary.Port != 0 {
		s.Primary.PathBits, s.Primary.GIDIndex = m.Attr.AHAttr.SrcPathBits, 0
		if m.Global {
			s.Primary.GIDIndex = m.Attr.AHAttr.GRH.SGIDIndex
		}
		s.Home = s.Primary
	}
	if m.Mask&verbs.QPAttrAV != 0 || m.Mask&verbs.QPAttrDestQPN != 0 {
		s.Remote = remote(m)
	}
	if m.Mask&verbs.QPAttrAV != 0 {
		q.route = ownerproto.Route{LID: m.DLID}
		if m.Global {
			q.route = ownerproto.Route{GID: m.DGID}
		}
	}
	if m.Mask&verbs.QPAttrState != 0 && m.State == verbs.QPSRTR && q.info.Type == verbs.QPTRC {
		r.decideLayer1(q)
		if q.unprotected != "" {
			q.status.Reason = q.unprotected
		}
	}
	snap := q.status
	r.mu.Unlock()
	r.report(snap)
	if m.Mask&verbs.QPAttrState != 0 && (m.State == verbs.QPSErr || m.State == verbs.QPSReset) {
		r.appClosed(ctx, m.QPN, m.State)
	}
	if m.Mask&verbs.QPAttrState != 0 && m.State == verbs.QPSRTS && r.anyDrained() {
		r.leaveDrained() // a QP connected on a drained port leaves it now (drain.go)
	}
}

func remote(m Modify) status.Remote {
	if m.Global {
		return status.Remote{GID: m.DGID.String(), QPN: m.DestQPN}
	}
	return status.Remote{LID: m.DLID, QPN: m.DestQPN}
}

// decideLayer1 says what layer 1 does for an RC QP reaching RTR. Called
// with r.mu held.
func (r *Runtime) decideLayer1(q *qp) {
	s := &q.status
	p, ok := q.dev.ports[s.Port]
	switch {
	case !r.cfg.APM:
		s.APM, s.Reason = "off", "layer 1 disabled by "+EnvAPM
	case !ok:
		s.APM, s.Reason = "unsupported", fmt.Sprintf("port %d of %s unknown", s.Port, q.dev.name)
	case p.LinkLayer == verbs.LinkLayerEthernet:
		s.APM, s.Reason = "unsupported", "RoCE has no automatic path migration"
	default:
		if st, ok := r.l1Status(q.dev.name, q.info.QPN); ok {
			st.Apply(s)
			return
		}
		s.APM, s.Reason = "unprotected", "layer 1 did not take the QP (see the shim's log)"
	}
	s.Layer = status.LayerNone
}

// Destroyed forgets a QP the application destroyed, with its layer-2
// state and backup.
func (r *Runtime) Destroyed(ctx uintptr, qpn uint32) {
	r.dropL2(ctx, qpn)
	r.mu.Lock()
	q := r.qps[qpKey{ctx, qpn}]
	delete(r.qps, qpKey{ctx, qpn})
	rep := r.rep
	r.mu.Unlock()
	if q != nil && r.l1 != nil {
		r.l1.Destroying(q.dev.name, qpn)
	}
	if q != nil && rep != nil {
		if err := rep.QPGone(q.dev.name, qpn); err != nil {
			r.log.Debug("libibpath: report QP gone", "qpn", qpn, "err", err)
		}
	}
}

// AsyncEvent records an async event the application is about to
// receive, and says whether to keep it from the application instead
// (keepEvent).
func (r *Runtime) AsyncEvent(ctx uintptr, ev verbs.EventType, qpn uint32, port uint8) bool {
	r.mu.Lock()
	d := r.devs[ctx]
	r.mu.Unlock()
	if d == nil {
		return false
	}
	r.log.Info("libibpath: async event", "device", d.name, "event", ev.String(), "qpn", qpn, "port", port)
	if r.l1 != nil && qpn != 0 {
		r.l1.QPEvent(d.name, qpn, ev)
	}
	return r.keepEvent(ctx, d.name, ev, qpn)
}

// QPs returns the status of every QP, by device and number.
func (r *Runtime) QPs() []status.QP {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]status.QP, 0, len(r.qps))
	for _, q := range r.qps {
		out = append(out, q.status)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return out[i].QPN < out[j].QPN
	})
	return out
}
