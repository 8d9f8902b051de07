package sim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// end is one side of an RC connection: a device context with a PD, a CQ, a
// QP and a registered buffer.
type end struct {
	host *sim.Host
	hca  *sim.HCA
	ctx  verbs.Context
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	buf  []byte
	mr   verbs.MR
}

type conn struct {
	f    *sim.Fabric
	a, b *end
}

// connOpts tunes a test connection.
type connOpts struct {
	spec     sim.RailSpec
	dev      string // device on both hosts (default mlx5_0 / rxe0)
	port     uint8  // primary port (default 1)
	bufSize  int
	timeout  uint8
	retry    uint8
	rnrRetry uint8
	minRNR   uint8
	access   verbs.AccessFlags
	sigAll   bool
	maxWR    int
	profile  sim.Profile // the fabric's profile (default strict)
	cqe      int         // CQ entries of each end (default 4096)
	psn      uint32      // first PSN of both directions (default 100)
}

func defaults(o connOpts) connOpts {
	if o.spec.Hosts == 0 {
		o.spec = sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 2, LMC: 1}
	}
	if o.profile != "" {
		o.spec.Config.Profile = o.profile
	}
	if o.dev == "" {
		o.dev = "mlx5_0"
		if o.spec.LinkLayer == verbs.LinkLayerEthernet {
			o.dev = "rxe0"
		}
	}
	if o.port == 0 {
		o.port = 1
	}
	if o.bufSize == 0 {
		o.bufSize = 1 << 16
	}
	if o.timeout == 0 {
		o.timeout = 10 // 4.2 ms
	}
	if o.retry == 0 {
		o.retry = 3
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1 // 10 us
	}
	if o.access == 0 {
		o.access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	if o.maxWR == 0 {
		o.maxWR = 256
	}
	if o.cqe == 0 {
		o.cqe = 4096
	}
	if o.psn == 0 {
		o.psn = 100
	}
	return o
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newConn builds a fabric and connects an RC QP on node0 to one on node1.
func newConn(t testing.TB, o connOpts) *conn {
	t.Helper()
	o = defaults(o)
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	c := &conn{f: f, a: openEnd(t, f.Host("node0"), o), b: openEnd(t, f.Host("node1"), o)}
	connectRC(t, c.a, c.b, o)
	connectRC(t, c.b, c.a, o)
	return c
}

func openEnd(t testing.TB, h *sim.Host, o connOpts) *end {
	t.Helper()
	e, _ := openEndCQ(t, h, o, o.cqe, false)
	return e
}

// openEndCQ is openEnd with a CQ of cqe entries, on a new completion
// channel when withCh is set.
func openEndCQ(t testing.TB, h *sim.Host, o connOpts, cqe int, withCh bool) (*end, verbs.CompChannel) {
	t.Helper()
	e := &end{host: h, hca: h.HCA(o.dev)}
	var err error
	e.ctx, err = h.Open(o.dev)
	must(t, err)
	e.pd, err = e.ctx.AllocPD()
	must(t, err)
	var ch verbs.CompChannel
	if withCh {
		ch, err = e.ctx.CreateCompChannel()
		must(t, err)
	}
	e.cq, err = e.ctx.CreateCQ(cqe, ch, 0)
	must(t, err)
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QPTRC, SQSigAll: o.sigAll,
		Cap: verbs.QPCap{MaxSendWR: o.maxWR, MaxRecvWR: o.maxWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	must(t, err)
	e.buf = make([]byte, o.bufSize)
	e.mr, err = e.pd.RegMR(e.buf, o.access|verbs.AccessLocalWrite)
	must(t, err)
	return e, ch
}

// pollFor runs the fabric in steps of step until limit after start,
// collecting e's completions, and returns them with the virtual time the
// first one was seen (0 if none).
func (c *conn) pollFor(t testing.TB, e *end, start, limit, step time.Duration) (got []verbs.WC, firstAt time.Duration) {
	t.Helper()
	for c.f.Now()-start < limit {
		c.run(step)
		if w := e.poll(t); len(w) > 0 {
			if got == nil {
				firstAt = c.f.Now()
			}
			got = append(got, w...)
		}
	}
	return got, firstAt
}

// ahTo is the address vector from a's port to the same-numbered path on b.
func ahTo(t testing.TB, a, b *end, port uint8, pathBits uint8) verbs.AHAttr {
	t.Helper()
	pa, err := b.ctx.QueryPort(port)
	must(t, err)
	ah := verbs.AHAttr{DLID: pa.LID + uint16(pathBits), SrcPathBits: pathBits, SL: 0, PortNum: port}
	if pa.LinkLayer == verbs.LinkLayerEthernet {
		g, err := b.ctx.QueryGID(port, 1)
		must(t, err)
		ah = verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: g, SGIDIndex: 1, HopLimit: 64}, PortNum: port}
	}
	return ah
}

// connectRC takes a's QP from RESET to RTS towards b's QP.
func connectRC(t testing.TB, a, b *end, o connOpts) {
	t.Helper()
	c := verbs.RCConnect{AH: ahTo(t, a, b, o.port, 0), Access: o.access, PathMTU: verbs.MTU1024, DestQPN: b.qp.QPN(),
		RQPSN: o.psn, SQPSN: o.psn, MaxDestRdAtomic: 4, MinRNRTimer: o.minRNR, Timeout: o.timeout, RetryCnt: o.retry,
		RNRRetry: o.rnrRetry, MaxRdAtomic: 4}
	must(t, c.Apply(a.qp.Modify))
}

// armAlt loads the alternate path (port altPort, LMC path bits bits) on a's
// QP towards b, with REARM.
func armAlt(t testing.TB, a, b *end, altPort, bits uint8) {
	t.Helper()
	must(t, a.qp.Modify(&verbs.QPAttr{AltAHAttr: ahTo(t, a, b, altPort, bits), AltPortNum: altPort, AltTimeout: 10,
		PathMigState: verbs.MigRearm}, verbs.QPAttrAltPath|verbs.QPAttrPathMigState))
}

func (e *end) sge(off, n int) verbs.SGE {
	return verbs.SGE{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

func (e *end) post(t testing.TB, wrs ...verbs.SendWR) {
	t.Helper()
	n, err := e.qp.PostSend(wrs)
	if err != nil || n != len(wrs) {
		t.Fatalf("post_send: %d of %d posted: %v", n, len(wrs), err)
	}
}

func (e *end) recv(t testing.TB, wrid uint64, off, n int) {
	t.Helper()
	if _, err := e.qp.PostRecv([]verbs.RecvWR{{WRID: wrid, SGList: []verbs.SGE{e.sge(off, n)}}}); err != nil {
		t.Fatalf("post_recv: %v", err)
	}
}

// poll drains e's CQ.
func (e *end) poll(t testing.TB) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	wc := make([]verbs.WC, 64)
	for {
		n, err := e.cq.Poll(wc)
		if err != nil {
			t.Fatalf("poll_cq: %v", err)
		}
		if n == 0 {
			return out
		}
		out = append(out, wc[:n]...)
	}
}

// run lets the fabric run for d of virtual time.
func (c *conn) run(d time.Duration) { c.f.RunFor(d) }

func (e *end) events() []verbs.EventType {
	var out []verbs.EventType
	for {
		ev, err := e.ctx.GetAsyncEvent()
		if errors.Is(err, verbs.EAGAIN) {
			return out
		}
		if err != nil {
			panic(err)
		}
		out = append(out, ev.Type)
		e.ctx.AckAsyncEvent(ev)
	}
}

func write(wrid uint64, local verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{local}, RemoteAddr: raddr, RKey: rkey}
}

func statuses(wcs []verbs.WC) []verbs.WCStatus {
	out := make([]verbs.WCStatus, len(wcs))
	for i, w := range wcs {
		out[i] = w.Status
	}
	return out
}

// handshake waits for the alternate paths to load, then has a send one
// zero-length unsignaled WRITE to b: the request and its ACK carry MigReq
// clear, which is how each end learns the other has re-armed (REARM ->
// ARMED needs a packet from the peer).
func (c *conn) handshake(t testing.TB) {
	t.Helper()
	c.run(sim.DefaultConfig.ArmDelay + time.Microsecond)
	c.a.post(t, verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: c.b.mr.Addr(), RKey: c.b.mr.RKey()})
	c.run(20 * time.Microsecond)
}
