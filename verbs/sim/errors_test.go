package sim_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// epWC is an expected completion: which WR and with what status.
type epWC struct {
	wrid   uint64
	status verbs.WCStatus
}

// epExpect checks that got holds exactly the completions of want, in order.
func epExpect(t testing.TB, what string, got []verbs.WC, want ...epWC) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = got[i].WRID == want[i].wrid && got[i].Status == want[i].status
	}
	if !ok {
		var g, w []string
		for _, x := range got {
			g = append(g, fmt.Sprintf("%d:%v", x.WRID, x.Status))
		}
		for _, x := range want {
			w = append(w, fmt.Sprintf("%d:%v", x.wrid, x.status))
		}
		t.Fatalf("%s: completions = %v, want %v", what, g, w)
	}
}

// epEventsOf drains e's async events (acknowledging them) with their ports.
func epEventsOf(t testing.TB, ctx verbs.Context) []verbs.AsyncEvent {
	t.Helper()
	var out []verbs.AsyncEvent
	for {
		ev, err := ctx.GetAsyncEvent()
		if errors.Is(err, verbs.EAGAIN) {
			return out
		}
		if err != nil {
			t.Fatalf("get_async_event: %v", err)
		}
		out = append(out, ev)
		ctx.AckAsyncEvent(ev)
	}
}

func epHasEvent(evs []verbs.AsyncEvent, typ verbs.EventType) bool {
	return slices.ContainsFunc(evs, func(e verbs.AsyncEvent) bool { return e.Type == typ })
}

func epErrno(t testing.TB, what string, err error, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func TestErrBadRKeyWriteFailsAndFlushes(t *testing.T) {
	c := newConn(t, connOpts{})
	c.b.recv(t, 71, 0, 64)
	c.b.recv(t, 72, 64, 64)
	c.a.post(t,
		write(1, c.a.sge(0, 64), c.b.mr.Addr(), c.b.mr.RKey()^0x5a00),
		write(2, c.a.sge(0, 64), c.b.mr.Addr(), c.b.mr.RKey()),
		write(3, c.a.sge(0, 64), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(5 * time.Millisecond)
	epExpect(t, "requester", c.a.poll(t),
		epWC{1, verbs.WCRemAccessErr}, epWC{2, verbs.WCWRFlushErr}, epWC{3, verbs.WCWRFlushErr})
	if s := c.a.qp.State(); s != verbs.QPSErr {
		t.Fatalf("requester QP state = %v, want ERR", s)
	}
	if s := c.b.qp.State(); s != verbs.QPSErr {
		t.Fatalf("responder QP state = %v, want ERR", s)
	}
	epExpect(t, "responder", c.b.poll(t), epWC{71, verbs.WCWRFlushErr}, epWC{72, verbs.WCWRFlushErr})
	evs := epEventsOf(t, c.b.ctx)
	if len(evs) != 1 || evs[0].Type != verbs.EventQPAccessErr || evs[0].QP != c.b.qp {
		t.Fatalf("responder events = %+v, want one QP_ACCESS_ERR on its QP", evs)
	}
	if evs := epEventsOf(t, c.a.ctx); len(evs) != 0 {
		t.Fatalf("requester events = %+v, want none", evs)
	}
	for i := range 64 {
		if c.b.buf[i] != 0 {
			t.Fatal("a WRITE after the failed one landed in responder memory")
		}
	}
}

func TestErrQPWithoutRemoteWriteNaks(t *testing.T) {
	// The responder QP lacks REMOTE_WRITE; the MR written to allows it.
	o := connOpts{access: verbs.AccessLocalWrite | verbs.AccessRemoteRead}
	c := newConn(t, o)
	mr, err := c.b.pd.RegMR(c.b.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	c.b.recv(t, 9, 0, 8)
	fill(c.a.buf[:32], 1)
	c.a.post(t,
		write(1, c.a.sge(0, 32), mr.Addr(), mr.RKey()),
		write(2, c.a.sge(0, 32), mr.Addr(), mr.RKey()),
		write(3, c.a.sge(0, 32), mr.Addr(), mr.RKey()))
	c.run(5 * time.Millisecond)
	epExpect(t, "requester", c.a.poll(t),
		epWC{1, verbs.WCRemInvReqErr}, epWC{2, verbs.WCWRFlushErr}, epWC{3, verbs.WCWRFlushErr})
	if s := c.a.qp.State(); s != verbs.QPSErr {
		t.Fatalf("requester QP state = %v, want ERR", s)
	}
	epExpect(t, "responder", c.b.poll(t), epWC{9, verbs.WCWRFlushErr})
	// An operation the QP does not enable is an invalid request (rxe
	// check_op_valid, qib/hfi1 nack_inv), not an access violation.
	if evs := epEventsOf(t, c.b.ctx); len(evs) != 1 || evs[0].Type != verbs.EventQPReqErr {
		t.Fatalf("responder events = %+v, want QP_REQ_ERR", evs)
	}
	if c.b.buf[0] != 0 {
		t.Fatal("WRITE landed although the QP forbids remote writes")
	}

	// Same QP flags restored through RTS->RTS: the WRITE now succeeds.
	c2 := newConn(t, o)
	must(t, c2.b.qp.Modify(&verbs.QPAttr{QPAccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
		verbs.QPAttrAccessFlags))
	mr2, err := c2.b.pd.RegMR(c2.b.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	c2.a.post(t, write(1, c2.a.sge(0, 32), mr2.Addr(), mr2.RKey()))
	c2.run(time.Millisecond)
	epExpect(t, "after enabling REMOTE_WRITE", c2.a.poll(t), epWC{1, verbs.WCSuccess})
}

func TestErrReadWithoutRemoteReadMR(t *testing.T) {
	c := newConn(t, connOpts{})
	mr, err := c.b.pd.RegMR(c.b.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	c.a.post(t,
		verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{c.a.sge(0, 128)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()},
		write(5, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(5 * time.Millisecond)
	epExpect(t, "requester", c.a.poll(t), epWC{4, verbs.WCRemAccessErr}, epWC{5, verbs.WCWRFlushErr})
	if evs := epEventsOf(t, c.b.ctx); !epHasEvent(evs, verbs.EventQPAccessErr) {
		t.Fatalf("responder events = %+v, want QP_ACCESS_ERR", evs)
	}
	// The same READ through the MR that allows it works.
	c2 := newConn(t, connOpts{})
	c2.a.post(t, verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{c2.a.sge(0, 128)}, RemoteAddr: c2.b.mr.Addr(), RKey: c2.b.mr.RKey()})
	c2.run(time.Millisecond)
	epExpect(t, "READ with REMOTE_READ", c2.a.poll(t), epWC{4, verbs.WCSuccess})
}

func TestErrBadLKeyIsLocalProtectionError(t *testing.T) {
	c := newConn(t, connOpts{})
	bad := c.a.sge(0, 64)
	bad.LKey ^= 0x7700
	c.a.post(t,
		write(1, bad, c.b.mr.Addr(), c.b.mr.RKey()),
		write(2, c.a.sge(0, 64), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(5 * time.Millisecond)
	epExpect(t, "requester", c.a.poll(t), epWC{1, verbs.WCLocProtErr}, epWC{2, verbs.WCWRFlushErr})
	if s := c.a.qp.State(); s != verbs.QPSErr {
		t.Fatalf("requester QP state = %v, want ERR", s)
	}
	// Nothing reached the responder: it is untouched.
	if s := c.b.qp.State(); s != verbs.QPSRTS {
		t.Fatalf("responder QP state = %v, want RTS", s)
	}
	if evs := epEventsOf(t, c.b.ctx); len(evs) != 0 {
		t.Fatalf("responder events = %+v, want none", evs)
	}
	// An SGE past the end of the MR is a protection error too.
	c2 := newConn(t, connOpts{})
	c2.a.post(t, write(1, c2.a.sge(len(c2.a.buf)-8, 16), c2.b.mr.Addr(), c2.b.mr.RKey()))
	c2.run(time.Millisecond)
	epExpect(t, "SGE beyond MR", c2.a.poll(t), epWC{1, verbs.WCLocProtErr})
}

func TestErrSendLargerThanReceiveBuffer(t *testing.T) {
	c := newConn(t, connOpts{})
	c.b.recv(t, 21, 0, 100)
	c.b.recv(t, 22, 100, 1000)
	c.a.post(t,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{c.a.sge(0, 200)}},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{c.a.sge(0, 10)}})
	c.run(5 * time.Millisecond)
	epExpect(t, "responder", c.b.poll(t), epWC{21, verbs.WCLocLenErr}, epWC{22, verbs.WCWRFlushErr})
	epExpect(t, "requester", c.a.poll(t), epWC{1, verbs.WCRemInvReqErr}, epWC{2, verbs.WCWRFlushErr})
	if c.a.qp.State() != verbs.QPSErr || c.b.qp.State() != verbs.QPSErr {
		t.Fatalf("states = %v / %v, want ERR / ERR", c.a.qp.State(), c.b.qp.State())
	}
}

func TestErrMisalignedAtomic(t *testing.T) {
	c := newConn(t, connOpts{})
	c.a.post(t,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicFetchAdd, SendFlags: verbs.SendSignaled, CompareAdd: 1,
			SGList: []verbs.SGE{c.a.sge(0, 8)}, RemoteAddr: c.b.mr.Addr() + 4, RKey: c.b.mr.RKey()},
		write(2, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(5 * time.Millisecond)
	epExpect(t, "requester", c.a.poll(t), epWC{1, verbs.WCRemInvReqErr}, epWC{2, verbs.WCWRFlushErr})
	evs := epEventsOf(t, c.b.ctx)
	if len(evs) != 1 || evs[0].Type != verbs.EventQPReqErr || evs[0].QP != c.b.qp {
		t.Fatalf("responder events = %+v, want one QP_REQ_ERR", evs)
	}
	if c.b.qp.State() != verbs.QPSErr {
		t.Fatalf("responder state = %v, want ERR", c.b.qp.State())
	}
	for i := range 16 {
		if c.b.buf[i] != 0 {
			t.Fatal("misaligned atomic modified responder memory")
		}
	}
}

func TestErrRetryExhaustion(t *testing.T) {
	c := newConn(t, connOpts{timeout: 10, retry: 3})
	wrs := []verbs.SendWR{
		write(1, c.a.sge(0, 64), c.b.mr.Addr(), c.b.mr.RKey()),
		write(2, c.a.sge(0, 64), c.b.mr.Addr(), c.b.mr.RKey()),
		write(3, c.a.sge(0, 64), c.b.mr.Addr(), c.b.mr.RKey()),
		{WRID: 4, Opcode: verbs.WRSend, SGList: []verbs.SGE{c.a.sge(0, 8)}},
		verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{c.a.sge(256, 64)}, RemoteAddr: c.b.mr.Addr(), RKey: c.b.mr.RKey()},
	}
	wrs[1].SendFlags = 0 // unsignaled
	wrs[2].SendFlags = 0
	start := c.f.Now()
	c.a.post(t, wrs...)
	must(t, c.f.SetLink(c.b.hca.Port(1), false))
	to := verbs.TimeoutDuration(10)
	got, errAt := c.pollFor(t, c.a, start, 8*to, 50*time.Microsecond)
	epExpect(t, "requester", got, epWC{1, verbs.WCRetryExcErr}, epWC{2, verbs.WCWRFlushErr},
		epWC{3, verbs.WCWRFlushErr}, epWC{4, verbs.WCWRFlushErr}, epWC{5, verbs.WCWRFlushErr})
	if d := errAt - start; d < 4*to || d > 5*to {
		t.Fatalf("RETRY_EXC_ERR after %v, want between 4 and 5 timeouts (%v, %v)", d, 4*to, 5*to)
	}
	if st := c.f.Stats(); st.RetryTimeouts != 4 {
		t.Fatalf("retry timeouts = %d, want 4 (1 + retry_cnt 3)", st.RetryTimeouts)
	}
	if c.a.qp.State() != verbs.QPSErr {
		t.Fatalf("requester state = %v, want ERR", c.a.qp.State())
	}
	if evs := epEventsOf(t, c.a.ctx); len(evs) != 0 {
		t.Fatalf("requester context events = %+v, want none (its port stayed up)", evs)
	}
	evs := epEventsOf(t, c.b.ctx)
	if len(evs) != 1 || evs[0].Type != verbs.EventPortErr || evs[0].Port != 1 {
		t.Fatalf("responder context events = %+v, want PORT_ERR on port 1", evs)
	}
	if s, r := c.a.qp.(interface{ Outstanding() (int, int) }).Outstanding(); s != 0 || r != 0 {
		t.Fatalf("outstanding after flush = %d/%d", s, r)
	}
}

func TestErrRNRInfiniteWaitsForReceive(t *testing.T) {
	c := newConn(t, connOpts{}) // rnr_retry 7
	fill(c.a.buf[:40], 4)
	c.a.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{c.a.sge(0, 40)}})
	c.run(50 * time.Millisecond)
	if w := c.a.poll(t); len(w) != 0 {
		t.Fatalf("SEND completed without a receive: %+v", w)
	}
	if w := c.b.poll(t); len(w) != 0 {
		t.Fatalf("responder completions without a receive: %+v", w)
	}
	if c.a.qp.State() != verbs.QPSRTS {
		t.Fatalf("requester state = %v, want RTS while RNR-retrying forever", c.a.qp.State())
	}
	c.b.recv(t, 8, 1000, 64)
	c.run(time.Millisecond)
	epExpect(t, "requester", c.a.poll(t), epWC{1, verbs.WCSuccess})
	rw := c.b.poll(t)
	epExpect(t, "responder", rw, epWC{8, verbs.WCSuccess})
	if rw[0].ByteLen != 40 || string(c.b.buf[1000:1040]) != string(c.a.buf[:40]) {
		t.Fatalf("received %d bytes / wrong data", rw[0].ByteLen)
	}
}

func TestErrRNRRetryExceeded(t *testing.T) {
	c := newConn(t, connOpts{rnrRetry: 2, minRNR: 1})
	sends, naks := 0, 0
	c.f.SetTracer(func(r sim.TraceRecord) {
		if r.Kind != "tx" {
			return
		}
		switch {
		case strings.HasPrefix(r.Detail, "SEND "):
			sends++
		case strings.HasPrefix(r.Detail, "RNR_NAK "):
			naks++
		}
	})
	c.a.post(t,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{c.a.sge(0, 8)}},
		write(2, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(20 * time.Millisecond)
	epExpect(t, "requester", c.a.poll(t), epWC{1, verbs.WCRNRRetryExcErr}, epWC{2, verbs.WCWRFlushErr})
	// rnr_retry 2: the first transmission and 2 retries, each refused.
	if sends != 3 || naks != 3 {
		t.Fatalf("SEND transmitted %d times and RNR-NAKed %d times, want 3 and 3", sends, naks)
	}
	if st := c.f.Stats(); st.RetryTimeouts != 0 {
		t.Fatalf("%d ACK timeouts during RNR retries", st.RetryTimeouts)
	}
	if c.a.qp.State() != verbs.QPSErr {
		t.Fatalf("requester state = %v, want ERR", c.a.qp.State())
	}
	// The responder saw only RNR conditions: it is still fine.
	if c.b.qp.State() != verbs.QPSRTS {
		t.Fatalf("responder state = %v, want RTS", c.b.qp.State())
	}
}

// epConnectNoTimeout connects a to b like connectRC, with timeout 0.
func epConnectNoTimeout(t testing.TB, a, b *end, o connOpts) {
	t.Helper()
	c := verbs.RCConnect{AH: ahTo(t, a, b, o.port, 0), Access: o.access, PathMTU: verbs.MTU1024, DestQPN: b.qp.QPN(),
		RQPSN: 100, SQPSN: 100, MaxDestRdAtomic: 4, MinRNRTimer: o.minRNR, Timeout: 0, RetryCnt: 1,
		RNRRetry: o.rnrRetry, MaxRdAtomic: 4}
	must(t, c.Apply(a.qp.Modify))
}

func TestErrTimeoutZeroIsInfinite(t *testing.T) {
	o := defaults(connOpts{})
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	c := &conn{f: f, a: openEnd(t, f.Host("node0"), o), b: openEnd(t, f.Host("node1"), o)}
	epConnectNoTimeout(t, c.a, c.b, o)
	epConnectNoTimeout(t, c.b, c.a, o)
	if a, _, err := c.a.qp.Query(verbs.QPAttrTimeout); err != nil || a.Timeout != 0 {
		t.Fatalf("query timeout = %d, %v", a.Timeout, err)
	}
	// The connection works.
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(time.Millisecond)
	epExpect(t, "with link", c.a.poll(t), epWC{1, verbs.WCSuccess})

	must(t, f.SetLink(c.b.hca.Port(1), false))
	c.a.post(t, write(2, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()),
		write(3, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(2 * time.Second)
	if w := c.a.poll(t); len(w) != 0 {
		t.Fatalf("completions with timeout 0 and no link: %+v", w)
	}
	if c.a.qp.State() != verbs.QPSRTS {
		t.Fatalf("state = %v, want RTS", c.a.qp.State())
	}
	if st := f.Stats(); st.RetryTimeouts != 0 {
		t.Fatalf("%d retry timeouts fired with timeout 0", st.RetryTimeouts)
	}
	if evs := epEventsOf(t, c.a.ctx); len(evs) != 0 {
		t.Fatalf("requester events = %+v", evs)
	}
}

func TestErrPostSendBeforeRTS(t *testing.T) {
	o := defaults(connOpts{})
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	a, b := openEnd(t, f.Host("node0"), o), openEnd(t, f.Host("node1"), o)
	wrs := []verbs.SendWR{write(1, a.sge(0, 8), 0, 0), write(2, a.sge(0, 8), 0, 0)}
	try := func(state string) {
		t.Helper()
		n, err := a.qp.PostSend(wrs)
		if n != 0 || !errors.Is(err, verbs.EINVAL) {
			t.Fatalf("post_send in %s: n=%d err=%v, want 0, EINVAL", state, n, err)
		}
	}
	try("RESET")
	if n, err := a.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{a.sge(0, 8)}}}); n != 0 || !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("post_recv in RESET: n=%d err=%v, want 0, EINVAL", n, err)
	}
	must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: o.access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
	try("INIT")
	// Receives may be posted from INIT on.
	if n, err := a.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{a.sge(0, 8)}}}); n != 1 || err != nil {
		t.Fatalf("post_recv in INIT: n=%d err=%v", n, err)
	}
	must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: ahTo(t, a, b, 1, 0), PathMTU: verbs.MTU1024,
		DestQPN: b.qp.QPN(), RQPSN: 100, MaxDestRdAtomic: 4, MinRNRTimer: 1},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	try("RTR")
	if s, r := a.qp.(interface{ Outstanding() (int, int) }).Outstanding(); s != 0 || r != 1 {
		t.Fatalf("outstanding = %d/%d, want 0/1", s, r)
	}
}

func TestErrPostSendValidation(t *testing.T) {
	c := newConn(t, connOpts{})
	remote, rkey := c.b.mr.Addr(), c.b.mr.RKey()
	good := func(id uint64) verbs.SendWR { return write(id, c.a.sge(0, 8), remote, rkey) }

	// Too many SGEs: the bad WR's index is returned, the ones before it post.
	tooMany := good(3)
	tooMany.SGList = []verbs.SGE{c.a.sge(0, 1), c.a.sge(1, 1), c.a.sge(2, 1), c.a.sge(3, 1), c.a.sge(4, 1)}
	n, err := c.a.qp.PostSend([]verbs.SendWR{good(1), good(2), tooMany, good(4)})
	if n != 2 || !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("5 SGEs with max_send_sge 4: n=%d err=%v, want 2, EINVAL", n, err)
	}
	// Too many receive SGEs: same rule for post_recv.
	rn, err := c.b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{c.b.sge(0, 8)}},
		{WRID: 2, SGList: []verbs.SGE{c.b.sge(0, 1), c.b.sge(1, 1), c.b.sge(2, 1), c.b.sge(3, 1), c.b.sge(4, 1)}}})
	if rn != 1 || !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("5 receive SGEs with max_recv_sge 4: n=%d err=%v, want 1, EINVAL", rn, err)
	}
	// Unsupported opcode.
	n, err = c.a.qp.PostSend([]verbs.SendWR{{WRID: 5, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled}})
	if n != 0 || !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("BIND_MW: n=%d err=%v, want 0, EINVAL", n, err)
	}
	// Atomic with a 4-byte SGE.
	n, err = c.a.qp.PostSend([]verbs.SendWR{good(6), {WRID: 7, Opcode: verbs.WRAtomicFetchAdd, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{c.a.sge(0, 4)}, RemoteAddr: remote, RKey: rkey}})
	if n != 1 || !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("atomic with 4-byte SGE: n=%d err=%v, want 1, EINVAL", n, err)
	}
	c.run(time.Millisecond)
	epExpect(t, "accepted WRs", c.a.poll(t), epWC{1, verbs.WCSuccess}, epWC{2, verbs.WCSuccess}, epWC{6, verbs.WCSuccess})
	if c.a.qp.State() != verbs.QPSRTS {
		t.Fatalf("a rejected post changed the QP state to %v", c.a.qp.State())
	}
}

func TestErrQueueFull(t *testing.T) {
	c := newConn(t, connOpts{maxWR: 4})
	if _, init, err := c.a.qp.Query(0); err != nil || init.Cap.MaxSendWR != 4 {
		t.Fatalf("max_send_wr = %d (%v), want 4", init.Cap.MaxSendWR, err)
	}
	var wrs []verbs.SendWR
	for i := range 6 {
		wrs = append(wrs, write(uint64(i+1), c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	}
	n, err := c.a.qp.PostSend(wrs)
	if n != 4 || !errors.Is(err, verbs.ENOMEM) {
		t.Fatalf("post 6 into 4 slots: n=%d err=%v, want 4, ENOMEM", n, err)
	}
	var rwrs []verbs.RecvWR
	for i := range 5 {
		rwrs = append(rwrs, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{c.a.sge(0, 8)}})
	}
	if n, err := c.a.qp.PostRecv(rwrs); n != 4 || !errors.Is(err, verbs.ENOMEM) {
		t.Fatalf("post_recv 5 into 4 slots: n=%d err=%v, want 4, ENOMEM", n, err)
	}
	c.run(time.Millisecond)
	epExpect(t, "accepted", c.a.poll(t), epWC{1, verbs.WCSuccess}, epWC{2, verbs.WCSuccess},
		epWC{3, verbs.WCSuccess}, epWC{4, verbs.WCSuccess})
	// Slots are free again once completed.
	if n, err := c.a.qp.PostSend(wrs[4:]); n != 2 || err != nil {
		t.Fatalf("post after completions: n=%d err=%v", n, err)
	}
}

func TestErrPostToErrQPFlushesAtOnce(t *testing.T) {
	c := newConn(t, connOpts{})
	must(t, c.a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState))
	if w := c.a.poll(t); len(w) != 0 {
		t.Fatalf("moving an idle QP to ERR produced %+v", w)
	}
	n, err := c.a.qp.PostSend([]verbs.SendWR{
		write(11, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()),
		{WRID: 12, Opcode: verbs.WRSend, SGList: []verbs.SGE{c.a.sge(0, 8)}}, // unsignaled
	})
	if n != 2 || err != nil {
		t.Fatalf("post_send in ERR: n=%d err=%v", n, err)
	}
	n, err = c.a.qp.PostRecv([]verbs.RecvWR{{WRID: 13, SGList: []verbs.SGE{c.a.sge(0, 8)}}})
	if n != 1 || err != nil {
		t.Fatalf("post_recv in ERR: n=%d err=%v", n, err)
	}
	// Without running the fabric: the flush completions are there already.
	w := c.a.poll(t)
	epExpect(t, "ERR QP", w, epWC{11, verbs.WCWRFlushErr}, epWC{12, verbs.WCWRFlushErr}, epWC{13, verbs.WCWRFlushErr})
	for _, x := range w {
		if x.QPNum != c.a.qp.QPN() {
			t.Fatalf("flush completion qp_num %#x, want %#x", x.QPNum, c.a.qp.QPN())
		}
	}
	c.run(time.Millisecond)
	if w := c.a.poll(t); len(w) != 0 {
		t.Fatalf("extra completions %+v", w)
	}
	if c.b.buf[0] != 0 || len(c.b.poll(t)) != 0 {
		t.Fatal("a WR posted in ERR reached the peer")
	}
}

func TestErrMixedWRsCompleteInOrder(t *testing.T) {
	c := newConn(t, connOpts{})
	fill(c.a.buf[:8192], 2)
	fill(c.b.buf[32768:40960], 6)
	var wrs []verbs.SendWR
	var want []epWC
	var ops []verbs.WCOpcode
	recvs := 0
	for i := range 20 {
		id := uint64(1000 + i)
		off := i * 256
		var wr verbs.SendWR
		switch i % 3 {
		case 0:
			wr = write(id, c.a.sge(off, 200+i*100), c.b.mr.Addr()+uint64(off), c.b.mr.RKey())
			ops = append(ops, verbs.WCRDMAWrite)
		case 1:
			wr = verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{c.a.sge(off, 100+i*50)}}
			c.b.recv(t, uint64(i), 16384+recvs*2048, 2048)
			recvs++
			ops = append(ops, verbs.WCSend)
		case 2:
			wr = verbs.SendWR{WRID: id, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{c.a.sge(16384+off, 300+i*64)}, RemoteAddr: c.b.mr.Addr() + 32768 + uint64(off), RKey: c.b.mr.RKey()}
			ops = append(ops, verbs.WCRDMARead)
		}
		wrs = append(wrs, wr)
		want = append(want, epWC{id, verbs.WCSuccess})
	}
	c.a.post(t, wrs...)
	c.run(5 * time.Millisecond)
	got := c.a.poll(t)
	epExpect(t, "requester", got, want...)
	for i, w := range got {
		if w.Opcode != ops[i] {
			t.Fatalf("completion %d opcode %v, want %v", i, w.Opcode, ops[i])
		}
	}
	rw := c.b.poll(t)
	if len(rw) != recvs {
		t.Fatalf("%d receive completions, want %d", len(rw), recvs)
	}
	for k, w := range rw {
		if i := 3*k + 1; w.WRID != uint64(i) || w.Status != verbs.WCSuccess || w.ByteLen != uint32(100+i*50) {
			t.Fatalf("receive %d = %+v", k, w)
		}
	}
}

// TestSequenceNakCountsAgainstRetryCnt: a sequence NAK restarts the
// requester and uses one of its retry_cnt retries, as a local ACK timeout
// does (hfi1_restart_rc, qib_restart_rc). The first WR's request is lost
// every time; the second's arrives once and draws one NAK; then the
// timer fires. With retry_cnt 3 the WR fails after the NAK and 3 timeouts,
// not 4.
func TestSequenceNakCountsAgainstRetryCnt(t *testing.T) {
	c := newConn(t, connOpts{})
	for range 10 {
		must(t, c.f.DropRequest(c.a.qp, 100))
	}
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()), write(2, c.a.sge(8, 8), c.b.mr.Addr()+8, c.b.mr.RKey()))
	c.run(time.Second)
	if st := statuses(c.a.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCRetryExcErr, verbs.WCWRFlushErr}) {
		t.Fatalf("completions %v, want [RETRY_EXC_ERR WR_FLUSH_ERR]", st)
	}
	if n := c.f.Stats().RetryTimeouts; n != 3 {
		t.Fatalf("%d local ACK timeouts, want 3 (the NAK used the first retry)", n)
	}
}
