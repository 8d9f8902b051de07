//go:build linux && cgo

package ibv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// Helpers of the lab tests (TestLabLocal, TestLabPair): they run only with
// IBPATH_LAB=1 inside a guest with soft-RoCE devices (docs/IBV.md). Every
// check prints a PASS or FAIL line; every wait has a deadline.

const (
	labBufSize = 64 << 10
	labWait    = 10 * time.Second
	labAllAcc  = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
)

func labOnly(t *testing.T) {
	t.Helper()
	if !labEnabled() {
		t.Skip("lab test: set IBPATH_LAB=1 inside a guest with rxe devices")
	}
}

func pass(t *testing.T, format string, args ...any) {
	t.Helper()
	fmt.Printf("PASS: %s\n", fmt.Sprintf(format, args...))
}

func fail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	fmt.Printf("FAIL: %s\n", msg)
	t.Fatal(msg)
}

// check fails the test with a FAIL line when err is not nil, else prints PASS.
func check(t *testing.T, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		fail(t, "%s: %v", fmt.Sprintf(format, args...), err)
	}
	pass(t, format, args...)
}

// roceV2IPv4 finds the RoCE v2 GID that carries an IPv4 address
// (::ffff:a.b.c.d) on port 1.
func roceV2IPv4(ctx *Context) (int, verbs.GID, error) {
	pa, err := ctx.QueryPort(1)
	if err != nil {
		return 0, verbs.GID{}, err
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		e, err := ctx.QueryGIDEntry(1, i)
		if err != nil || e.GID.IsZero() {
			continue
		}
		g := e.GID
		v4 := g[10] == 0xff && g[11] == 0xff && g == verbs.GID{10: 0xff, 11: 0xff, 12: g[12], 13: g[13], 14: g[14], 15: g[15]}
		if e.Type == GIDTypeRoCEv2 && v4 {
			return i, g, nil
		}
	}
	return 0, verbs.GID{}, fmt.Errorf("%s: no RoCE v2 IPv4 GID among %d entries", ctx.Device().Name, pa.GIDTblLen)
}

// end is one side of an RC connection: a context, PD, Alloc'd registered
// buffer, a send CQ, a receive CQ on a completion channel, and the QP.
type end struct {
	ctx    *Context
	pd     verbs.PD
	buf    []byte
	mr     verbs.MR
	ch     *CompChannel
	scq    verbs.CQ
	rcq    verbs.CQ
	qp     *QP
	gidIdx int
	gid    verbs.GID
}

// peerInfo is what the other side needs to connect and address memory.
type peerInfo struct {
	QPN  uint32
	PSN  uint32
	GID  verbs.GID
	Addr uint64
	RKey uint32
}

func newEnd(t *testing.T, dev string) *end {
	t.Helper()
	e := &end{}
	var err error
	if e.ctx, err = OpenDevice(dev); err != nil {
		fail(t, "open %s: %v", dev, err)
	}
	t.Cleanup(func() { e.close(t) })
	if e.gidIdx, e.gid, err = roceV2IPv4(e.ctx); err != nil {
		fail(t, "%v", err)
	}
	if e.pd, err = e.ctx.AllocPD(); err != nil {
		fail(t, "%v", err)
	}
	if e.buf, err = Alloc(labBufSize); err != nil {
		fail(t, "%v", err)
	}
	if e.mr, err = e.pd.RegMR(e.buf, labAllAcc); err != nil {
		fail(t, "%v", err)
	}
	ch, err := e.ctx.CreateCompChannel()
	if err != nil {
		fail(t, "%v", err)
	}
	e.ch = ch.(*CompChannel)
	if e.scq, err = e.ctx.CreateCQ(64, nil, 0); err != nil {
		fail(t, "%v", err)
	}
	if e.rcq, err = e.ctx.CreateCQ(64, e.ch, 0); err != nil {
		fail(t, "%v", err)
	}
	qp, err := e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	if err != nil {
		fail(t, "%v", err)
	}
	e.qp = qp.(*QP)
	return e
}

func (e *end) close(t *testing.T) {
	for _, f := range []func() error{
		func() error { return destroyIf(e.qp) },
		func() error { return destroyIf(e.rcq) },
		func() error { return destroyIf(e.scq) },
		func() error { return destroyIf(e.ch) },
		func() error { return destroyIf(e.mr) },
		func() error { return destroyIf(e.pd) },
		func() error { return freeIf(e.buf) },
		func() error { return destroyIf(e.ctx) },
	} {
		if err := f(); err != nil {
			fmt.Printf("FAIL: teardown: %v\n", err)
			t.Error(err)
		}
	}
}

func destroyIf(x any) error {
	switch v := x.(type) {
	case *QP:
		if v != nil {
			return v.Destroy()
		}
	case verbs.CQ:
		if v != nil {
			return v.Destroy()
		}
	case *CompChannel:
		if v != nil {
			return v.Destroy()
		}
	case verbs.MR:
		if v != nil {
			return v.Dereg()
		}
	case verbs.PD:
		if v != nil {
			return v.Dealloc()
		}
	case *Context:
		if v != nil {
			return v.Close()
		}
	}
	return nil
}

func freeIf(b []byte) error {
	if b == nil {
		return nil
	}
	return Free(b)
}

func (e *end) info(psn uint32) peerInfo {
	return peerInfo{QPN: e.qp.QPN(), PSN: psn, GID: e.gid, Addr: e.mr.Addr(), RKey: e.mr.RKey()}
}

func (e *end) toInit() error {
	return e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PKeyIndex: 0, PortNum: 1, QPAccessFlags: labAllAcc},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
}

// connect moves an INIT QP to RTS towards r.
func (e *end) connect(r peerInfo, myPSN uint32, timeout, retry uint8) error {
	c := verbs.RCConnect{AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: r.GID, SGIDIndex: uint8(e.gidIdx), HopLimit: 64}},
		PathMTU: verbs.MTU1024, DestQPN: r.QPN, RQPSN: r.PSN, SQPSN: myPSN, MaxDestRdAtomic: 1, MinRNRTimer: 12,
		Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 1}
	for _, s := range c.Steps()[1:] { // RTR, RTS: the QP is at INIT
		if err := e.qp.Modify(&s.Attr, s.Mask); err != nil {
			return err
		}
	}
	return nil
}

func (e *end) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
}

func (e *end) postRecv(wrid uint64, off, n int) error {
	_, err := e.qp.PostRecv([]verbs.RecvWR{{WRID: wrid, SGList: e.sge(off, n)}})
	return err
}

func (e *end) post(wr verbs.SendWR) error {
	wr.SendFlags |= verbs.SendSignaled
	_, err := e.qp.PostSend([]verbs.SendWR{wr})
	return err
}

// waitWC polls cq until a completion arrives or d passes.
func waitWC(cq verbs.CQ, d time.Duration) (verbs.WC, error) {
	var wc [1]verbs.WC
	deadline := time.Now().Add(d)
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			return wc[0], nil
		}
		if time.Now().After(deadline) {
			return verbs.WC{}, fmt.Errorf("no completion within %v", d)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// expectWC waits for one successful completion with the given wr_id and
// opcode.
func expectWC(cq verbs.CQ, wrid uint64, op verbs.WCOpcode) (verbs.WC, error) {
	wc, err := waitWC(cq, labWait)
	if err != nil {
		return wc, err
	}
	if wc.Status != verbs.WCSuccess || wc.WRID != wrid || wc.Opcode != op {
		return wc, fmt.Errorf("completion %+v (status %v), want wr_id %d %v success", wc, wc.Status, wrid, op)
	}
	return wc, nil
}

// waitCQEvent waits for a completion channel notification.
func waitCQEvent(ch *CompChannel, d time.Duration) (verbs.CQ, error) {
	deadline := time.Now().Add(d)
	for {
		cq, err := ch.GetCQEvent()
		if err == nil {
			return cq, nil
		}
		if !errors.Is(err, verbs.EAGAIN) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no CQ event within %v", d)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitAsync waits for an async event of type want, acknowledging every
// event it reads.
func waitAsync(ctx *Context, want verbs.EventType, d time.Duration) (verbs.AsyncEvent, error) {
	deadline := time.Now().Add(d)
	for {
		ev, err := ctx.GetAsyncEvent()
		if err == nil {
			ctx.AckAsyncEvent(ev)
			fmt.Printf("async event on %s: %v port %d\n", ctx.Device().Name, ev.Type, ev.Port)
			if ev.Type == want {
				return ev, nil
			}
			continue
		}
		if !errors.Is(err, verbs.EAGAIN) {
			return ev, err
		}
		if time.Now().After(deadline) {
			return ev, fmt.Errorf("no %v event within %v", want, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fillPattern(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func checkPattern(b []byte, seed byte) error {
	for i := range b {
		if b[i] != seed+byte(i*7) {
			return fmt.Errorf("byte %d is %#x, want %#x", i, b[i], seed+byte(i*7))
		}
	}
	return nil
}

func ipLink(dev, state string) error {
	out, err := exec.Command("ip", "link", "set", dev, state).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip link set %s %s: %v: %s", dev, state, err, out)
	}
	return nil
}

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
