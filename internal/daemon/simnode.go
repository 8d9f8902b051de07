package daemon

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/asyncev"
	"github.com/ibpath/ibpath/internal/runtime"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// SimConfig shapes the embedded simulated fabric.
type SimConfig struct {
	Seed  uint64
	Hosts int // hosts of the fabric (every ibpathd of a sim cluster builds the same one)
	Index int // which host this node is (node<Index>)
	QPs   int // RC QPs of the workload between this host and the next
	// Tick is the real-time period of the fabric driver; the simulated
	// clock advances by the same amount.
	Tick time.Duration

	damping pathsel.DampingConfig // the workload's layer 1 (Config.Damping)
}

// simNode is this node's host on the simulated fabric, with a workload of
// RC QPs to the next host, protected by layer 1 on both ends. ibpathd owns
// the workload's QPs itself (OwnerPID 0).
type simNode struct {
	f        *sim.Fabric
	host     *sim.Host
	ctxs     []verbs.Context // this host's devices, by name order
	names    []string
	local    *runtime.Layer1
	remote   *runtime.Layer1
	qps      []simQP
	stop     chan struct{}
	wg       sync.WaitGroup
	fabricMu sync.Mutex // serialises posting and polling of the workload

	mu          sync.Mutex
	lastPrimary map[verbs.QP]string // for the "from" of PathMigrated
	drained     map[string][]uint8  // this host's drained ports, by device (drain.go)
}

type simQP struct {
	dev  string
	qp   verbs.QP
	peer verbs.QP
	cq   verbs.CQ
}

// RC settings of the workload.
const (
	simTimeout = 14 // 67 ms local ACK timeout
	simRetry   = 3
)

func startSimNode(cfg SimConfig, log *slog.Logger, forward func(asyncev.Event)) (*simNode, error) {
	if cfg.Hosts < 2 {
		return nil, fmt.Errorf("sim: %d hosts: at least 2 are needed (this node and a peer)", cfg.Hosts)
	}
	if cfg.Index < 0 || cfg.Index >= cfg.Hosts {
		return nil, fmt.Errorf("sim: node index %d outside 0..%d", cfg.Index, cfg.Hosts-1)
	}
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: cfg.Seed}, Hosts: cfg.Hosts, HCAsPerHost: 2, PortsPerHCA: 2, LMC: 1})
	if err != nil {
		return nil, fmt.Errorf("sim: build fabric: %w", err)
	}
	n := &simNode{f: f, stop: make(chan struct{}), lastPrimary: map[verbs.QP]string{}, drained: map[string][]uint8{}}
	n.host = f.Host(fmt.Sprintf("node%d", cfg.Index))
	peerHost := f.Host(fmt.Sprintf("node%d", (cfg.Index+1)%cfg.Hosts))
	if n.host == nil || peerHost == nil {
		return nil, fmt.Errorf("sim: host node%d or its peer missing from the fabric", cfg.Index)
	}
	cat := &pathsel.Catalog{}
	var peerCtxs []verbs.Context
	for _, h := range []*sim.Host{n.host, peerHost} {
		for _, a := range h.HCAs() {
			c, err := h.Open(a.Name())
			if err != nil {
				return nil, fmt.Errorf("sim: ibv_open_device %s/%s: %w", h.Name(), a.Name(), err)
			}
			if h == n.host {
				cat.Add(n.viewOf(c)) // the peer host sees this host's drained ports DOWN
			} else {
				cat.Add(func() (pathsel.HCA, error) { return pathsel.Describe(c) })
			}
			if h == n.host {
				n.ctxs = append(n.ctxs, c)
				n.names = append(n.names, a.Name())
			} else {
				peerCtxs = append(peerCtxs, c)
			}
		}
	}
	l1 := apm.DefaultConfig
	l1.Damping = cfg.damping
	mgr, err := apm.New(f, l1, cat, nil)
	if err != nil {
		return nil, fmt.Errorf("sim: layer 1: %w", err)
	}
	peerMgr, err := apm.New(f, l1, cat, nil)
	if err != nil {
		return nil, fmt.Errorf("sim: peer layer 1: %w", err)
	}
	for i := 0; i < cfg.QPs; i++ {
		d := i % len(n.ctxs)
		q, err := connectPair(mgr, n.ctxs[d], peerMgr, peerCtxs[d])
		if err != nil {
			return nil, fmt.Errorf("sim: workload QP %d: %w", i, err)
		}
		q.dev = n.names[d]
		n.qps = append(n.qps, q)
	}
	for _, q := range n.qps {
		if st, ok := mgr.QPStatus(q.qp); ok {
			n.lastPrimary[q.qp] = st.Primary.String()
		}
	}
	n.local = runtime.StartLayer1(mgr, n.ctxs, log.With("layer", 1), forward)
	n.remote = runtime.StartLayer1(peerMgr, peerCtxs, log.With("layer", 1, "host", peerHost.Name()), nil)
	tick := cfg.Tick
	if tick <= 0 {
		tick = time.Millisecond
	}
	n.wg.Add(1)
	go n.drive(tick)
	return n, nil
}

// connectPair creates an RC QP on each context and connects them through
// their managers (so layer 1 arms both inside INIT->RTR->RTS).
func connectPair(m0 *apm.Manager, c0 verbs.Context, m1 *apm.Manager, c1 verbs.Context) (simQP, error) {
	mk := func(c verbs.Context) (verbs.QP, verbs.CQ, error) {
		pd, err := c.AllocPD()
		if err != nil {
			return nil, nil, fmt.Errorf("ibv_alloc_pd: %w", err)
		}
		cq, err := c.CreateCQ(256, nil, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("ibv_create_cq: %w", err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, SQSigAll: true,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return nil, nil, fmt.Errorf("ibv_create_qp: %w", err)
		}
		return qp, cq, nil
	}
	q0, cq0, err := mk(c0)
	if err != nil {
		return simQP{}, err
	}
	q1, _, err := mk(c1)
	if err != nil {
		return simQP{}, err
	}
	if err := connectRC(m0, c0, q0, c1, q1); err != nil {
		return simQP{}, err
	}
	if err := connectRC(m1, c1, q1, c0, q0); err != nil {
		return simQP{}, err
	}
	return simQP{qp: q0, peer: q1, cq: cq0}, nil
}

func connectRC(mgr *apm.Manager, ctx verbs.Context, qp verbs.QP, peer verbs.Context, peerQP verbs.QP) error {
	pa, err := peer.QueryPort(1)
	if err != nil {
		return fmt.Errorf("ibv_query_port: %w", err)
	}
	c := verbs.RCConnect{AH: verbs.AHAttr{DLID: pa.LID, PortNum: 1}, Access: verbs.AccessRemoteWrite,
		PathMTU: verbs.MTU2048, DestQPN: peerQP.QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 12,
		Timeout: simTimeout, RetryCnt: simRetry, RNRRetry: 7, MaxRdAtomic: 1}
	return c.Apply(func(a *verbs.QPAttr, m verbs.QPAttrMask) error { return mgr.ModifyQP(ctx, qp, a, m) })
}

// drive advances the simulated clock with real time and keeps a trickle of
// zero-length RDMA WRITEs on every workload QP, so paths re-arm (REARM ->
// ARMED needs a packet from the re-armed peer) and migrations are seen.
func (n *simNode) drive(tick time.Duration) {
	defer n.wg.Done()
	t := time.NewTicker(tick)
	defer t.Stop()
	var k int
	wc := make([]verbs.WC, 16)
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.f.RunFor(tick)
		k++
		if k%10 != 0 {
			continue
		}
		n.fabricMu.Lock()
		for _, q := range n.qps {
			for {
				c, err := q.cq.Poll(wc)
				if err != nil || c == 0 {
					break
				}
			}
			_, _ = q.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite}}) // a QP in error refuses: fine
		}
		n.fabricMu.Unlock()
	}
}

// close stops the driver and both layer-1 runtimes.
func (n *simNode) close() {
	close(n.stop)
	n.wg.Wait()
	n.local.Close()
	n.remote.Close()
}

// qp finds a workload QP by device and number.
func (n *simNode) qp(dev string, qpn uint32) (verbs.QP, bool) {
	for _, q := range n.qps {
		if q.dev == dev && q.qp.QPN() == qpn {
			return q.qp, true
		}
	}
	return nil, false
}
