package demo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// Options tune a demo run.
type Options struct {
	Seed    uint64 // seed of the simulated fabric
	Verbose bool   // also print every trace record of the fabric
	// LinkLayer of the fabric: InfiniBand (also for LinkLayerUnspecified),
	// or Ethernet for the RoCE variant of the script (see roce.go).
	LinkLayer verbs.LinkLayer
}

// The script, in virtual time.
const (
	step         = 100 * time.Microsecond // the application loop period
	pullAt       = 5 * time.Millisecond   // pull the cable of node0/mlx5_0 port 1
	plugAt       = 200 * time.Millisecond // plug it back in
	cutAt        = 300 * time.Millisecond // pull every cable of node0/mlx5_1, QP B's default HCA
	recableAt    = 340 * time.Millisecond // plug them back in: layer 2 switches QP B back
	killAt       = 450 * time.Millisecond // kill HCA node0/mlx5_1
	quiesceAt    = 990 * time.Millisecond // stop posting, let the queues drain
	endAt        = 1000 * time.Millisecond
	bounceWindow = 100 * time.Millisecond // two hardware migrations of a QP side this close: bouncing
)

// Run plays the scripted scenario and prints its timeline to w.
func Run(w io.Writer, opts Options) error {
	_, err := run(w, opts)
	return err
}

// scenario is one run: the fabric, the four open devices and the two QPs'
// endpoints (A on node0, A on node1, B on node0, B on node1).
type scenario struct {
	f     *sim.Fabric
	p     *printer
	opts  Options
	hosts []*host
	devs  []*device
	eps   []*endpoint
	trace []sim.TraceRecord
	res   Result
	win   time.Duration   // start of the current traffic window
	muted map[string]bool // QP names whose bouncing is no longer printed
	rearm []*endpoint     // protected QP sides layer 2 brought home, for layer 1 to protect again
}

func run(w io.Writer, opts Options) (Result, error) {
	switch opts.LinkLayer {
	case verbs.LinkLayerUnspecified, verbs.LinkLayerInfiniBand, verbs.LinkLayerEthernet:
	default:
		return Result{}, fmt.Errorf("demo: unknown link layer %d (want %v or %v)", opts.LinkLayer,
			verbs.LinkLayerInfiniBand, verbs.LinkLayerEthernet)
	}
	bw := bufio.NewWriter(w)
	s := &scenario{p: &printer{w: bw}, opts: opts, muted: map[string]bool{},
		res: Result{Events: map[string][]EventRecord{}, Managers: map[string]apm.Stats{}, Muted: map[string]int{}}}
	err := s.play()
	if ferr := bw.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write timeline: %w", ferr)
	}
	if err == nil && s.p.err != nil {
		err = fmt.Errorf("write timeline: %w", s.p.err)
	}
	return s.res, err
}

func (s *scenario) play() error {
	if err := s.setup(); err != nil {
		return err
	}
	for t := step; t <= endAt; t += step {
		if err := s.runTo(t); err != nil {
			return err
		}
		if t == pullAt || t == plugAt || t == cutAt || t == killAt || t == endAt {
			s.window(t)
		}
		if t < quiesceAt {
			if err := s.post(t); err != nil {
				return err
			}
		}
		if err := s.inject(t); err != nil {
			return err
		}
	}
	if err := s.finish(); err != nil {
		return err
	}
	s.summary()
	return nil
}

// runTo advances virtual time to t, settling at t and at every instant a
// manager asked to be called (Tick's wait) before it.
func (s *scenario) runTo(t time.Duration) error {
	for {
		due := s.nextDue()
		if due == 0 || due >= t {
			break
		}
		s.f.RunUntil(due)
		if err := s.settle(); err != nil {
			return err
		}
	}
	s.f.RunUntil(t)
	return s.settle()
}

func (s *scenario) setup() error {
	spec := sim.RailSpec{Config: sim.Config{Seed: s.opts.Seed}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 2, LMC: 1}
	nics := [2]string{"mlx5_0", "mlx5_1"}
	if s.roce() {
		// RoCE ports have no LMC, and APM is impossible: one port each.
		spec.PortsPerHCA, spec.LMC, spec.LinkLayer = 1, 0, verbs.LinkLayerEthernet
		nics = [2]string{"rxe0", "rxe1"}
	}
	f, err := sim.NewRailFabric(spec)
	if err != nil {
		return fmt.Errorf("sim.NewRailFabric: %w", err)
	}
	s.f = f
	f.SetTracer(func(r sim.TraceRecord) { s.trace = append(s.trace, r) })
	cat, err := newCatalog(f)
	if err != nil {
		return err
	}
	for _, name := range []string{"node0", "node1"} {
		h := &host{name: name}
		if h.mgr, err = apm.New(f, l1Config, cat, &recorder{s: s, h: h}); err != nil {
			return fmt.Errorf("apm.New on %s: %w", name, err)
		}
		s.hosts = append(s.hosts, h)
	}
	if s.roce() {
		s.p.plain("ibpath simulator demo (seed %d, RoCE): 2 hosts x 2 RoCE NICs x 1 port (Ethernet link layer, no LMC), rail-optimized leaves", s.opts.Seed)
	} else {
		s.p.plain("ibpath simulator demo (seed %d): 2 hosts x 2 HCAs x 2 ports, LMC 1, rail-optimized leaves", s.opts.Seed)
	}
	for _, hd := range []struct {
		h   *host
		dev string
	}{{s.hosts[0], nics[0]}, {s.hosts[1], nics[0]}, {s.hosts[0], nics[1]}, {s.hosts[1], nics[1]}} {
		d, err := openDevice(f, hd.h, hd.dev)
		if err != nil {
			return err
		}
		hd.h.devs = append(hd.h.devs, d)
		s.devs = append(s.devs, d)
	}
	for i, d := range s.devs {
		e, err := newEndpoint(d, string(rune('A'+i/2)), byte(0x10*i+1))
		if err != nil {
			return err
		}
		s.eps = append(s.eps, e)
	}
	a0, a1, b0, b1 := s.eps[0], s.eps[1], s.eps[2], s.eps[3]
	s.p.plain("RC settings (both QPs): path MTU %v, timeout %d (local ACK timeout %s), retry_cnt %d, rnr_retry %d;",
		rcMTU, rcTimeout, ms(verbs.TimeoutDuration(rcTimeout)), rcRetryCnt, rcRNRRetry)
	s.p.plain("  the HCA alone gives a silent path up after (1+retry_cnt) x timeout = %s", ms(hwGiveUp()))
	s.p.plain("layer 1: an apm.Manager per host (failback %v, %v hold-down), fed async events and Tick by the demo's loop;",
		l1Config.Failback, l1Config.FailbackHold)
	s.p.plain("QP A: %v <-> %v, QP B: %v <-> %v (port 1, qpn %#x each) connect through",
		a0.dev, a1.dev, b0.dev, b1.dev, a0.qp.QPN())
	if s.roce() {
		s.p.plain("  its ModifyQP, which must leave the application's modifies as they are: no alternate path exists on RoCE")
	} else {
		s.p.plain("  its ModifyQP, which specifies the alternate at INIT->RTR and adds REARM at RTR->RTS")
	}
	before := make([][]apm.QPStatus, len(s.hosts))
	for i, h := range s.hosts {
		before[i] = h.mgr.Status()
	}
	for _, pair := range [][2]*endpoint{{a0, a1}, {a1, a0}, {b0, b1}, {b1, b0}} {
		if err := connect(pair[0], pair[1], 1); err != nil {
			return err
		}
	}
	// The connects are recorded, not printed: the ARMED lines show the
	// alternates the managers chose. On RoCE there will be none: the
	// reasons are printed after the script.
	var connected []l1Change
	for i, h := range s.hosts {
		connected = append(connected, s.diffL1(h, before[i], "connect")...)
	}
	if err := s.recordConnected(); err != nil {
		return err
	}
	// Layer 2 protects QP B: backups on the host's other adapter.
	if err := s.protect(b0, b1, s.devs[0], s.devs[1]); err != nil {
		return err
	}
	for _, e := range s.eps {
		if err := e.postRecvs(recvDepth); err != nil {
			return err
		}
	}
	if err := s.settle(); err != nil {
		return err
	}
	// No wait for ARMED here: REARM becomes ARMED on the first packets from
	// the re-armed peer, so the QPs arm with the first traffic.
	s.p.plain("layer 2: QP B is a crossnic.Conn on each host: backup QP %v <-> %v (qpn %#x, plain verbs, port 1),",
		b0.l2.bak, b1.l2.bak, b0.l2.qp.QPN())
	s.p.plain("  buffers registered on both %ss, backup QPs and rkeys published in a directory; QP A is not protected", s.nicWord())
	s.p.plain("traffic: every %v each side of each QP posts a signaled %d KiB WRITE + WRITE_WITH_IMM(seq), %d in flight at most, data checked",
		step, slotSize/1024, window)
	s.p.plain("script: %v pull cable %v port 1, %v plug it back; %v pull %s of %v, %v plug back;",
		pullAt, s.devs[0], plugAt, cutAt, s.cablesWord(), s.devs[2], recableAt)
	s.p.plain("  %v kill %s %v, %v stop posting", killAt, s.nicWord(), s.devs[2], quiesceAt)
	if s.roce() {
		s.printL1(connected)
	}
	return nil
}

// cables lists the cabled ports of d.
func cables(d *device) []*sim.Port {
	var out []*sim.Port
	for n := uint8(1); d.hca.Port(n) != nil; n++ {
		out = append(out, d.hca.Port(n))
	}
	return out
}

// cablesWord names the cables of an adapter: two ports on InfiniBand, one
// on RoCE.
func (s *scenario) cablesWord() string {
	if s.roce() {
		return "the cable"
	}
	return "both cables"
}

// hwGiveUp is how long an HCA waits on a silent path before it migrates
// (armed) or fails the WR: the first timeout and retry_cnt retries.
func hwGiveUp() time.Duration { return (1 + rcRetryCnt) * verbs.TimeoutDuration(rcTimeout) }

// settle prints what the fabric traced, pumps async events into the
// application and the managers, and drains completions.
func (s *scenario) settle() error {
	s.flushTrace()
	if err := s.pump(); err != nil {
		return err
	}
	for _, d := range s.devs {
		if err := s.pollCQ(d); err != nil {
			return err
		}
	}
	return s.reregister()
}

// post runs the application's send step on every endpoint.
func (s *scenario) post(t time.Duration) error {
	for _, e := range s.eps {
		if e.t.failed {
			continue
		}
		if !e.canPost() {
			if !e.t.stalled && e.healthy() {
				e.t.stalled, e.t.stallSince = true, t
				s.p.at(t, "%v: %d notifications unacknowledged, send window full: application waits", e, window)
			}
			continue
		}
		if e.t.stalled {
			e.t.stalled = false
			s.p.at(t, "%v: window open again after %s, traffic resumes", e, ms(t-e.t.stallSince))
		}
		err := e.postPair()
		s.l2Check(e, "ibv_post_send")
		if err != nil {
			return err
		}
	}
	return nil
}

// inject applies the faults of the script due at t.
func (s *scenario) inject(t time.Duration) error {
	s.flushTrace()
	switch t {
	case pullAt:
		port := s.devs[0].hca.Port(1)
		s.p.at(t, "FAULT: cable of %v port 1 pulled", s.devs[0])
		if err := s.f.SetLink(port, false); err != nil {
			return fmt.Errorf("sim.Fabric.SetLink(%v port 1, down): %w", s.devs[0], err)
		}
	case plugAt:
		port := s.devs[0].hca.Port(1)
		s.p.at(t, "REPAIR: cable of %v port 1 plugged back in", s.devs[0])
		if err := s.f.SetLink(port, true); err != nil {
			return fmt.Errorf("sim.Fabric.SetLink(%v port 1, up): %w", s.devs[0], err)
		}
		if s.roce() {
			s.afterRepair(t)
		}
	case cutAt:
		s.p.at(t, "FAULT: %s of %v pulled: QP B's default %s has no path left", s.cablesWord(), s.devs[2], s.nicWord())
		s.l2Fault(t)
		for _, port := range cables(s.devs[2]) {
			if err := s.f.SetLink(port, false); err != nil {
				return fmt.Errorf("sim.Fabric.SetLink(%v, down): %w", port, err)
			}
		}
	case recableAt:
		s.p.at(t, "REPAIR: %s of %v plugged back in; layer 2 probes QP B's default QP every %v", s.cablesWord(), s.devs[2], probeInterval)
		for _, port := range cables(s.devs[2]) {
			if err := s.f.SetLink(port, true); err != nil {
				return fmt.Errorf("sim.Fabric.SetLink(%v, up): %w", port, err)
			}
		}
	case killAt:
		s.p.at(t, "FAULT: %s %v dies (2 WRs of QP B just posted)", s.nicWord(), s.devs[2])
		s.l2Fault(t)
		if err := s.f.KillHCA(s.devs[2].hca); err != nil {
			return fmt.Errorf("sim.Fabric.KillHCA(%v): %w", s.devs[2], err)
		}
	default:
		return nil
	}
	return s.settle()
}

// finish reads the final state of every QP into the result.
func (s *scenario) finish() error {
	for _, e := range s.eps {
		r := EndpointResult{QP: e.qpName, Host: e.dev.host.name, Device: e.dev.name, QPN: e.qp.QPN(),
			Posted: e.t.posted, SendOK: e.t.sendOK, SendErr: e.t.sendErr, RecvOK: e.t.recvOK,
			RecvErr: e.t.recvErr, Verified: e.t.verified, DataErrors: e.t.dataErrs,
			Errors: append([]verbs.WCStatus(nil), e.t.errSeq...), Port: e.port,
			ConnectMig: e.connMig, ConnectAltPort: e.connAlt}
		attr, err := queryPath(e)
		switch {
		case err == nil:
			r.State, r.Mig, r.MigKnown, r.Port = attr.QPState, attr.PathMigState, true, attr.PortNum
		case errors.Is(err, verbs.EIO) && !e.dev.hca.Alive():
			r.State, r.DeviceDead = e.qp.State(), true // ibv_query_qp fails on a dead device
		default:
			return err
		}
		r.L1, r.L1Known = e.dev.host.mgr.QPStatus(e.qp)
		r.SendOrderErrors, r.WrongQPN = e.t.orderErrs, e.t.wrongQPN
		if p := e.l2; p != nil {
			r.Protected, r.Backup, r.L2Stats, r.L2Reason, r.Replayed = true, p.bak.name, p.conn.Stats(), p.conn.Reason(), p.replayed
			r.L2SQ, r.L2RQ = p.conn.State()
			r.Failovers = append([]Failover(nil), p.fails...)
			if n := len(p.fails); n > 0 && p.fails[n-1].Resumed > 0 {
				r.Resumed, r.Pause = p.fails[n-1].Resumed, p.fails[n-1].Resumed-p.fails[n-1].Fault
			}
			r.HomeAt, r.HomeDefaultWCs, r.HomeBackupWCs = p.homeAt, p.homeWCs[0], p.homeWCs[1]
			r.DefaultWCs, r.BackupWCs = p.wcs[0], p.wcs[1]
		}
		s.res.Endpoints = append(s.res.Endpoints, r)
	}
	for _, h := range s.hosts {
		s.res.Managers[h.name] = h.mgr.Stats()
	}
	s.res.Stats = s.f.Stats()
	return nil
}
