package simrun

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// Config configures a world. Zero fields take the defaults.
type Config struct {
	// Seed drives the fabric's random draws (loss, delay) and the PSNs
	// layer 2 announces when it resets a QP.
	Seed uint64
	// LinkLayer of the fabric: InfiniBand (also LinkLayerUnspecified) or
	// Ethernet (RoCE: one port per NIC, no LMC, no APM).
	LinkLayer verbs.LinkLayer
	// Step is the applications' loop period: each polls its CQs, keeps
	// its receives posted and sends its next message when its window
	// allows. Default 100 µs.
	Step time.Duration
	// Window is how many messages a QP has in flight at most (default 8).
	Window int
	// Timeout is the local ACK timeout the applications connect with (the
	// IBA exponent; default 14: 67 ms).
	Timeout uint8
	// Env is the shim's environment in every process (IBPATH_*), read by
	// shim.FromEnv; unset variables take the shim's defaults.
	Env map[string]string
	// APM and PeerTTL tune layer 1 (shim.Stepped).
	APM     apm.Config
	PeerTTL time.Duration
	// LogLevel is the lowest level of the runtimes' log lines recorded
	// (default slog.LevelInfo).
	LogLevel slog.Level
	// Trace records the fabric's trace (KindTrace), but for the records
	// of every packet sent and every completion (tx, wc).
	Trace bool
	// PauseMin is the shortest pause of a QP's traffic recorded
	// (KindPause; default 1 ms).
	PauseMin time.Duration
	// Observe, when set, is given every record as it happens. It must
	// not call into the world (it may run with the fabric locked).
	Observe func(Record)
	// Tamper, when set, may edit what each poll of an application's CQ
	// returned before the application checks it: a test plants a
	// violation with it.
	Tamper func(q *QP, wcs []verbs.WC) []verbs.WC
	// OlderIbpathd makes every node's ibpathd one older than lookup_mrs
	// (owner protocol 3): the runtimes fetch no peer regions ahead, and
	// a failover asks ibpathd for each peer rkey (tests of that lookup).
	OlderIbpathd bool
}

// Defaults of Config.
const (
	DefaultStep     = 100 * time.Microsecond
	DefaultWindow   = 8
	DefaultTimeout  = 14
	DefaultPauseMin = time.Millisecond
)

// The world's fabric and traffic.
const (
	hosts       = 2
	recvDepth   = 16  // receives each QP keeps posted
	queueDepth  = 64  // send and receive queue sizes
	cqDepth     = 256 // entries of each application CQ, before the shim's headroom
	gidIndex    = 1   // the RoCEv2 GID of a port
	maxViolated = 3   // violations recorded per QP; more are counted
	maxStepDue  = 64  // runtime steps at one instant before the world moves on
)

// Conns are the world's connections: Conns[i] joins the applications on
// HCA i of both hosts.
var Conns = []string{"A", "B"}

// World is one run: the fabric, the processes on its hosts, their QPs.
type World struct {
	cfg      Config
	Fabric   *sim.Fabric
	Cluster  *shimtest.Cluster
	Adapters *shimtest.Adapters
	// Procs are the application processes: node0's and node1's of
	// connection A, then of B.
	Procs []*Proc
	// QPs are the processes' QPs, in the same order.
	QPs []*QP

	epoch   time.Time
	posting bool
	dirDown bool          // every ibpathd answers no lookup and takes no publication (SetDirectory)
	nextApp time.Duration // the applications' next step
	records int
}

// Epoch is the time of day at the start of every run (virtual time 0):
// the time of the runtimes' events and logs.
var Epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// New builds a world: the fabric, a process per host and connection
// under its stepped runtime, their QPs connected through the runtimes
// (layer 1 arms them in the applications' own modifies), traffic
// started. It returns once it is set up; Ready runs it until both layers
// protect every QP.
func New(cfg Config) (*World, error) {
	switch cfg.LinkLayer {
	case verbs.LinkLayerUnspecified, verbs.LinkLayerInfiniBand, verbs.LinkLayerEthernet:
	default:
		return nil, fmt.Errorf("simrun: unknown link layer %d (want %v or %v)", cfg.LinkLayer, verbs.LinkLayerInfiniBand, verbs.LinkLayerEthernet)
	}
	if cfg.Step <= 0 {
		cfg.Step = DefaultStep
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.LogLevel == 0 {
		cfg.LogLevel = slog.LevelInfo
	}
	if cfg.PauseMin <= 0 {
		cfg.PauseMin = DefaultPauseMin
	}
	spec := sim.RailSpec{Config: sim.Config{Seed: cfg.Seed}, Hosts: hosts, HCAsPerHost: len(Conns), PortsPerHCA: 2, LMC: 1}
	if cfg.LinkLayer == verbs.LinkLayerEthernet {
		spec.PortsPerHCA, spec.LMC, spec.LinkLayer = 1, 0, verbs.LinkLayerEthernet
	}
	f, err := sim.NewRailFabric(spec)
	if err != nil {
		return nil, fmt.Errorf("simrun: sim.NewRailFabric: %w", err)
	}
	w := &World{cfg: cfg, Fabric: f, Cluster: shimtest.NewCluster(), Adapters: &shimtest.Adapters{}, epoch: Epoch,
		posting: true, nextApp: cfg.Step}
	if cfg.Trace {
		f.SetTracer(w.trace)
	}
	for _, h := range f.Hosts() {
		if err := w.Adapters.AddProvider(h); err != nil {
			return nil, fmt.Errorf("simrun: describe the adapters of %s: %w", h.Name(), err)
		}
	}
	for i, conn := range Conns {
		for side, h := range f.Hosts() {
			p, err := w.newProc(h, side, conn, h.HCAs()[i].Name())
			if err != nil {
				return nil, err
			}
			w.Procs = append(w.Procs, p)
			w.QPs = append(w.QPs, p.QP)
		}
	}
	for i := 0; i < len(w.QPs); i += 2 {
		a, b := w.QPs[i], w.QPs[i+1]
		a.Peer, b.Peer = b, a
		for _, q := range []*QP{a, b} {
			if err := q.connect(); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// Config is the world's configuration, defaults filled in.
func (w *World) Config() Config { return w.cfg }

// newProc starts the application process of connection conn on host h,
// on device dev: its stepped runtime, data path and session, its
// context, memory, CQs and QP, created through the runtime as the shim's
// interposed verbs do.
func (w *World) newProc(h *sim.Host, side int, conn, dev string) (*Proc, error) {
	p := &Proc{w: w, Name: h.Name() + " " + conn, Host: h, Device: dev, id: 1}
	cfg, err := shim.FromEnv(func(k string) string { return w.cfg.Env[k] })
	if err != nil {
		return nil, fmt.Errorf("simrun: the shim's environment: %w", err)
	}
	p.Shim = cfg
	// Each process draws its own PSNs, from the seed and its name: the
	// same seed gives the same run.
	hash := fnv.New64a()
	hash.Write([]byte(p.Name))
	psn := rand.New(rand.NewPCG(w.cfg.Seed, hash.Sum64()))
	log := slog.New(&logHandler{p: p, level: w.cfg.LogLevel})
	p.RT, err = shim.NewSteppedRuntime(cfg, log, shim.Stepped{Clock: w.Fabric, Epoch: w.epoch, APM: w.cfg.APM,
		PeerTTL: w.cfg.PeerTTL, PSN: psn.Uint32})
	if err != nil {
		return nil, fmt.Errorf("simrun: %s: %w", p.Name, err)
	}
	p.RT.SetProvider(procDevices{p})
	p.buf = make([]byte, shimtest.BufferSize(1))
	p.HP = shimtest.NewHotpath(p.RT, p.id, p.read)
	if cfg.Express {
		p.RT.SetHotpath(p.HP.WithExpress())
	} else {
		p.RT.SetHotpath(p.HP)
	}
	p.RT.SetMemReader(p.read)
	p.sess = &session{Node: shimtest.NewNode(w.Cluster), Adapters: w.Adapters, p: p}
	if w.cfg.OlderIbpathd {
		p.RT.SetReporter(olderSession{p.sess})
	} else {
		p.RT.SetReporter(p.sess)
	}
	if p.ctx, err = p.open(dev); err != nil {
		return nil, fmt.Errorf("simrun: %s: ibv_open_device %s: %w", p.Name, dev, err)
	}
	ports, err := queryPorts(p.ctx)
	if err != nil {
		return nil, fmt.Errorf("simrun: %s: %w", p.Name, err)
	}
	p.RT.Opened(p.id, dev, ports, p.ctx)
	if p.pd, err = p.ctx.AllocPD(); err != nil {
		return nil, fmt.Errorf("simrun: %s: ibv_alloc_pd: %w", p.Name, err)
	}
	if p.mr, err = p.pd.RegMR(p.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, fmt.Errorf("simrun: %s: ibv_reg_mr: %w", p.Name, err)
	}
	p.RT.MR(p.id, p.pd, p.mr, p.buf)
	q := &QP{Proc: p, Conn: conn, Side: side}
	if q.scq, err = p.createCQ(); err != nil {
		return nil, err
	}
	if q.rcq, err = p.createCQ(); err != nil {
		return nil, err
	}
	sendWR := queueDepth
	if p.RT.NudgeSlots(ports) {
		sendWR++ // the slot of layer 1's nudge, which the application is not told of
	}
	init := verbs.QPInitAttr{SendCQ: q.scq, RecvCQ: q.rcq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: sendWR, MaxRecvWR: queueDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: shimtest.MsgSize}}
	if q.qp, err = p.pd.CreateQP(init); err != nil {
		return nil, fmt.Errorf("simrun: %s: ibv_create_qp: %w", p.Name, err)
	}
	protected := p.RT.Created(p.id, shim.QPInfo{QPN: q.qp.QPN(), Type: verbs.QPTRC, SendCap: queueDepth, RecvCap: queueDepth})
	q.hq = p.HP.Add(q.qp, q.scq, q.rcq, false)
	if protected {
		p.RT.ShadowQP(p.id, p.pd, q.qp, q.scq, q.rcq, init)
	}
	p.QP = q
	return p, nil
}

// createCQ creates an application CQ as the shim's interposed
// ibv_create_cq does: with the configured headroom added, reported to
// the runtime.
func (p *Proc) createCQ() (verbs.CQ, error) {
	cq, err := p.ctx.CreateCQ(cqDepth+p.Shim.CQHeadroom, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("simrun: %s: ibv_create_cq: %w", p.Name, err)
	}
	p.RT.CQCreated(cq, p.Shim.CQHeadroom)
	return cq, nil
}

// queryPorts is what the shim reads of a context's ports when the
// application opens it.
func queryPorts(ctx verbs.Context) ([]shim.Port, error) {
	da, err := ctx.QueryDevice()
	if err != nil {
		return nil, fmt.Errorf("ibv_query_device: %w", err)
	}
	var ports []shim.Port
	for n := uint8(1); n <= da.PhysPortCnt; n++ {
		pa, err := ctx.QueryPort(n)
		if err != nil {
			return nil, fmt.Errorf("ibv_query_port %d: %w", n, err)
		}
		ports = append(ports, shim.Port{Num: n, LinkLayer: pa.LinkLayer, LID: pa.LID})
	}
	return ports, nil
}

// connect takes q from RESET to RTS towards its peer's QP on port 1,
// with the application's three ibv_modify_qp calls made as the shim's
// interposed ibv_modify_qp makes them.
func (q *QP) connect() error {
	peer := q.Peer.Proc
	ah := verbs.AHAttr{PortNum: 1}
	pa, err := peer.ctx.QueryPort(1)
	if err != nil {
		return fmt.Errorf("simrun: %s: ibv_query_port 1: %w", peer.Name, err)
	}
	if pa.LinkLayer == verbs.LinkLayerEthernet {
		gid, err := peer.ctx.QueryGID(1, gidIndex)
		if err != nil {
			return fmt.Errorf("simrun: %s: ibv_query_gid: %w", peer.Name, err)
		}
		ah.IsGlobal, ah.GRH = true, verbs.GlobalRoute{DGID: gid, SGIDIndex: gidIndex, HopLimit: 64}
	} else {
		ah.DLID = pa.LID
	}
	for _, s := range shimtest.ConnectSteps(ah, q.Peer.qp.QPN(), verbs.AccessRemoteWrite, q.Proc.w.cfg.Timeout) {
		if err := q.Proc.modify(q.qp, s.Attr, s.Mask); err != nil {
			return err
		}
	}
	return nil
}

// modify is the shim's interposed ibv_modify_qp (the runtime's
// InterposedModify): layer 1 carries the modify out when it wants it,
// else the provider does; then the runtime hears of it, and a QP taken
// to RTR is connected for layer 2, as on the C side.
func (p *Proc) modify(qp verbs.QP, attr verbs.QPAttr, mask verbs.QPAttrMask) error {
	if _, err := p.RT.InterposedModify(p.id, p.ctx, qp, attr, mask); err != nil {
		return fmt.Errorf("simrun: %s: ibv_modify_qp of QP %#x to %v: %w", p.Name, qp.QPN(), attr.QPState, err)
	}
	return nil
}

// Close closes the runtimes.
func (w *World) Close() {
	for _, p := range w.Procs {
		p.RT.Close()
	}
}
