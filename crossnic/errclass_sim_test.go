package crossnic_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// endpoint is how an application drives its QP: through its Conn, or
// through the plain QP and CQ (plain verbs, the reference).
type endpoint interface {
	PostSend([]verbs.SendWR) (int, error)
	PostRecv([]verbs.RecvWR) (int, error)
	Poll([]verbs.WC) (int, error)
}

type plainEP struct {
	qp verbs.QP
	cq verbs.CQ
}

func (p plainEP) PostSend(w []verbs.SendWR) (int, error) { return p.qp.PostSend(w) }
func (p plainEP) PostRecv(w []verbs.RecvWR) (int, error) { return p.qp.PostRecv(w) }
func (p plainEP) Poll(wc []verbs.WC) (int, error)        { return p.cq.Poll(wc) }

// injectCQ is a default CQ as its reader sees it, each completion passed
// through rewrite first (nil: as it is): a test makes the fabric report a
// status its model never produces, as another provider would.
type injectCQ struct {
	verbs.CQ
	rewrite func(wc *verbs.WC)
}

func (q *injectCQ) Poll(wc []verbs.WC) (int, error) {
	n, err := q.CQ.Poll(wc)
	if q.rewrite != nil {
		for i := range wc[:n] {
			q.rewrite(&wc[i])
		}
	}
	return n, err
}

// injectWorld is a world whose default CQs are injectCQs (cqs[i] is node
// i's, as both its Conn and a plain reader see it).
func injectWorld(t testing.TB, o worldOpts) (*world, [2]*injectCQ) {
	return wrappedWorld(t, o, func(cq verbs.CQ) *injectCQ { return &injectCQ{CQ: cq} })
}

// wrappedWorld is a world whose default CQs are wrap's (cqs[i] is node
// i's), with one Directory for both nodes.
func wrappedWorld[C verbs.CQ](t testing.TB, o worldOpts, wrap func(verbs.CQ) C) (*world, [2]C) {
	var cqs [2]C
	k := 0
	o.wrapDef = func(cq verbs.CQ) verbs.CQ {
		cqs[k] = wrap(cq)
		k++
		return cqs[k-1]
	}
	dir := crossnic.NewMemDirectory()
	return newWorldWith(t, [2]crossnic.Directory{dir, dir}, o), cqs
}

// rewriteOnce makes the first success of wr_id id that cq reports into
// status, and puts qp in ERR at that moment (as a provider whose QP fails
// with that WR): the WRs and receives after it flush.
func rewriteOnce(cq *injectCQ, qp verbs.QP, id uint64, status verbs.WCStatus) {
	done := false
	cq.rewrite = func(wc *verbs.WC) {
		if done || wc.WRID != id || wc.Status != verbs.WCSuccess {
			return
		}
		done = true
		wc.Status = status
		_ = qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
	}
}

// appErrCase is an application error made on the simulated fabric: what
// the two applications post, and the error that node at must see.
type appErrCase struct {
	name   string
	opts   func(*worldOpts)
	post   func(t testing.TB, w *world, cqs [2]*injectCQ, ep [2]endpoint)
	at     int
	status verbs.WCStatus
}

func goodWrite(w *world, id uint64, s int) verbs.SendWR {
	me, peer := w.n[0], w.n[1]
	return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: me.outAddr(s), Length: slot, LKey: me.def.mr.LKey()}}, RemoteAddr: peer.inAddr(s), RKey: peer.def.mr.RKey()}
}

func sendOf(w *world, id uint64, n uint32) verbs.SendWR {
	me := w.n[0]
	return verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: me.outAddr(0), Length: n, LKey: me.def.mr.LKey()}}}
}

func recvOf(n *node, id uint64, length uint32, lkey uint32) verbs.RecvWR {
	return verbs.RecvWR{WRID: id, SGList: []verbs.SGE{{Addr: n.inAddr(int(id % nslots)), Length: length, LKey: lkey}}}
}

func postAll(t testing.TB, ep endpoint, wrs ...verbs.SendWR) {
	t.Helper()
	if _, err := ep.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
}

func recvAll(t testing.TB, ep endpoint, wrs ...verbs.RecvWR) {
	t.Helper()
	if _, err := ep.PostRecv(wrs); err != nil {
		t.Fatal(err)
	}
}

// Receives 200+ of node0, 100+ of node1: their flushes show each QP's
// state after the error.
var appErrCases = []appErrCase{
	{name: "REM_ACCESS_ERR: a WRITE with a bad rkey; the responder's QP flushes", at: 0, status: verbs.WCRemAccessErr,
		post: func(t testing.TB, w *world, _ [2]*injectCQ, ep [2]endpoint) {
			bad := goodWrite(w, 2, 1)
			bad.RKey ^= 0x5a5a00
			recvAll(t, ep[1], recvOf(w.n[1], 100, slot, w.n[1].def.mr.LKey()), recvOf(w.n[1], 101, slot, w.n[1].def.mr.LKey()))
			recvAll(t, ep[0], recvOf(w.n[0], 200, slot, w.n[0].def.mr.LKey()))
			postAll(t, ep[0], goodWrite(w, 1, 0), bad, goodWrite(w, 3, 2))
		}},
	{name: "LOC_PROT_ERR: a WRITE from memory its lkey does not cover", at: 0, status: verbs.WCLocProtErr,
		post: func(t testing.TB, w *world, _ [2]*injectCQ, ep [2]endpoint) {
			bad := goodWrite(w, 2, 1)
			bad.SGList[0].LKey ^= 0x5a5a00
			recvAll(t, ep[0], recvOf(w.n[0], 200, slot, w.n[0].def.mr.LKey()))
			postAll(t, ep[0], goodWrite(w, 1, 0), bad, goodWrite(w, 3, 2))
		}},
	{name: "REM_INV_REQ_ERR and LOC_LEN_ERR: a SEND longer than the receive", at: 0, status: verbs.WCRemInvReqErr,
		post: func(t testing.TB, w *world, _ [2]*injectCQ, ep [2]endpoint) {
			recvAll(t, ep[1], recvOf(w.n[1], 100, 64, w.n[1].def.mr.LKey()), recvOf(w.n[1], 101, slot, w.n[1].def.mr.LKey()))
			recvAll(t, ep[0], recvOf(w.n[0], 200, slot, w.n[0].def.mr.LKey()))
			postAll(t, ep[0], sendOf(w, 1, slot), goodWrite(w, 2, 1))
		}},
	{name: "REM_OP_ERR and LOC_PROT_ERR: the peer's receive has a bad lkey", at: 0, status: verbs.WCRemOpErr,
		post: func(t testing.TB, w *world, _ [2]*injectCQ, ep [2]endpoint) {
			recvAll(t, ep[1], recvOf(w.n[1], 100, slot, w.n[1].def.mr.LKey()^0x5a5a00), recvOf(w.n[1], 101, slot, w.n[1].def.mr.LKey()))
			recvAll(t, ep[0], recvOf(w.n[0], 200, slot, w.n[0].def.mr.LKey()))
			postAll(t, ep[0], sendOf(w, 1, slot), goodWrite(w, 2, 1))
		}},
	{name: "RNR_RETRY_EXC_ERR: the peer posted no receive", at: 0, status: verbs.WCRNRRetryExcErr,
		opts: func(o *worldOpts) { o.rnrRetry = 1 },
		post: func(t testing.TB, w *world, _ [2]*injectCQ, ep [2]endpoint) {
			recvAll(t, ep[0], recvOf(w.n[0], 200, slot, w.n[0].def.mr.LKey()))
			postAll(t, ep[0], goodWrite(w, 1, 0), sendOf(w, 2, slot), goodWrite(w, 3, 2))
		}},
}

// The statuses the simulator's model never makes, reported for a WRITE
// that went through (another provider's view of it), the QP failing with it.
func init() {
	for _, st := range []verbs.WCStatus{verbs.WCLocAccessErr, verbs.WCMWBindErr, verbs.WCBadRespErr} {
		appErrCases = append(appErrCases, appErrCase{name: st.String() + " (injected)", at: 0, status: st,
			post: func(t testing.TB, w *world, cqs [2]*injectCQ, ep [2]endpoint) {
				rewriteOnce(cqs[0], w.n[0].def.qp, 2, st)
				recvAll(t, ep[0], recvOf(w.n[0], 200, slot, w.n[0].def.mr.LKey()), recvOf(w.n[0], 201, slot, w.n[0].def.mr.LKey()))
				postAll(t, ep[0], goodWrite(w, 1, 0), goodWrite(w, 2, 1))
			}})
	}
}

// runAppErr runs c on a fresh world, the applications on plain verbs or
// through their Conns, and returns what each application saw.
func runAppErr(t *testing.T, c appErrCase, p sim.Profile, conns bool) (*world, [2][]verbs.WC) {
	o := worldOpts{cfg: sim.Config{Seed: 31, Profile: p}, retry: 3, noRecvs: true}
	if c.opts != nil {
		c.opts(&o)
	}
	w, cqs := injectWorld(t, o)
	var ep [2]endpoint
	for i, n := range w.n {
		ep[i] = plainEP{qp: n.def.qp, cq: cqs[i]}
		if conns {
			ep[i] = n.conn
		}
	}
	c.post(t, w, cqs, ep)
	var seen [2][]verbs.WC
	buf := make([]verbs.WC, 16)
	for step := 0; step < 2000; step++ { // 10 ms: past any retry
		w.f.RunFor(5 * time.Microsecond)
		for i, n := range w.n {
			for {
				ev, err := n.def.ctx.GetAsyncEvent()
				if err != nil {
					break
				}
				if conns {
					n.conn.HandleEvent(n.def.ctx, ev, 1)
				}
				n.def.ctx.AckAsyncEvent(ev)
			}
			if conns {
				n.conn.Tick()
			}
			for {
				k, err := ep[i].Poll(buf)
				must(t, err)
				if k == 0 {
					break
				}
				seen[i] = append(seen[i], buf[:k]...)
			}
		}
	}
	return w, seen
}

// TestApplicationErrorsAreNotFaults: each error the application's own
// WRs cause, which any path would report again, reaches the application
// exactly as plain verbs report it (the same completions, in the same
// order on each queue, on the same simulated fabric without ibpath), and
// no failover
// happens: nothing is replayed, no receive moves, and the connection's
// error surfaces (its QP is in error, as a plain one would be). That
// includes the WR_FLUSH_ERR the responder's QP makes when the peer's
// request was at fault. Taken for a fault, each would be replayed on the
// backup, after a handshake, only to fail again.
func TestApplicationErrorsAreNotFaults(t *testing.T) {
	for _, c := range appErrCases {
		t.Run(c.name, func(t *testing.T) {
			_, want := runAppErr(t, c, sim.ProfileStrict, false)
			w, got := runAppErr(t, c, sim.ProfileStrict, true)
			if !slices.ContainsFunc(want[c.at], func(wc verbs.WC) bool { return wc.Status == c.status }) {
				t.Fatalf("the case does not make %v on plain verbs: node%d saw %v", c.status, c.at, want[c.at])
			}
			for i, n := range w.n {
				for _, q := range []func(verbs.WC) bool{isSendWC, isRecvWC} {
					if !slices.Equal(only(got[i], q), only(want[i], q)) {
						t.Fatalf("%s saw\n%v\nthrough its Conn; plain verbs give\n%v", n.name, fmtWCs(got[i]), fmtWCs(want[i]))
					}
				}
				if st := n.conn.Stats(); st.Faults != 0 || st.Replayed != 0 || st.RecvsMoved != 0 {
					sq, rq := n.conn.State()
					t.Fatalf("%s failed over: %v/%v %q %+v", n.name, sq, rq, n.conn.Reason(), st)
				}
			}
			sq, _ := w.n[c.at].conn.State()
			if sq != fsm.SQSurfaced || !strings.Contains(w.n[c.at].conn.Reason(), "the application's error") {
				t.Fatalf("node%d: %v %q, want its error surfaced as the application's", c.at, sq, w.n[c.at].conn.Reason())
			}
		})
	}
}

// The cases' receives have wr_ids from 100 on, their sends below. Verbs
// order the completions of each queue, not those of a send queue against
// its receive queue in one CQ (a Conn posts a list one WR at a time: the
// simulator's QP in ERR flushes a WR posted after its receives flushed).
func isRecvWC(wc verbs.WC) bool { return wc.WRID >= 100 }
func isSendWC(wc verbs.WC) bool { return wc.WRID < 100 }

func only(wcs []verbs.WC, keep func(verbs.WC) bool) []verbs.WC {
	var out []verbs.WC
	for _, wc := range wcs {
		if keep(wc) {
			out = append(out, wc)
		}
	}
	return out
}

func fmtWCs(wcs []verbs.WC) string {
	var b strings.Builder
	for _, wc := range wcs {
		fmt.Fprintf(&b, "  wr_id %d %v op %v qp %#x\n", wc.WRID, wc.Status, wc.Opcode, wc.QPNum)
	}
	return b.String()
}

// TestFaultErrorsFailOver: the statuses that mean the path or the device
// failed still start a failover. The default QP fails as a provider
// reports it: the first WR in flight with the status, the rest flushed
// (soft-RoCE completes the WRs in flight with LOC_QP_OP_ERR at once on a
// link down). The traffic continues on the backup, every round delivered
// once, and no error reaches the application.
func TestFaultErrorsFailOver(t *testing.T) {
	for _, st := range []verbs.WCStatus{verbs.WCRetryExcErr, verbs.WCLocQPOpErr, verbs.WCFatalErr, verbs.WCGeneralErr} {
		t.Run(st.String(), func(t *testing.T) {
			w, cqs := injectWorld(t, worldOpts{cfg: sim.Config{Seed: 32}, retry: 3})
			w.run(200*time.Microsecond, 0)
			a := w.n[0]
			// the next signaled WR node0 posts fails with st
			rewriteOnce(cqs[0], a.def.qp, uint64(2*w.sent[0]+1), st)
			w.run(2*time.Millisecond, 0)
			w.run(20 * time.Millisecond)
			if s := a.conn.Stats(); s.Faults != 1 {
				t.Fatalf("node0 %+v: want one failover for %v", s, st)
			}
			if err := w.delivered(0); err != nil {
				t.Fatal(err)
			}
			if sq, _ := a.conn.State(); sq == fsm.SQSurfaced {
				t.Fatalf("node0 surfaced: %s", a.conn.Reason())
			}
		})
	}
}

// TestFlushAfterDeviceOrPortFaultFailsOver: a WR_FLUSH_ERR that comes
// before any event says why is a fault when the QP's device died (rdmavt
// flushes a dead device's QPs: ibv_query_qp says EIO) or its port is down;
// the same flush with both healthy is the application's (the responder's
// QP failing on the peer's request, TestApplicationErrorsAreNotFaults).
func TestFlushAfterDeviceOrPortFaultFailsOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(w *world)
	}{
		{"device died (rdmavt flushes it)", func(w *world) { must(t, w.f.KillHCA(w.n[0].hca)) }},
		{"port down, the QP flushed", func(w *world) {
			must(t, w.f.SetLink(w.n[0].hca.Port(1), false))
			must(t, w.n[0].def.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := crossnic.NewMemDirectory()
			w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 33, Profile: sim.ProfileRdmavt}, retry: 3})
			w.run(200*time.Microsecond, 0)
			a := w.n[0]
			tc.fault(w)
			// Poll before the async event (DEVICE_FATAL, PORT_ERR) is read:
			// the flush is the first the Conn hears of the fault.
			wc := make([]verbs.WC, 64)
			for {
				n, err := a.conn.Poll(wc)
				must(t, err)
				if n == 0 {
					break
				}
				for _, c := range wc[:n] {
					w.onWC(0, c)
				}
			}
			if sq, _ := a.conn.State(); sq != fsm.SQAwaitAck || a.conn.Stats().Faults != 1 {
				t.Fatalf("node0 after the flush: %v %q %+v, want a failover under way", sq, a.conn.Reason(), a.conn.Stats())
			}
			w.run(2*time.Millisecond, 0)
			w.run(20 * time.Millisecond)
			if err := w.delivered(0); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAppErrorAtTheFault: the application's error is in the CQ when the
// default HCA dies, behind nothing: the failover the death starts
// collects it first, and the error surfaces there (the WR is the
// application's fault, and the default QP held it). Nothing of the
// failover happens after that: no notification tells node1 to fail over,
// no receive moves; node0's application sees the error once and every
// receive flushed once, on every profile.
func TestAppErrorAtTheFault(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 34, p)
		w.run(100*time.Microsecond, 0)
		w.run(time.Millisecond) // every round completes
		a, b := w.n[0], w.n[1]
		bad := goodWrite(w, 1<<41, 0)
		bad.SGList[0].LKey ^= 0x5a5a00
		postAll(t, a.conn, bad) // fails at once: LOC_PROT_ERR in the CQ
		w.posted[0] = append(w.posted[0], bad.WRID)
		must(t, w.f.KillHCA(a.hca))
		w.run(5 * time.Millisecond)
		if sq, _ := a.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), "the application's error") {
			t.Fatalf("node0 %v %q, want surfaced on its error", sq, a.conn.Reason())
		}
		if sq, rq := b.conn.State(); sq != fsm.SQDefault || rq != fsm.RQDefault || b.conn.Stats().Faults != 0 {
			t.Fatalf("node1 %v/%v %+v: told to fail over by a Conn whose error surfaced", sq, rq, b.conn.Stats())
		}
		if st := a.conn.Stats(); st.RecvsMoved != 0 || st.Replayed != 0 {
			t.Fatalf("node0 %+v: moved something after its error surfaced", st)
		}
		n := 0
		for _, wc := range w.errs[0] {
			if wc.WRID == bad.WRID {
				if wc.Status != verbs.WCLocProtErr {
					t.Fatalf("the bad WR completed with %v, want LOC_PROT_ERR", wc.Status)
				}
				n++
			}
		}
		if n != 1 {
			t.Fatalf("the bad WR completed %d times", n)
		}
		must(t, w.checkSafe(0))
		if len(w.recvSeq[0]) != len(w.rposted[0]) {
			t.Fatalf("node0: %d receives posted, %d completed", len(w.rposted[0]), len(w.recvSeq[0]))
		}
	})
}
