package apm_test

import (
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// simProfile is the profile of every fabric whose spec names none, so that
// the whole package runs on each (./test.sh runs it on all of them).
var simProfile = flag.String("sim.profile", "", "profile of the simulated fabrics whose test names none (strict, rdmavt, mlx5)")

// world is a fabric with one process (and one apm manager) per host.
type world struct {
	t     testing.TB
	f     *sim.Fabric
	cat   *pathsel.Catalog
	nodes []*node
	step  time.Duration
	maxWR int // queue depth of new QPs (default 512)
	// view, when set, changes the peer descriptions the managers get, as
	// a peer's ibpathd shows its drained ports DOWN.
	view func(pathsel.HCA) pathsel.HCA
}

// viewed is the managers' peer resolver: the catalog, through w.view.
type viewed struct{ w *world }

func (v viewed) Peer(ah verbs.AHAttr) (pathsel.HCA, error) {
	h, err := v.w.cat.Peer(ah)
	if err == nil && v.w.view != nil {
		h = v.w.view(h)
	}
	return h, err
}

type node struct {
	host   *sim.Host
	mgr    *apm.Manager
	ctxs   []verbs.Context
	byDev  map[string]verbs.Context
	events []verbs.EventType
	ho     *handovers
	// qpDeaf: QP events are read but not given to the manager, as in a
	// program that never reads its async events (the shim sees only port
	// events, on a context of its own).
	qpDeaf bool
	// portDeaf: port events are read but not given to the manager, as
	// while the shim's layer 1 protects no QP of the context.
	portDeaf bool
}

type handovers struct{ got []string }

func (h *handovers) HandOver(qp verbs.QP, reason string) { h.got = append(h.got, reason) }

// end is one side of a connection.
type end struct {
	n   *node
	ctx verbs.Context
	cq  verbs.CQ
	qp  verbs.QP
	buf []byte
	mr  verbs.MR
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newWorld(t testing.TB, spec sim.RailSpec, cfg apm.Config) *world {
	t.Helper()
	if spec.Config.Profile == "" {
		p, err := sim.ParseProfile(*simProfile)
		must(t, err)
		spec.Config.Profile = p
	}
	f, err := sim.NewRailFabric(spec)
	must(t, err)
	w := &world{t: t, f: f, cat: &pathsel.Catalog{}, step: 20 * time.Microsecond, maxWR: 512}
	// An observer context per HCA describes it to the catalog, as the
	// replicated store will.
	for _, h := range f.Hosts() {
		for _, a := range h.HCAs() {
			h, a := h, a
			var obs verbs.Context
			w.cat.Add(func() (pathsel.HCA, error) {
				if obs == nil || !a.Alive() {
					c, err := h.Open(a.Name())
					if err != nil {
						return pathsel.HCA{}, err
					}
					obs = c
				}
				return pathsel.Describe(obs)
			})
		}
		n := &node{host: h, ho: &handovers{}, byDev: map[string]verbs.Context{}}
		n.mgr, err = apm.New(f, cfg, viewed{w}, n.ho)
		must(t, err)
		w.nodes = append(w.nodes, n)
	}
	return w
}

// open creates an RC QP with a CQ and a registered buffer on dev of node i.
func (w *world) open(i int, dev string) *end {
	t := w.t
	n := w.nodes[i]
	ctx := n.byDev[dev]
	if ctx == nil {
		var err error
		ctx, err = n.host.Open(dev)
		must(t, err)
		n.ctxs = append(n.ctxs, ctx)
		n.byDev[dev] = ctx
	}
	pd, err := ctx.AllocPD()
	must(t, err)
	cq, err := ctx.CreateCQ(8192, nil, 0)
	must(t, err)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: w.maxWR, MaxRecvWR: w.maxWR, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	buf := make([]byte, 64*w.maxWR)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	must(t, err)
	return &end{n: n, ctx: ctx, cq: cq, qp: qp, buf: buf, mr: mr}
}

type rcOpts struct {
	timeout uint8
	plain   bool // connect with plain verbs instead of through the manager
}

// connect takes a from RESET to RTS towards b on port 1, through the
// manager's ModifyQP (as the shim does) unless o.plain.
func (w *world) connect(a, b *end, o rcOpts) {
	t := w.t
	if o.timeout == 0 {
		o.timeout = 10
	}
	mod := func(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
		if o.plain {
			return a.qp.Modify(attr, mask)
		}
		return a.n.mgr.ModifyQP(a.ctx, a.qp, attr, mask)
	}
	pa, err := b.ctx.QueryPort(1)
	must(t, err)
	ah := verbs.AHAttr{DLID: pa.LID, PortNum: 1}
	if pa.LinkLayer == verbs.LinkLayerEthernet {
		g, err := b.ctx.QueryGID(1, 1)
		must(t, err)
		ah = verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: g, SGIDIndex: 1, HopLimit: 64}, PortNum: 1}
	}
	c := verbs.RCConnect{AH: ah, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead, PathMTU: verbs.MTU2048,
		DestQPN: b.qp.QPN(), RQPSN: 1, SQPSN: 1, MaxDestRdAtomic: 4, MinRNRTimer: 1,
		Timeout: o.timeout, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 4}
	must(t, c.Apply(mod))
}

// pair builds a connected QP pair between node0 and node1 on dev. Unless
// connected with plain verbs, the pair exchanges one packet each way after
// the alternates load, as REARM -> ARMED needs (see ping).
func (w *world) pair(dev string, o rcOpts) (*end, *end) {
	a, b := w.open(0, dev), w.open(1, dev)
	w.connect(a, b, o)
	w.connect(b, a, o)
	if !o.plain {
		w.ping(a, b)
	}
	return a, b
}

// ping waits for alternates to load, then sends one zero-length unsignaled
// WRITE from a to b; it and its ACK carry MigReq clear, which tells each
// end that the other has re-armed. Idle QPs stay in REARM without it.
func (w *world) ping(a, b *end) {
	w.run(sim.DefaultConfig.ArmDelay + time.Microsecond)
	_, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	must(w.t, err)
	w.run(40 * time.Microsecond)
}

// pump reads every pending async event into each node's manager, then
// lets the managers do their timed work.
func (w *world) pump() {
	for _, n := range w.nodes {
		for _, c := range n.ctxs {
			for {
				ev, err := c.GetAsyncEvent()
				if err != nil {
					if !errors.Is(err, verbs.EAGAIN) && !errors.Is(err, verbs.EIO) {
						w.t.Fatalf("get_async_event: %v", err)
					}
					break
				}
				n.events = append(n.events, ev.Type)
				deaf := n.qpDeaf && ev.Type.Scope() == verbs.ScopeQP || n.portDeaf && ev.Type.Scope() == verbs.ScopePort
				if !deaf {
					n.mgr.HandleEvent(c, ev)
				}
				c.AckAsyncEvent(ev)
			}
		}
		n.mgr.Tick()
	}
}

// run advances virtual time by d, pumping events every step.
func (w *world) run(d time.Duration) {
	end := w.f.Now() + d
	for w.f.Now() < end {
		w.f.RunFor(min(w.step, end-w.f.Now()))
		w.pump()
	}
}

func (e *end) state(t testing.TB) apm.QPStatus {
	t.Helper()
	s, ok := e.n.mgr.QPStatus(e.qp)
	if !ok {
		t.Fatalf("QP %#x not registered", e.qp.QPN())
	}
	return s
}

func (e *end) port(t testing.TB) uint8 {
	a, _, err := e.qp.Query(verbs.QPAttrPort)
	must(t, err)
	return a.PortNum
}

// traffic posts signaled WRITEs of 64 bytes from a to b and checks them.
type traffic struct {
	a, b   *end
	posted int
	ok     int
	errs   []verbs.WC
	epoch  map[uint64]int // wr_id -> a's migration count when posted
}

func (tr *traffic) post(t testing.TB, n int) {
	for i := 0; i < n; i++ {
		off := tr.posted * 64 % (len(tr.a.buf) - 64)
		for k := 0; k < 64; k++ {
			tr.a.buf[off+k] = byte(tr.posted + k)
		}
		_, err := tr.a.qp.PostSend([]verbs.SendWR{{WRID: uint64(tr.posted), Opcode: verbs.WRRDMAWrite,
			SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{{Addr: tr.a.mr.Addr() + uint64(off), Length: 64, LKey: tr.a.mr.LKey()}},
			RemoteAddr: tr.b.mr.Addr() + uint64(off), RKey: tr.b.mr.RKey()}})
		must(t, err)
		if tr.epoch == nil {
			tr.epoch = map[uint64]int{}
		}
		st, _ := tr.a.n.mgr.QPStatus(tr.a.qp)
		tr.epoch[uint64(tr.posted)] = st.Migrations
		tr.posted++
	}
}

func (tr *traffic) poll(t testing.TB) {
	wc := make([]verbs.WC, 64)
	for {
		n, err := tr.a.cq.Poll(wc)
		must(t, err)
		if n == 0 {
			return
		}
		for _, w := range wc[:n] {
			if w.Status == verbs.WCSuccess {
				tr.ok++
				// As the shim does: a WR posted after the latest
				// migration completed, so the peer has followed.
				if st, ok := tr.a.n.mgr.QPStatus(tr.a.qp); ok && tr.epoch[w.WRID] == st.Migrations {
					tr.a.n.mgr.PeerFollowed(tr.a.qp)
				}
			} else {
				tr.errs = append(tr.errs, w)
			}
		}
	}
}

// runTraffic runs the world for d, posting one WRITE every gap.
func (w *world) runTraffic(tr *traffic, d, gap time.Duration) {
	end := w.f.Now() + d
	for w.f.Now() < end {
		if tr.posted-tr.ok-len(tr.errs) < 256 {
			tr.post(w.t, 1)
		}
		w.run(gap)
		tr.poll(w.t)
	}
}

type nopPeers struct{}

func (nopPeers) Peer(verbs.AHAttr) (pathsel.HCA, error) { return pathsel.HCA{}, errors.New("none") }
