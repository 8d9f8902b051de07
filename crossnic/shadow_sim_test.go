package crossnic_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// app is an application's own resources on its default HCA, with the
// shadow mirroring them on the backup chosen by pathsel.
type app struct {
	ctx    verbs.Context
	pd     verbs.PD
	cq     verbs.CQ
	qp     verbs.QP
	mr     verbs.MR
	buf    []byte
	base   uint64 // buf's address: its SGEs' and the peer's remote address
	shadow *crossnic.Shadow
	conn   *crossnic.Conn
}

// memKind is how an application registers its buffer.
type memKind int

const (
	memPlain    memKind = iota // ibv_reg_mr of the buffer
	memDmabuf                  // a dma-buf the host exported, by ibv_reg_dmabuf_mr
	memImplicit                // an implicit on-demand-paging region (the whole address space)
)

// newApp: an application on h, its buffer registered as mem says and
// mirrored on the backup the same way.
func newApp(t *testing.T, h *sim.Host, dir crossnic.Directory, mem memKind) *app {
	var descs []pathsel.HCA
	var ctxs []verbs.Context
	for _, a := range h.HCAs() {
		c, err := h.Open(a.Name())
		must(t, err)
		d, err := pathsel.Describe(c)
		must(t, err)
		ctxs, descs = append(ctxs, c), append(descs, d)
	}
	j, err := pathsel.ChooseBackup(descs, 0)
	must(t, err)
	x := &app{ctx: ctxs[0], buf: make([]byte, 2*nslots*slot)}
	x.shadow, err = crossnic.NewShadow(ctxs[0], ctxs[j], dir)
	must(t, err)
	x.pd, err = x.ctx.AllocPD()
	must(t, err)
	switch mem {
	case memImplicit:
		x.mr, err = x.pd.(verbs.ImplicitODPRegistrar).RegImplicitODP(verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessOnDemand)
		must(t, err)
		x.base, err = h.Addr(x.buf)
		must(t, err)
		must(t, x.shadow.RegImplicitODP(x.pd, x.mr))
	default:
		x.mr, err = x.pd.RegMR(x.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		must(t, err)
		x.base = x.mr.Addr()
		if mem == memDmabuf {
			must(t, x.shadow.RegDmabufMR(x.pd, x.mr, 0, h.ExportDmabuf(x.buf)))
		} else {
			must(t, x.shadow.RegMR(x.pd, x.mr, x.buf))
		}
	}
	x.cq, err = x.ctx.CreateCQ(1024, nil, 0)
	must(t, err)
	init := verbs.QPInitAttr{SendCQ: x.cq, RecvCQ: x.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: qcap, MaxRecvWR: qcap, MaxSendSGE: 1, MaxRecvSGE: 1}}
	x.qp, err = x.pd.CreateQP(init)
	must(t, err)
	must(t, x.shadow.CreateQP(x.pd, x.qp, init))
	return x
}

// connectApp is the application's own RC connect, then the shadow hook.
func connectApp(t *testing.T, a, b *app, roce bool) {
	pa, err := b.ctx.QueryPort(1)
	must(t, err)
	ah := verbs.AHAttr{DLID: pa.LID, PortNum: 1}
	if roce {
		g, err := b.ctx.QueryGID(1, 1)
		must(t, err)
		ah = verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: g, SGIDIndex: 1, HopLimit: 64}}
	}
	must(t, appConnect(ah, b.qp.QPN()).Apply(a.qp.Modify))
	must(t, a.shadow.Connected(a.qp))
}

// appConnect is the applications' connect along ah to the QP destQPN.
func appConnect(ah verbs.AHAttr, destQPN uint32) verbs.RCConnect {
	return verbs.RCConnect{AH: ah, Access: verbs.AccessRemoteWrite, PathMTU: verbs.MTU1024, DestQPN: destQPN,
		RQPSN: 7, SQPSN: 7, MaxDestRdAtomic: 1, MinRNRTimer: 1, Timeout: 10, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1}
}

// receiverAtRTR: a's QP connected to RTS, b's through INIT to RTR
// toward it and no further, and b's shadow told of its connect.
func receiverAtRTR(t *testing.T) (*sim.Fabric, *app, *app) {
	t.Helper()
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 9}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	must(t, err)
	dir := crossnic.NewMemDirectory()
	a, b := newApp(t, f.Host("node0"), dir, memPlain), newApp(t, f.Host("node1"), dir, memPlain)
	connectApp(t, a, b, false)
	pa, err := a.ctx.QueryPort(1)
	must(t, err)
	for _, s := range appConnect(verbs.AHAttr{DLID: pa.LID, PortNum: 1}, a.qp.QPN()).Steps()[:2] { // INIT, RTR
		must(t, b.qp.Modify(&s.Attr, s.Mask))
	}
	must(t, b.shadow.Connected(b.qp))
	return f, a, b
}

// testShadow runs on every profile: A's HCA dies in the middle of the
// traffic, flushing its QPs (rdmavt) or not (strict, mlx5).
func testShadow(t *testing.T, ll verbs.LinkLayer) {
	forProfiles(t, func(t *testing.T, p sim.Profile) { testShadowOn(t, ll, p, memPlain) })
}

func testShadowOn(t *testing.T, ll verbs.LinkLayer, p sim.Profile, mem memKind) {
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 8, Profile: p}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1, LinkLayer: ll})
	must(t, err)
	dir := crossnic.NewMemDirectory()
	a, b := newApp(t, f.Host("node0"), dir, mem), newApp(t, f.Host("node1"), dir, mem)
	roce := ll == verbs.LinkLayerEthernet
	// A connects first: its peer's backup is unknown, so the step is skipped.
	connectApp(t, a, b, roce)
	if a.shadow.Ready(a.qp) {
		t.Fatal("A's backup connected before B published its backup QP")
	}
	if bk, connected, ok := a.shadow.BackupOf(a.qp); !ok || connected || (bk.Device != "mlx5_1" && bk.Device != "rxe1") || bk.QPN == 0 {
		t.Fatalf("BackupOf before the peer published: %+v connected %v ok %v", bk, connected, ok)
	}
	connectApp(t, b, a, roce)
	if !b.shadow.Ready(b.qp) {
		t.Fatal("B's backup not connected although A's was published")
	}
	if n := a.shadow.Scan(); n != 1 || !a.shadow.Ready(a.qp) {
		t.Fatalf("A's rescan connected %d", n)
	}
	if _, connected, _ := a.shadow.BackupOf(a.qp); !connected {
		t.Fatal("BackupOf does not say connected after the rescan")
	}
	for _, x := range []*app{a, b} {
		x.conn, err = x.shadow.Conn(x.qp, x.cq)
		must(t, err)
	}
	// A region deregistered and registered again gets a new backup.
	extra := make([]byte, 4096)
	mr2, err := a.pd.RegMR(extra, verbs.AccessLocalWrite)
	must(t, err)
	must(t, a.shadow.RegMR(a.pd, mr2, extra))
	must(t, a.shadow.DeregMR(mr2.LKey()))
	must(t, a.shadow.DeregMR(mr2.LKey())) // unknown by now: not an error
	must(t, mr2.Dereg())
	for k := 0; k < 64; k++ {
		_, err := b.conn.PostRecv([]verbs.RecvWR{{WRID: uint64(k)}})
		must(t, err)
	}
	var notifs []uint32
	done := 0
	step := func() {
		f.RunFor(5 * time.Microsecond)
		wc := make([]verbs.WC, 16)
		for {
			n, err := a.conn.Poll(wc)
			must(t, err)
			for _, c := range wc[:n] {
				if c.Status != verbs.WCSuccess {
					t.Fatalf("A's application saw %+v", c)
				}
				done++
			}
			m, err := b.conn.Poll(wc)
			must(t, err)
			for _, c := range wc[:m] {
				r := int(c.ImmData)
				if c.Status != verbs.WCSuccess || !bytes.Equal(b.buf[(r%nslots)*slot:(r%nslots+1)*slot], pattern(r)) {
					t.Fatalf("B's notification %d: %+v or data missing", r, c)
				}
				notifs = append(notifs, c.ImmData)
				_, err := b.conn.PostRecv([]verbs.RecvWR{{WRID: c.WRID}})
				must(t, err)
			}
			if n == 0 && m == 0 {
				return
			}
		}
	}
	sent := 0
	for i := 0; i < 400; i++ {
		if i == 100 {
			must(t, f.KillHCA(a.ctx.(*sim.Context).HCA()))
		}
		if sent-done < window {
			s := sent % nslots
			copy(a.buf[s*slot:(s+1)*slot], pattern(sent))
			_, err := a.conn.PostSend([]verbs.SendWR{
				{WRID: uint64(2 * sent), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: a.base + uint64(s*slot), Length: slot, LKey: a.mr.LKey()}},
					RemoteAddr: b.base + uint64(s*slot), RKey: b.mr.RKey()},
				{WRID: uint64(2*sent + 1), Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(sent),
					RemoteAddr: b.base, RKey: b.mr.RKey()}})
			must(t, err)
			sent++
		}
		step()
	}
	for i := 0; i < 200; i++ {
		step()
	}
	for i, r := range notifs {
		if r != uint32(i) {
			t.Fatalf("notifications %v: not exactly once, in order", notifs)
		}
	}
	if len(notifs) != sent || done != sent || a.conn.Stats().Faults != 1 {
		t.Fatalf("%d sent, %d completed, %d notified; A stats %+v", sent, done, len(notifs), a.conn.Stats())
	}
}

// TestShadowDmabuf: both applications' buffers are dma-bufs (GPU memory
// NCCL registers with ibv_reg_dmabuf_mr), mirrored on the backups by the
// same fd: A's HCA dies mid-traffic and every WRITE, replayed ones
// included, lands through the backups' registrations. A backup device
// whose PDs register no dma-buf refuses the mirror with EOPNOTSUPP, and
// an fd the host did not export fails as ibv_reg_dmabuf_mr would.
func TestShadowDmabuf(t *testing.T) {
	testShadowOn(t, verbs.LinkLayerInfiniBand, sim.ProfileStrict, memDmabuf)
	h, def, bak := twoHCAs(t, 8)
	buf := make([]byte, 4096)
	pd, err := def.AllocPD()
	must(t, err)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	must(t, err)
	fd := h.ExportDmabuf(buf)
	sh, err := crossnic.NewShadow(def, noDmabufCtx{bak}, crossnic.NewMemDirectory())
	must(t, err)
	if err := sh.RegDmabufMR(pd, mr, 0, fd); !errors.Is(err, verbs.EOPNOTSUPP) {
		t.Fatalf("a backup without dma-buf: %v, want EOPNOTSUPP", err)
	}
	sh, err = crossnic.NewShadow(def, bak, crossnic.NewMemDirectory())
	must(t, err)
	if err := sh.RegDmabufMR(pd, mr, 0, fd+1); !errors.Is(err, verbs.EBADF) {
		t.Fatalf("an fd the host did not export: %v, want EBADF", err)
	}
}

// TestShadowImplicitODP: both applications register the whole address
// space on demand (ibv_reg_mr(pd, NULL, SIZE_MAX) with ON_DEMAND), their
// SGEs and remote addresses plain pointers; the shadows mirror the regions
// with implicit registrations on the backups. A's HCA dies mid-traffic
// and every WRITE, replayed ones included, lands through the backups'
// keys. A backup device without implicit ODP refuses the mirror with
// EINVAL (the region stays unmirrored), one whose PDs cannot register
// such a region with EOPNOTSUPP, and a region that is not implicit is
// refused before any registration.
func TestShadowImplicitODP(t *testing.T) {
	testShadowOn(t, verbs.LinkLayerInfiniBand, sim.ProfileStrict, memImplicit)
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 8}, Hosts: 1, HCAsPerHost: 1, PortsPerHCA: 1})
	must(t, err)
	h := f.Host("node0")
	a9, err := h.AddHCA(sim.HCASpec{Name: "rxe9", Ports: 1, NoImplicitODP: true})
	must(t, err)
	leaf, err := f.AddLeaf("odp-leaf")
	must(t, err)
	must(t, f.Cable(a9.Port(1), leaf))
	f.RunFor(time.Second)
	def, err := h.Open("mlx5_0")
	must(t, err)
	bak, err := h.Open("rxe9")
	must(t, err)
	pd, err := def.AllocPD()
	must(t, err)
	mr, err := pd.(verbs.ImplicitODPRegistrar).RegImplicitODP(verbs.AccessLocalWrite | verbs.AccessOnDemand)
	must(t, err)
	sh, err := crossnic.NewShadow(def, bak, crossnic.NewMemDirectory())
	must(t, err)
	if err := sh.RegImplicitODP(pd, mr); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("a backup without implicit ODP: %v, want EINVAL", err)
	}
	if _, ok := sh.BackupLKey(mr.LKey()); ok {
		t.Fatal("a refused implicit mirror left a backup key")
	}
	sh, err = crossnic.NewShadow(def, noDmabufCtx{bak}, crossnic.NewMemDirectory())
	must(t, err)
	if err := sh.RegImplicitODP(pd, mr); !errors.Is(err, verbs.EOPNOTSUPP) {
		t.Fatalf("a backup whose PDs register no implicit region: %v, want EOPNOTSUPP", err)
	}
	plain, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	must(t, err)
	if err := sh.RegImplicitODP(pd, plain); err == nil {
		t.Fatal("a plain region taken for an implicit one")
	}
}

// noDmabufCtx is a backup device whose PDs register no dma-buf and no
// implicit on-demand-paging region (only verbs.PD's methods).
type noDmabufCtx struct{ verbs.Context }

func (c noDmabufCtx) AllocPD() (verbs.PD, error) {
	pd, err := c.Context.AllocPD()
	return struct{ verbs.PD }{pd}, err
}

func TestShadowSetsUpTheBackupInfiniBand(t *testing.T) { testShadow(t, verbs.LinkLayerInfiniBand) }
func TestShadowSetsUpTheBackupRoCE(t *testing.T)       { testShadow(t, verbs.LinkLayerEthernet) }

// TestShadowConnectedAtRTR: a QP that only receives is taken to RTR and
// no further (the server of ib_write_bw). Its shadow is told at RTR; the
// scan then waits once for an RTS that does not come, and the next one
// takes its backup QP to RTS all the same (with common values: the
// default QP has no RTS attributes to copy), and a failover of the sender
// runs over the two backups.
func TestShadowConnectedAtRTR(t *testing.T) {
	f, a, b := receiverAtRTR(t)
	if b.shadow.Ready(b.qp) {
		t.Fatal("the receiver's backup was connected at its RTR, before the scan that waits for its RTS")
	}
	if n := b.shadow.Scan(); n != 1 || !b.shadow.Ready(b.qp) {
		t.Fatalf("the receiver's next scan connected %d backups", n)
	}
	if n := a.shadow.Scan(); n != 1 {
		t.Fatalf("the sender's rescan connected %d backups", n)
	}
	// The receiver's backup QP went to RTS although its default QP has no
	// RTS attributes: the failover's control messages need it.
	for _, x := range []*app{a, b} {
		c, err := x.shadow.Conn(x.qp, x.cq)
		must(t, err)
		x.conn = c
	}
	for k := 0; k < 8; k++ {
		_, err := b.conn.PostRecv([]verbs.RecvWR{{WRID: uint64(k)}})
		must(t, err)
	}
	// Cut the sender's default link: the failover runs over the backups,
	// whose control messages need both backup QPs at RTS.
	_, err := a.conn.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled,
		ImmData: 1, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
		SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: slot, LKey: a.mr.LKey()}}}})
	must(t, err)
	must(t, f.SetLink(a.ctx.(*sim.Context).HCA().Port(1), false))
	got := false
	wc := make([]verbs.WC, 8)
	for i := 0; i < 4000 && !got; i++ {
		f.RunFor(50 * time.Microsecond)
		if _, err := a.conn.Poll(wc); err != nil {
			t.Fatal(err)
		}
		n, err := b.conn.Poll(wc)
		must(t, err)
		for _, c := range wc[:n] {
			if c.Status == verbs.WCSuccess && c.ImmData == 1 {
				got = true
			}
		}
	}
	if !got {
		sa, _ := a.conn.State()
		sb, _ := b.conn.State()
		t.Fatalf("the receiver never got the write over the backups (sender %v, receiver %v, stats %+v / %+v)", sa, sb, a.conn.Stats(), b.conn.Stats())
	}
}

// TestShadowBackupTakesAppRTS: the application takes its QP to RTR, the
// shadow is told, and the RTS follows with its own ACK timeout and retry
// count. The backup QP, which an RTS QP cannot change them on, waits for
// that RTS (one scan) and is connected with the application's values,
// not common ones: its traffic after a failover retransmits as the
// application asked (NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT, perftest's -u).
func TestShadowBackupTakesAppRTS(t *testing.T) {
	_, _, b := receiverAtRTR(t)
	must(t, b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: 7, Timeout: 18, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
			verbs.QPAttrMaxQPRdAtomic))
	if n := b.shadow.Scan(); n != 1 {
		t.Fatalf("the scan after the RTS connected %d backups", n)
	}
	ca, ok := b.shadow.ConnectAttr(b.qp)
	if !ok || ca.Timeout != 18 || ca.RetryCnt != 3 {
		t.Fatalf("backup connected (%v) with ACK timeout %d, retry count %d: want the application's 18 and 3", ok, ca.Timeout, ca.RetryCnt)
	}
}

// TestShadowSRQ: the shadow of an SRQ, and of a QP on it: the backup SRQ
// is one receive larger and holds the group's control receive before any
// QP on it is connected; the backup QP receives through it, posts no
// control receive of its own, and is connected with an RNR timer of at
// least 1.28 ms; AdoptSRQ and AdoptSRQConn hand it a group.
func TestShadowSRQ(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 12}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	must(t, err)
	dir := crossnic.NewMemDirectory()
	a, b := newApp(t, f.Host("node0"), dir, memPlain), newApp(t, f.Host("node1"), dir, memPlain)
	srq, err := b.pd.(verbs.SRQCreator).CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 1})
	must(t, err)
	must(t, b.shadow.CreateSRQ(b.pd, srq))
	bak, ok := b.shadow.BackupSRQ(srq)
	if !ok {
		t.Fatal("no backup SRQ")
	}
	ba, err := bak.Query()
	must(t, err)
	if ba.MaxWR < 17 || bak.(*sim.SRQ).Outstanding() != 1 {
		t.Fatalf("backup SRQ %+v with %d receives, want room for 17 and the control receive", ba, bak.(*sim.SRQ).Outstanding())
	}
	must(t, b.qp.Destroy())
	must(t, b.shadow.DestroyQP(b.qp))
	init := verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: qcap, MaxSendSGE: 1}}
	b.qp, err = b.pd.CreateQP(init)
	must(t, err)
	must(t, b.shadow.CreateQP(b.pd, b.qp, init))
	connectApp(t, a, b, false)
	connectApp(t, b, a, false)
	a.shadow.Scan()
	if !a.shadow.Ready(a.qp) || !b.shadow.Ready(b.qp) {
		t.Fatal("backups not connected")
	}
	attr, ok := b.shadow.ConnectAttr(b.qp)
	if !ok || attr.MinRNRTimer < 14 {
		t.Fatalf("the SRQ QP's backup connected with RNR timer %d, want at least 14 (1.28 ms)", attr.MinRNRTimer)
	}
	if n := bak.(*sim.SRQ).Outstanding(); n != 1 {
		t.Fatalf("%d receives on the backup SRQ after the connect, want the control receive alone", n)
	}
	g, err := b.shadow.AdoptSRQ(srq, []verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{{Addr: b.mr.Addr(), Length: 8, LKey: b.mr.LKey()}}}})
	must(t, err)
	if _, err := b.shadow.AdoptSRQConn(b.qp, b.cq, crossnic.Resume{Recvs: []verbs.RecvWR{{WRID: 2}}}, g); !errors.Is(err, crossnic.ErrResume) {
		t.Fatalf("a QP of an SRQ adopted with receives of its own: %v", err)
	}
	c, err := b.shadow.AdoptSRQConn(b.qp, b.cq, crossnic.Resume{RecvsDone: 3}, g)
	must(t, err)
	if g.Outstanding() != 1 || c == nil {
		t.Fatalf("group holds %d receives", g.Outstanding())
	}
	if _, err := a.shadow.AdoptSRQConn(a.qp, a.cq, crossnic.Resume{}, g); err == nil {
		t.Fatal("a QP of no SRQ joined the group")
	}
}
