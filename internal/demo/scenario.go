package demo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// Options tune a demo run.
type Options struct {
	Seed    uint64 // seed of the simulated fabric
	Verbose bool   // also print every trace record of the fabric
}

// The script, in virtual time.
const (
	step      = 100 * time.Microsecond // the application loop period
	pullAt    = 5 * time.Millisecond   // pull the cable of node0/mlx5_0 port 1
	killAt    = 400 * time.Millisecond // kill HCA node0/mlx5_1
	quiesceAt = 780 * time.Millisecond // stop posting, let the queues drain
	endAt     = 800 * time.Millisecond
	winEvery  = 100 * time.Millisecond // traffic summary period
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
	devs  []*device
	eps   []*endpoint
	trace []sim.TraceRecord
	res   Result
	win   time.Duration // start of the current traffic window
}

func run(w io.Writer, opts Options) (Result, error) {
	bw := bufio.NewWriter(w)
	s := &scenario{p: &printer{w: bw}, opts: opts, res: Result{Events: map[string][]EventRecord{}}}
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
		s.f.RunUntil(t)
		if err := s.settle(); err != nil {
			return err
		}
		if t == pullAt || t == killAt || t%winEvery == 0 {
			s.window(t)
		}
		if t == quiesceAt {
			s.p.at(t, "application stops posting and lets the queues drain")
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

func (s *scenario) setup() error {
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: s.opts.Seed},
		Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 2, LMC: 1})
	if err != nil {
		return fmt.Errorf("sim.NewRailFabric: %w", err)
	}
	s.f = f
	f.SetTracer(func(r sim.TraceRecord) { s.trace = append(s.trace, r) })
	s.p.plain("ibpath simulator demo (seed %d): 2 hosts x 2 HCAs x 2 ports, LMC 1, rail-optimized leaves", s.opts.Seed)
	for _, hd := range [][2]string{{"node0", "mlx5_0"}, {"node1", "mlx5_0"}, {"node0", "mlx5_1"}, {"node1", "mlx5_1"}} {
		d, err := openDevice(f, hd[0], hd[1])
		if err != nil {
			return err
		}
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
	for _, pair := range [][2]*endpoint{{a0, a1}, {a1, a0}, {b0, b1}, {b1, b0}} {
		if err := connect(pair[0], pair[1], 1); err != nil {
			return err
		}
	}
	s.p.plain("RC settings (both QPs): path MTU %v, timeout %d (local ACK timeout %s), retry_cnt %d, rnr_retry %d;",
		rcMTU, rcTimeout, ms(verbs.TimeoutDuration(rcTimeout)), rcRetryCnt, rcRNRRetry)
	s.p.plain("  a silent path is given up after (1+retry_cnt) x timeout = %s", ms((1+rcRetryCnt)*verbs.TimeoutDuration(rcTimeout)))
	s.p.plain("QP A: %v qpn %#x <-> %v qpn %#x on port 1, alternate path on port 2 (APM)", a0.dev, a0.qp.QPN(), a1.dev, a1.qp.QPN())
	s.p.plain("QP B: %v qpn %#x <-> %v qpn %#x on port 1, no alternate path", b0.dev, b0.qp.QPN(), b1.dev, b1.qp.QPN())
	for _, e := range s.eps {
		if err := e.postRecvs(recvDepth); err != nil {
			return err
		}
	}
	for _, pair := range [][2]*endpoint{{a0, a1}, {a1, a0}} {
		if err := loadAlt(pair[0], pair[1], 2); err != nil {
			return err
		}
	}
	s.p.at(f.Now(), "QP A: alternate path (port 2 on both sides) loaded with path_mig_state REARM")
	s.flushTrace()
	err = waitArmed(f, []*endpoint{a0, a1}, func(e *endpoint, attr verbs.QPAttr) {
		s.flushTrace()
		s.p.at(f.Now(), "%v: ibv_query_qp says ARMED (alternate port %d; verbs has no ARMED event)", e, attr.AltPortNum)
	})
	if err != nil {
		return err
	}
	s.p.plain("traffic: every %v each side of each QP posts a signaled %d KiB RDMA WRITE and a signaled", step, slotSize/1024)
	s.p.plain("  WRITE_WITH_IMM(seq) (at most %d in flight); the receiver checks the data before each seq", window)
	s.p.plain("script: %s pull cable node0/mlx5_0 port 1; %s kill HCA node0/mlx5_1; stop at %s",
		ms(pullAt), ms(killAt), ms(quiesceAt))
	return nil
}

// settle prints what the fabric traced and drains events and completions.
func (s *scenario) settle() error {
	s.flushTrace()
	for _, d := range s.devs {
		if err := s.pollEvents(d); err != nil {
			return err
		}
	}
	for _, d := range s.devs {
		if err := s.pollCQ(d); err != nil {
			return err
		}
	}
	return nil
}

// post runs the application's send step on every endpoint.
func (s *scenario) post(t time.Duration) error {
	for _, e := range s.eps {
		if e.t.failed {
			continue
		}
		if !e.canPost() {
			if !e.t.stalled && e.qp.State() == verbs.QPSRTS {
				e.t.stalled, e.t.stallSince = true, t
				s.p.at(t, "%v: %d notifications unacknowledged, send window full: application waits", e, window)
			}
			continue
		}
		if e.t.stalled {
			e.t.stalled = false
			s.p.at(t, "%v: window open again after %s, traffic resumes", e, ms(t-e.t.stallSince))
		}
		if err := e.postPair(); err != nil {
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
		s.p.at(t, "FAULT: cable of node0/mlx5_0 port 1 pulled")
		if err := s.f.SetLink(port, false); err != nil {
			return fmt.Errorf("sim.Fabric.SetLink(node0/mlx5_0 port 1, down): %w", err)
		}
	case killAt:
		s.p.at(t, "FAULT: HCA node0/mlx5_1 dies (2 WRs of QP B just posted)")
		if err := s.f.KillHCA(s.devs[2].hca); err != nil {
			return fmt.Errorf("sim.Fabric.KillHCA(node0/mlx5_1): %w", err)
		}
	default:
		return nil
	}
	return s.settle()
}

// finish reads the final state of every QP into the result.
func (s *scenario) finish() error {
	for _, e := range s.eps {
		r := EndpointResult{QP: e.qpName, Host: e.dev.host, Device: e.dev.name, QPN: e.qp.QPN(),
			Posted: e.t.posted, SendOK: e.t.sendOK, SendErr: e.t.sendErr, RecvOK: e.t.recvOK,
			RecvErr: e.t.recvErr, Verified: e.t.verified, DataErrors: e.t.dataErrs,
			Errors: append([]verbs.WCStatus(nil), e.t.errSeq...), Port: e.port}
		attr, err := queryPath(e)
		switch {
		case err == nil:
			r.State, r.Mig, r.MigKnown, r.Port = attr.QPState, attr.PathMigState, true, attr.PortNum
		case errors.Is(err, verbs.EIO) && !e.dev.hca.Alive():
			r.State, r.DeviceDead = e.qp.State(), true // ibv_query_qp fails on a dead device
		default:
			return err
		}
		s.res.Endpoints = append(s.res.Endpoints, r)
	}
	s.res.Stats = s.f.Stats()
	return nil
}
