package sim_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// mvEnds builds a fabric and opens (without connecting) an end on node0
// and node1.
func mvEnds(t testing.TB, o connOpts) (*sim.Fabric, *end, *end, connOpts) {
	t.Helper()
	o = defaults(o)
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	return f, openEnd(t, f.Host("node0"), o), openEnd(t, f.Host("node1"), o), o
}

func mvQuery(t testing.TB, q verbs.QP) verbs.QPAttr {
	t.Helper()
	a, _, err := q.Query(0)
	must(t, err)
	return a
}

// mvReject checks that Modify fails with EINVAL and leaves the QP as it was.
func mvReject(t testing.TB, q verbs.QP, what string, attr verbs.QPAttr, mask verbs.QPAttrMask) {
	t.Helper()
	before, st := mvQuery(t, q), q.State()
	err := q.Modify(&attr, mask)
	if !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("%s: err = %v, want EINVAL", what, err)
	}
	if after := mvQuery(t, q); after != before {
		t.Fatalf("%s: failed modify changed the QP:\nbefore %+v\nafter  %+v", what, before, after)
	}
	if q.State() != st {
		t.Fatalf("%s: state %v -> %v after a failed modify", what, st, q.State())
	}
}

const (
	mvInitMask = verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	mvRTRMask  = verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
		verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	mvRTSMask = verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
		verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
)

func TestModValueValidation(t *testing.T) {
	_, a, b, o := mvEnds(t, connOpts{})
	q := a.qp

	// RESET -> INIT.
	initAttr := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: o.access}
	x := initAttr
	x.PortNum = 3
	mvReject(t, q, "port 3", x, mvInitMask)
	x = initAttr
	x.PortNum = 0
	mvReject(t, q, "port 0", x, mvInitMask)
	x = initAttr
	x.PKeyIndex = 1
	mvReject(t, q, "pkey_index 1", x, mvInitMask)
	x = initAttr
	x.QPAccessFlags |= verbs.AccessOnDemand
	mvReject(t, q, "unknown access flag", x, mvInitMask)
	if q.State() != verbs.QPSReset {
		t.Fatalf("state %v, want RESET", q.State())
	}
	must(t, q.Modify(&initAttr, mvInitMask))

	// INIT -> RTR.
	rtr := verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: ahTo(t, a, b, 1, 0), PathMTU: verbs.MTU1024,
		DestQPN: b.qp.QPN(), RQPSN: 100, MaxDestRdAtomic: 4, MinRNRTimer: 1}
	for _, tc := range []struct {
		what string
		mod  func(*verbs.QPAttr)
	}{
		{"path_mtu 0", func(x *verbs.QPAttr) { x.PathMTU = 0 }},
		{"path_mtu 6", func(x *verbs.QPAttr) { x.PathMTU = 6 }},
		{"min_rnr_timer 32", func(x *verbs.QPAttr) { x.MinRNRTimer = 32 }},
		{"max_dest_rd_atomic 17", func(x *verbs.QPAttr) { x.MaxDestRdAtomic = 17 }},
		{"max_dest_rd_atomic 255", func(x *verbs.QPAttr) { x.MaxDestRdAtomic = 255 }},
		{"dest_qpn 1<<24", func(x *verbs.QPAttr) { x.DestQPN = 1 << 24 }},
		{"rq_psn 1<<24", func(x *verbs.QPAttr) { x.RQPSN = 1 << 24 }},
		{"sgid_index beyond GID table", func(x *verbs.QPAttr) {
			x.AHAttr.IsGlobal = true
			x.AHAttr.GRH = verbs.GlobalRoute{DGID: b.hca.Port(1).GID(0), SGIDIndex: 1, HopLimit: 64}
		}},
		{"src_path_bits beyond LMC", func(x *verbs.QPAttr) { x.AHAttr.SrcPathBits = 2 }},
		{"sl 16", func(x *verbs.QPAttr) { x.AHAttr.SL = 16 }},
	} {
		x := rtr
		tc.mod(&x)
		mvReject(t, q, tc.what, x, mvRTRMask)
		if q.State() != verbs.QPSInit {
			t.Fatalf("%s: state %v, want INIT", tc.what, q.State())
		}
	}
	// The limits themselves are accepted: check on a fresh QP.
	{
		_, a2, b2, o2 := mvEnds(t, connOpts{})
		must(t, a2.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: o2.access}, mvInitMask))
		ok := verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: ahTo(t, a2, b2, 1, 1), PathMTU: verbs.MTU4096,
			DestQPN: 0xffffff, RQPSN: 0xffffff, MaxDestRdAtomic: 16, MinRNRTimer: 31}
		ok.AHAttr.IsGlobal = true
		ok.AHAttr.GRH = verbs.GlobalRoute{DGID: b2.hca.Port(1).GID(0), SGIDIndex: 0, HopLimit: 64}
		must(t, a2.qp.Modify(&ok, mvRTRMask))
	}
	must(t, q.Modify(&rtr, mvRTRMask))

	// RTR -> RTS: a failed call leaves the QP in RTR.
	rts := verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: 100, Timeout: 10, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 4}
	for _, tc := range []struct {
		what string
		mod  func(*verbs.QPAttr)
		mask verbs.QPAttrMask
	}{
		{"retry_cnt 8", func(x *verbs.QPAttr) { x.RetryCnt = 8 }, 0},
		{"rnr_retry 8", func(x *verbs.QPAttr) { x.RNRRetry = 8 }, 0},
		{"timeout 32", func(x *verbs.QPAttr) { x.Timeout = 32 }, 0},
		{"max_rd_atomic 17", func(x *verbs.QPAttr) { x.MaxRdAtomic = 17 }, 0},
		{"sq_psn 1<<24", func(x *verbs.QPAttr) { x.SQPSN = 1 << 24 }, 0},
		{"min_rnr_timer 32", func(x *verbs.QPAttr) { x.MinRNRTimer = 32 }, verbs.QPAttrMinRNRTimer},
		{"cur_qp_state RTS while RTR", func(x *verbs.QPAttr) { x.CurQPState = verbs.QPSRTS }, verbs.QPAttrCurState},
		{"cur_qp_state INIT while RTR", func(x *verbs.QPAttr) { x.CurQPState = verbs.QPSInit }, verbs.QPAttrCurState},
	} {
		x := rts
		tc.mod(&x)
		mvReject(t, q, tc.what, x, mvRTSMask|tc.mask)
		if q.State() != verbs.QPSRTR {
			t.Fatalf("%s: state %v, want RTR", tc.what, q.State())
		}
	}
	x = rts
	x.CurQPState = verbs.QPSRTR
	must(t, q.Modify(&x, mvRTSMask|verbs.QPAttrCurState))
	if q.State() != verbs.QPSRTS {
		t.Fatalf("state %v, want RTS", q.State())
	}
	// RTS -> RTS with bad values.
	mvReject(t, q, "RTS min_rnr_timer 32", verbs.QPAttr{MinRNRTimer: 32}, verbs.QPAttrMinRNRTimer)
	mvReject(t, q, "RTS cur_qp_state SQD", verbs.QPAttr{QPState: verbs.QPSRTS, CurQPState: verbs.QPSSQD},
		verbs.QPAttrState|verbs.QPAttrCurState)
	mvReject(t, q, "RTS access flags ON_DEMAND", verbs.QPAttr{QPAccessFlags: verbs.AccessOnDemand}, verbs.QPAttrAccessFlags)
}

func TestModAltPathRefusedOnRoCE(t *testing.T) {
	c := newConn(t, connOpts{spec: sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2, LinkLayer: verbs.LinkLayerEthernet}})
	mvReject(t, c.a.qp, "ALT_PATH on RoCE", verbs.QPAttr{AltAHAttr: ahTo(t, c.a, c.b, 2, 0), AltPortNum: 2, AltTimeout: 10,
		PathMigState: verbs.MigRearm}, verbs.QPAttrAltPath|verbs.QPAttrPathMigState)
	mvReject(t, c.a.qp, "ALT_PATH alone on RoCE", verbs.QPAttr{AltAHAttr: ahTo(t, c.a, c.b, 2, 0), AltPortNum: 2, AltTimeout: 10},
		verbs.QPAttrAltPath)
	// The connection itself works.
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(time.Millisecond)
	epExpect(t, "RoCE WRITE", c.a.poll(t), epWC{1, verbs.WCSuccess})
}

func TestModAltPathRefusedWithoutAPM(t *testing.T) {
	c := newConn(t, connOpts{spec: sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 2, LMC: 1, NoAPM: true}})
	da, err := c.a.ctx.QueryDevice()
	must(t, err)
	if da.DeviceCapFlags&verbs.DeviceAutoPathMig != 0 {
		t.Fatalf("NoAPM device reports IBV_DEVICE_AUTO_PATH_MIG (caps %#x)", uint32(da.DeviceCapFlags))
	}
	mvReject(t, c.a.qp, "ALT_PATH without APM", verbs.QPAttr{AltAHAttr: ahTo(t, c.a, c.b, 2, 0), AltPortNum: 2, AltTimeout: 10,
		PathMigState: verbs.MigRearm}, verbs.QPAttrAltPath|verbs.QPAttrPathMigState)

	c2 := newConn(t, connOpts{})
	da, err = c2.a.ctx.QueryDevice()
	must(t, err)
	if da.DeviceCapFlags&verbs.DeviceAutoPathMig == 0 {
		t.Fatal("default device lacks IBV_DEVICE_AUTO_PATH_MIG")
	}
	armAlt(t, c2.a, c2.b, 2, 0)
}

func TestModPathMigStateRules(t *testing.T) {
	c := newConn(t, connOpts{})
	q := c.a.qp
	mvReject(t, q, "REARM without alternate", verbs.QPAttr{PathMigState: verbs.MigRearm}, verbs.QPAttrPathMigState)
	mvReject(t, q, "ARMED", verbs.QPAttr{PathMigState: verbs.MigArmed}, verbs.QPAttrPathMigState)
	armAlt(t, c.a, c.b, 2, 0)
	if m := mvQuery(t, q).PathMigState; m != verbs.MigRearm {
		t.Fatalf("after REARM: %v", m)
	}
	mvReject(t, q, "MIGRATED while REARM", verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState)
	mvReject(t, q, "ARMED while REARM", verbs.QPAttr{PathMigState: verbs.MigArmed}, verbs.QPAttrPathMigState)
	armAlt(t, c.b, c.a, 2, 0)
	c.handshake(t)
	if m := mvQuery(t, q).PathMigState; m != verbs.MigArmed {
		t.Fatalf("alternate not loaded: %v", m)
	}
	mvReject(t, q, "ARMED while ARMED", verbs.QPAttr{PathMigState: verbs.MigArmed}, verbs.QPAttrPathMigState)
	// Manual migration from ARMED is allowed and swaps the paths.
	must(t, q.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState))
	if a := mvQuery(t, q); a.PathMigState != verbs.MigMigrated || a.PortNum != 2 || a.AltPortNum != 1 {
		t.Fatalf("after manual migration: mig %v port %d alt %d", a.PathMigState, a.PortNum, a.AltPortNum)
	}
	if evs := c.a.events(); !slices.Contains(evs, verbs.EventPathMig) {
		t.Fatalf("manual migration events = %v, want PATH_MIG", evs)
	}
}

func TestModSQDDrainsThenHolds(t *testing.T) {
	c := newConn(t, connOpts{})
	fill(c.a.buf[:4096], 3)
	c.a.post(t,
		write(1, c.a.sge(0, 4000), c.b.mr.Addr(), c.b.mr.RKey()),
		write(2, c.a.sge(0, 4000), c.b.mr.Addr()+4096, c.b.mr.RKey()),
		write(3, c.a.sge(0, 4000), c.b.mr.Addr()+8192, c.b.mr.RKey()))
	// The port sends one message at a time (arbitrate.go): SQD drains the
	// messages begun, so the three are let onto the wire first.
	for steps := 0; c.f.Stats().Requests < 3 && steps < 100 && c.f.Step(); steps++ {
	}
	if n := c.f.Stats().Requests; n != 3 {
		t.Fatalf("%d of the 3 WRs sent", n)
	}
	if w := c.a.poll(t); len(w) != 0 {
		t.Fatalf("completions before SQD: %+v", w)
	}
	must(t, c.a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSSQD, EnSQDAsyncNotify: true},
		verbs.QPAttrState|verbs.QPAttrEnSQDAsyncNotify))
	if c.a.qp.State() != verbs.QPSSQD {
		t.Fatalf("state %v, want SQD", c.a.qp.State())
	}
	if a := mvQuery(t, c.a.qp); !a.SQDraining {
		t.Fatal("sq_draining false with three WRs in flight")
	}
	if evs := epEventsOf(t, c.a.ctx); len(evs) != 0 {
		t.Fatalf("events before drain: %+v", evs)
	}
	var done []verbs.WC
	drained := false
	for steps := 0; !drained && steps < 10000 && c.f.Step(); steps++ {
		done = append(done, c.a.poll(t)...)
		for _, ev := range epEventsOf(t, c.a.ctx) {
			if ev.Type != verbs.EventSQDrained || ev.QP != c.a.qp {
				t.Fatalf("unexpected event %+v", ev)
			}
			drained = true
			if len(done) != 3 {
				t.Fatalf("SQ_DRAINED with %d of 3 WRs completed", len(done))
			}
		}
	}
	if !drained {
		t.Fatal("no SQ_DRAINED")
	}
	epExpect(t, "before SQD", done, epWC{1, verbs.WCSuccess}, epWC{2, verbs.WCSuccess}, epWC{3, verbs.WCSuccess})
	if a := mvQuery(t, c.a.qp); a.SQDraining || a.QPState != verbs.QPSSQD {
		t.Fatalf("after drain: state %v draining %v", a.QPState, a.SQDraining)
	}

	// WRs posted in SQD wait for RTS.
	reqs := c.f.Stats().Requests
	fill(c.a.buf[8192:8192+64], 77)
	c.a.post(t, write(4, c.a.sge(8192, 64), c.b.mr.Addr()+20000, c.b.mr.RKey()),
		write(5, c.a.sge(8192, 64), c.b.mr.Addr()+30000, c.b.mr.RKey()))
	c.run(20 * time.Millisecond)
	if w := c.a.poll(t); len(w) != 0 {
		t.Fatalf("WRs posted in SQD completed: %+v", w)
	}
	if st := c.f.Stats(); st.Requests != reqs {
		t.Fatalf("%d requests sent while SQD", st.Requests-reqs)
	}
	if c.b.buf[20000] != 0 || c.b.buf[30000] != 0 {
		t.Fatal("a WRITE posted in SQD landed")
	}
	if c.a.qp.State() != verbs.QPSSQD {
		t.Fatalf("state %v, want SQD", c.a.qp.State())
	}
	must(t, c.a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS}, verbs.QPAttrState))
	c.run(time.Millisecond)
	epExpect(t, "after SQD->RTS", c.a.poll(t), epWC{4, verbs.WCSuccess}, epWC{5, verbs.WCSuccess})
	if string(c.b.buf[20000:20064]) != string(c.a.buf[8192:8256]) || string(c.b.buf[30000:30064]) != string(c.a.buf[8192:8256]) {
		t.Fatal("data of WRs released from SQD missing")
	}
}

func TestModSQDWithoutNotifyRaisesNothing(t *testing.T) {
	c := newConn(t, connOpts{})
	c.a.post(t, write(1, c.a.sge(0, 64), c.b.mr.Addr(), c.b.mr.RKey()))
	must(t, c.a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSSQD}, verbs.QPAttrState))
	c.run(time.Millisecond)
	epExpect(t, "SQD", c.a.poll(t), epWC{1, verbs.WCSuccess})
	if evs := epEventsOf(t, c.a.ctx); len(evs) != 0 {
		t.Fatalf("events without en_sqd_async_notify: %+v", evs)
	}
}

// TestQueryReturnsLivePSNs: ibv_query_qp reports the PSNs where the two
// streams stand (rule 97), not the ones the QP was connected with: after
// three WRITEs (one of them three packets long) the requester's next PSN
// and the responder's expected one are 105, and the responder keeps
// reporting it once in ERR.
func TestQueryReturnsLivePSNs(t *testing.T) {
	c := newConn(t, connOpts{})
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()),
		write(2, c.a.sge(0, 3000), c.b.mr.Addr(), c.b.mr.RKey()),
		write(3, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(time.Millisecond)
	if got := len(c.a.poll(t)); got != 3 {
		t.Fatalf("%d completions, want 3", got)
	}
	a, _, err := c.a.qp.Query(verbs.QPAttrSQPSN)
	must(t, err)
	b, _, err := c.b.qp.Query(verbs.QPAttrRQPSN)
	must(t, err)
	if a.SQPSN != 105 || b.RQPSN != 105 {
		t.Fatalf("requester sq_psn %d, responder rq_psn %d; want 105 and 105", a.SQPSN, b.RQPSN)
	}
	must(t, c.b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState))
	b, _, err = c.b.qp.Query(verbs.QPAttrRQPSN)
	must(t, err)
	if b.RQPSN != 105 {
		t.Fatalf("rq_psn in ERR %d, want 105", b.RQPSN)
	}
}

func TestModQueryReturnsWhatWasSet(t *testing.T) {
	c := newConn(t, connOpts{maxWR: 100})
	a, init, err := c.a.qp.Query(verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrCap)
	must(t, err)
	wantAH := ahTo(t, c.a, c.b, 1, 0)
	wantCap := verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
	o := defaults(connOpts{})
	for _, ck := range []struct {
		what      string
		got, want any
	}{
		{"state", a.QPState, verbs.QPSRTS},
		{"cur_state", a.CurQPState, verbs.QPSRTS},
		{"port", a.PortNum, uint8(1)},
		{"ah", a.AHAttr, wantAH},
		{"pkey_index", a.PKeyIndex, uint16(0)},
		{"path_mtu", a.PathMTU, verbs.MTU1024},
		{"timeout", a.Timeout, uint8(10)},
		{"retry_cnt", a.RetryCnt, uint8(3)},
		{"rnr_retry", a.RNRRetry, uint8(7)},
		{"min_rnr_timer", a.MinRNRTimer, uint8(1)},
		{"sq_psn", a.SQPSN, uint32(100)},
		{"rq_psn", a.RQPSN, uint32(100)},
		{"dest_qp_num", a.DestQPN, c.b.qp.QPN()},
		{"max_rd_atomic", a.MaxRdAtomic, uint8(4)},
		{"max_dest_rd_atomic", a.MaxDestRdAtomic, uint8(4)},
		{"access", a.QPAccessFlags, o.access},
		{"mig_state", a.PathMigState, verbs.MigMigrated},
		{"cap", a.Cap, wantCap},
		{"init cap", init.Cap, wantCap},
		{"qp_type", init.QPType, verbs.QPTRC},
		{"alt port", a.AltPortNum, uint8(0)},
	} {
		if ck.got != ck.want {
			t.Errorf("query %s = %v, want %v", ck.what, ck.got, ck.want)
		}
	}
	if init.SendCQ != c.a.cq || init.RecvCQ != c.a.cq {
		t.Error("query init attr CQs differ from those the QP was created with")
	}
	// An alternate path shows up in Query once loaded.
	armAlt(t, c.a, c.b, 2, 1)
	armAlt(t, c.b, c.a, 2, 1)
	c.handshake(t)
	a = mvQuery(t, c.a.qp)
	if a.AltPortNum != 2 || a.AltAHAttr != ahTo(t, c.a, c.b, 2, 1) || a.AltTimeout != 10 || a.PathMigState != verbs.MigArmed {
		t.Fatalf("alternate in query: port %d ah %+v timeout %d mig %v", a.AltPortNum, a.AltAHAttr, a.AltTimeout, a.PathMigState)
	}
	if a.PortNum != 1 || a.AHAttr != wantAH {
		t.Fatalf("loading an alternate changed the primary: port %d ah %+v", a.PortNum, a.AHAttr)
	}
}

func TestModResetDiscardsAndReconnects(t *testing.T) {
	c := newConn(t, connOpts{})
	must(t, c.f.SetLink(c.b.hca.Port(1), false))
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()),
		verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{c.a.sge(0, 8)}})
	c.a.recv(t, 3, 0, 64)
	c.run(time.Millisecond)
	if s, r := c.a.qp.(interface{ Outstanding() (int, int) }).Outstanding(); s != 2 || r != 1 {
		t.Fatalf("outstanding before reset = %d/%d, want 2/1", s, r)
	}
	must(t, c.a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState))
	if c.a.qp.State() != verbs.QPSReset {
		t.Fatalf("state %v, want RESET", c.a.qp.State())
	}
	if s, r := c.a.qp.(interface{ Outstanding() (int, int) }).Outstanding(); s != 0 || r != 0 {
		t.Fatalf("outstanding after reset = %d/%d, want 0/0", s, r)
	}
	c.run(50 * time.Millisecond)
	if w := c.a.poll(t); len(w) != 0 {
		t.Fatalf("reset produced completions: %+v", w)
	}
	if n, err := c.a.qp.PostSend([]verbs.SendWR{write(9, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey())}); n != 0 || !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("post_send after reset: n=%d err=%v, want EINVAL", n, err)
	}

	must(t, c.f.SetLink(c.b.hca.Port(1), true))
	c.run(3 * time.Millisecond)
	o := defaults(connOpts{})
	connectRC(t, c.a, c.b, o)
	fill(c.a.buf[:128], 8)
	c.b.recv(t, 40, 1024, 128)
	c.a.post(t, write(10, c.a.sge(0, 128), c.b.mr.Addr()+4096, c.b.mr.RKey()),
		verbs.SendWR{WRID: 11, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{c.a.sge(0, 128)}})
	c.a.recv(t, 41, 8192, 64)
	c.b.post(t, verbs.SendWR{WRID: 12, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{c.b.sge(0, 16)}})
	c.run(time.Millisecond)
	wa := c.a.poll(t)
	var sends, recvs []verbs.WC
	for _, w := range wa {
		if w.Opcode == verbs.WCRecv {
			recvs = append(recvs, w)
		} else {
			sends = append(sends, w)
		}
	}
	epExpect(t, "reconnected sends", sends, epWC{10, verbs.WCSuccess}, epWC{11, verbs.WCSuccess})
	epExpect(t, "reconnected receive", recvs, epWC{41, verbs.WCSuccess})
	if string(c.b.buf[4096:4224]) != string(c.a.buf[:128]) || string(c.b.buf[1024:1152]) != string(c.a.buf[:128]) {
		t.Fatal("data after reconnect missing")
	}
}

// TestModAHPortChecks pins uverbs modify_qp's port checks: the address
// vector's port must be valid, at INIT->RTR the QP's own, and equal to
// port_num when both come; the alternate's port_num must equal
// alt_port_num.
func TestModAHPortChecks(t *testing.T) {
	o := defaults(connOpts{})
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	a, b := openEnd(t, f.Host("node0"), o), openEnd(t, f.Host("node1"), o)
	must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: o.access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
	rtr := func(ah verbs.AHAttr) (verbs.QPAttr, verbs.QPAttrMask) {
		return verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: ah, PathMTU: verbs.MTU1024, DestQPN: b.qp.QPN(), RQPSN: 1,
				MaxDestRdAtomic: 4, MinRNRTimer: 1},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	ah := ahTo(t, a, b, 1, 0)
	bad := ah
	bad.PortNum = 0
	attr, mask := rtr(bad)
	mvReject(t, a.qp, "ah_attr.port_num 0", attr, mask)
	bad.PortNum = 2 // valid, but not the QP's port
	attr, mask = rtr(bad)
	mvReject(t, a.qp, "ah_attr.port_num other than the QP's at INIT->RTR", attr, mask)
	alt := ahTo(t, a, b, 2, 0)
	alt.PortNum = 1
	attr, mask = rtr(ah)
	attr.AltAHAttr, attr.AltPortNum, attr.AltTimeout = alt, 2, 10
	mvReject(t, a.qp, "alt_ah_attr.port_num other than alt_port_num", attr, mask|verbs.QPAttrAltPath)
	attr, mask = rtr(ah)
	must(t, a.qp.Modify(&attr, mask))
}
