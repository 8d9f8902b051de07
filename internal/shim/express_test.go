package shim

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// expressWorld: A and B exchange messages over one QP each (A's sends
// partly inline, B's QP with separate send and receive CQs); A's link is
// cut and it returns once A's runtime diverted A's QP on PORT_ERR (B
// follows on A's notification as the traffic goes on).
func expressWorld(t *testing.T, seed uint64, o l2opts) (*sim.Fabric, []*l2host, *appQP, *appQP) {
	t.Helper()
	f := railFabric(t, seed)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, o), newL2Host(t, f, "node1", 1, c, o)
	// A QP of B's own first, so that the two QPs' numbers differ.
	cq, err := b.ctx.CreateCQ(4, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{split: true})
	if qa.qp.QPN() == qb.qp.QPN() {
		t.Fatal("the two QPs have the same number")
	}
	qa.inline = true
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total, qb.total = 300, 300
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 && len(qb.sendDone) >= 10 })
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A diverted on PORT_ERR", qa.diverted)
	return f, hosts, qa, qb
}

// onLane reports whether q and its CQs are on the Go hot path's lane.
func (q *appQP) onLane() bool {
	return q.x.hp.OnLane(q.qp.QPN(), q.scq, q.rcq)
}

// bothOnLane drives the traffic until qa and qb are on the lane.
func bothOnLane(t *testing.T, f *sim.Fabric, hosts []*l2host, qa, qb *appQP) {
	t.Helper()
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return qa.onLane() && qb.onLane() })
}

// l2 runs fn with q's layer-2 state (nil once forgotten) under the
// failover lock.
func (q *appQP) l2(fn func(*l2qp)) {
	r := q.x.rt
	r.fo.mu.Lock()
	defer r.fo.mu.Unlock()
	fn(r.fo.qps[qpKey{q.x.id, q.qp.QPN()}])
}

func (q *appQP) backupKey(remote bool, key uint32) (k uint32, ok bool) {
	q.l2(func(l *l2qp) { k, ok = l.conn.BackupKey(remote, key) })
	return k, ok
}

func (q *appQP) connState() (sq fsm.SQState) {
	q.l2(func(l *l2qp) { sq, _ = l.conn.State() })
	return sq
}

// logCount counts x's log lines containing every part.
func (x *l2host) logCount(parts ...string) int {
	n := 0
	for _, l := range strings.Split(x.log.String(), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			n++
		}
	}
	return n
}

func qpnAttr(q *appQP) string { return "qpn=" + strconv.FormatUint(uint64(q.qp.QPN()), 10) }

// TestExpressLaneAfterFailover: once both QPs settled on their backups
// and saw their first good completion there, a poll puts each QP and its
// CQs on the lane, with the backup and keys of its Conn. The exchange then
// finishes on the lane (every WR once, in order, with the application's
// QP numbers) without another poll reaching the runtime.
func TestExpressLaneAfterFailover(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 51, l2opts{express: true})
	bothOnLane(t, f, hosts, qa, qb)
	for _, q := range []*appQP{qa, qb} {
		x := q.x.hp.ExpressCounts()
		if len(x.Ons) != 1 || x.OnQPs[0] != q.qp.QPN() {
			t.Fatalf("%s: ExpressOn for QPs %v, want once for %#x", q.x.name, x.OnQPs, q.qp.QPN())
		}
		var want crossnic.Lane
		q.l2(func(l *l2qp) {
			if !l.express || !l.firstGood || !l.conn.Settled() {
				t.Fatalf("%s: on the lane with express %v, first good %v, settled %v", q.x.name, l.express, l.firstGood, l.conn.Settled())
			}
			want = l.conn.Lane()
		})
		q.x.rt.l2mu.Lock()
		bk, _, _ := q.x.rt.shadows[q.x.id].sh.BackupOf(q.qp)
		bakLKey, _ := q.x.rt.shadows[q.x.id].sh.BackupLKey(q.x.mr.LKey())
		q.x.rt.l2mu.Unlock()
		got := x.Ons[0]
		if got.BackupQP != want.Backup.QP || got.BackupQP.QPN() != bk.QPN || got.BackupCQ != want.Backup.CQ ||
			got.BackupRecvCQ != want.Backup.RecvCQ || (got.BackupRecvCQ != nil) != (q.scq != q.rcq) {
			t.Fatalf("%s: lane %+v, backup %+v", q.x.name, got, want.Backup)
		}
		if got.PeerQPN != q.peer.qp.QPN() || !maps.Equal(got.LKeys, want.LKeys) || got.LKeys[q.x.mr.LKey()] != bakLKey {
			t.Fatalf("%s: lane peer %#x, lkeys %v; want %#x and %#x -> %#x", q.x.name, got.PeerQPN, got.LKeys, q.peer.qp.QPN(), q.x.mr.LKey(), bakLKey)
		}
		ncq := map[bool]int{false: 1, true: 2}[q.scq != q.rcq]
		for _, cq := range []verbs.CQ{q.scq, q.rcq} {
			if qs, _ := q.x.hp.LaneCQ(cq); !slices.Equal(qs, []uint32{q.qp.QPN()}) || x.CQSets != ncq {
				t.Fatalf("%s: ExpressCQ %d times, a CQ's lane QPs %v", q.x.name, x.CQSets, qs)
			}
		}
		if s := q.status(); !s.ExpressLane || q.x.logLine("layer 2 express lane", qpnAttr(q)) == "" {
			t.Fatalf("%s: status %+v, log:\n%s", q.x.name, s, q.x.log)
		}
	}
	a, b := hosts[0], hosts[1]
	// The runtime sends the hot path back to the lane.
	if n, err := a.rt.PollCQ(qa.scq, make([]verbs.WC, 4)); n != 0 || !errors.Is(err, ErrExpress) {
		t.Fatalf("PollCQ of a CQ on the lane: %d %v, want ErrExpress", n, err)
	}
	if n, err := a.rt.PostRecv(a.id, qa.qp.QPN(), nil); n != 0 || !errors.Is(err, ErrExpress) {
		t.Fatalf("PostRecv to a QP on the lane: %d %v, want ErrExpress", n, err)
	}
	goA, _, _ := a.hp.Counts()
	goB, _, _ := b.hp.Counts()
	sentA, sentB := qa.sent, qb.sent
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	settled(t, f, a, b)
	if g, _, _ := a.hp.Counts(); g != goA {
		t.Fatalf("A's runtime polled %d times after the lane took over", g-goA)
	}
	if g, _, _ := b.hp.Counts(); g != goB {
		t.Fatalf("B's runtime polled %d times after the lane took over", g-goB)
	}
	for _, q := range []*appQP{qa, qb} {
		st := q.x.hp.LaneStats(q.qp.QPN())
		if len(q.errs) != 0 || st.Surfaced || st.Sends < uint64(q.total-max(sentA, sentB)) || st.Recvs == 0 || st.Completions == 0 {
			t.Fatalf("%s: errors %v, lane stats %+v", q.x.name, q.errs, st)
		}
		eachSignaledOnce(t, q)
		for _, wc := range q.all {
			if wc.Opcode&verbs.WCRecv != 0 && wc.SrcQP != q.peer.qp.QPN() {
				t.Fatalf("%s: receive %+v, want src_qp %#x", q.x.name, wc, q.peer.qp.QPN())
			}
		}
	}
	// The peer's rkey missed once, and the runtime gave the lane its backup.
	want, ok := qa.backupKey(true, b.mr.RKey())
	if got, ok2 := a.hp.LaneKey(qa.qp.QPN(), true, b.mr.RKey()); !ok || !ok2 || got != want {
		t.Fatalf("A's lane translates the peer's rkey to %#x (%v), want %#x (%v)", got, ok2, want, ok)
	}
	if x := a.hp.ExpressCounts(); x.Keys == 0 || x.Surfaces != 0 || x.Reps != 0 || x.Offs != 0 {
		t.Fatalf("A's lane: %+v", x)
	}
}

// TestExpressNotTaken: with IBPATH_EXPRESS=off, or when the hot path
// refuses the lane, a settled QP stays on the Go data path and the
// exchange finishes there.
func TestExpressNotTaken(t *testing.T) {
	for _, c := range []struct {
		name   string
		o      l2opts
		refuse bool
	}{
		{"IBPATH_EXPRESS=off", l2opts{express: true, env: map[string]string{EnvExpress: "off"}}, false},
		{"refused", l2opts{express: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, hosts, qa, qb := expressWorld(t, 52, c.o)
			a := hosts[0]
			if c.refuse {
				for _, x := range hosts {
					x.hp.FailExpressOn(errors.New("injected: no lane"))
				}
			}
			drive(t, f, hosts, 5*time.Microsecond, func() bool { return qa.sent-len(qa.sendDone) <= 2 && qa.connState() == fsm.SQFallback })
			goA, _, _ := a.hp.Counts()
			drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
			settled(t, f, hosts...)
			checkFailedOver(t, qa, `reason="PORT_ERR on mlx5_0 port 1"`)
			checkFailedOver(t, qb, `reason="the peer's fallback notification on the backup QP"`)
			eachSignaledOnce(t, qa)
			for _, x := range hosts {
				// refused once, never asked again
				if n := x.hp.ExpressCounts(); len(n.Ons) != 0 || n.CQSets != 0 || n.Tries != map[bool]int{false: 0, true: 1}[c.refuse] {
					t.Fatalf("%s: the lane was used: %+v", x.name, n)
				}
			}
			if g, _, _ := a.hp.Counts(); g <= goA {
				t.Fatal("A's runtime was not polled after the failover")
			}
			qa.l2(func(l *l2qp) {
				if l.express || !l.firstGood || !l.conn.Settled() || l.noExpress != c.refuse {
					t.Fatalf("express %v, first good %v, settled %v, refused %v", l.express, l.firstGood, l.conn.Settled(), l.noExpress)
				}
			})
			if c.refuse && a.logLine("express lane refused", "injected") == "" {
				t.Fatalf("no refusal in the log:\n%s", a.log)
			}
		})
	}
}

// sharedCQWorld: on f, A's two protected QPs share one CQ (returned),
// B's two have a CQ each; A's first is connected to B's first, its second
// to B's second, and all four are armed. qs: A's two, then B's.
func sharedCQWorld(t *testing.T, f *sim.Fabric, o l2opts) ([]*l2host, verbs.CQ, []*appQP) {
	t.Helper()
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, o), newL2Host(t, f, "node1", 1, c, o)
	shared := a.createCQ(t, 256)
	qs := []*appQP{a.addQP(t, qpOpts{cq: shared}), a.addQP(t, qpOpts{cq: shared}), b.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})}
	connectPair(t, qs[0], qs[2])
	connectPair(t, qs[1], qs[3])
	waitFor(t, "the QPs armed", func() bool { return qs[0].armed() && qs[1].armed() && qs[2].armed() && qs[3].armed() })
	return []*l2host{a, b}, shared, qs
}

// TestExpressSharedCQWithArmedQP: A's two protected QPs share a CQ; only
// the first fails over. Its failover settles, but the CQ also carries the
// armed QP, whose errors the runtime must still intercept: it stays off
// the lane. B's QP, alone on its CQ, goes on it.
func TestExpressSharedCQWithArmedQP(t *testing.T) {
	f := railFabric(t, 53)
	hosts, _, qs := sharedCQWorld(t, f, l2opts{express: true, noWatch: true})
	a, b := hosts[0], hosts[1]
	qa1, qa2, qb1 := qs[0], qs[1], qs[2]
	qa1.total, qa2.total, qb1.total = 60, 60, 60
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa1.sendDone) >= 10 })
	qa1.failNext(t, f)
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return finished(qa1, qa2, qb1)() && qb1.onLane() })
	settled(t, f, a, b)
	checkFailedOver(t, qa1, `reason="completion error`)
	if qa2.diverted() || !qa2.armed() || len(qa2.errs) != 0 {
		t.Fatalf("the QP that did not fail: diverted %v, armed %v, errors %v", qa2.diverted(), qa2.armed(), qa2.errs)
	}
	qa1.l2(func(l *l2qp) {
		if !l.firstGood || !l.conn.Settled() || l.express {
			t.Fatalf("first good %v, settled %v, express %v", l.firstGood, l.conn.Settled(), l.express)
		}
	})
	if x := a.hp.ExpressCounts(); len(x.Ons) != 0 || x.CQSets != 0 {
		t.Fatalf("A's shared CQ went on the lane: %+v", x)
	}
	// The scan that finds the shared CQ cannot go on the lane runs at most
	// every 64th poll of it.
	a.rt.fo.mu.Lock()
	scans := a.rt.fo.laneScans
	a.rt.fo.mu.Unlock()
	polls, _, _ := a.hp.Counts()
	if scans < 1 || scans > polls/64+1 {
		t.Fatalf("%d scans of every QP in %d polls of A's shared CQ, want 1 to %d", scans, polls, polls/64+1)
	}
	if x := b.hp.ExpressCounts(); len(x.Ons) != 1 || x.OnQPs[0] != qb1.qp.QPN() {
		t.Fatalf("B's lane: %+v", x)
	}
}

// TestExpressKeys: a post with a key the lane misses comes to the
// runtime, which adds its backup to the lane and answers ErrExpress (the
// hot path posts again), posting nothing itself; a region registered
// later is added at once; a key with no backup surfaces the QP's error.
func TestExpressKeys(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 54, l2opts{express: true})
	a, b := hosts[0], hosts[1]
	bothOnLane(t, f, hosts, qa, qb)
	qpn := qa.qp.QPN()
	has := func(remote bool, key uint32) {
		t.Helper()
		want, ok := qa.backupKey(remote, key)
		if got, ok2 := a.hp.LaneKey(qpn, remote, key); !ok || !ok2 || got != want {
			t.Fatalf("the lane translates key %#x (remote %v) to %#x (%v), want %#x (%v)", key, remote, got, ok2, want, ok)
		}
	}
	a.hp.DropLaneKey(qpn, true, b.mr.RKey())
	a.hp.DropLaneKey(qpn, false, a.mr.LKey())
	keys := a.hp.ExpressCounts().Keys
	if n, err := a.rt.PostSend(a.id, qpn, qa.round(qa.sent)); n != 0 || !errors.Is(err, ErrExpress) {
		t.Fatalf("post missing keys: %d %v, want 0 and ErrExpress", n, err)
	}
	has(true, b.mr.RKey())
	has(false, a.mr.LKey())
	if k := a.hp.ExpressCounts().Keys; k < keys+2 {
		t.Fatalf("%d ExpressKey calls for two missing keys", k-keys)
	}
	a.hp.DropLaneKey(qpn, false, a.mr.LKey())
	addr, _ := qa.slot(1, 0)
	if n, err := a.rt.PostRecv(a.id, qpn, []verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{{Addr: addr, Length: 8, LKey: a.mr.LKey()}}}}); n != 0 || !errors.Is(err, ErrExpress) {
		t.Fatalf("receive missing its lkey: %d %v", n, err)
	}
	has(false, a.mr.LKey())

	// Through the hot path: the miss costs one trip to the runtime.
	a.hp.DropLaneKey(qpn, true, b.mr.RKey())
	misses := a.hp.LaneStats(qpn).Misses
	qa.total, qb.total = qa.sent+4, qb.sent
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	if m := a.hp.LaneStats(qpn).Misses; m != misses+1 || len(qa.errs) != 0 {
		t.Fatalf("%d misses for one missing rkey; errors %v", m-misses, qa.errs)
	}

	// Keys the lane does not translate are not looked up: a zero-length
	// WRITE's rkey, an inline SGE's lkey.
	bad := b.mr.RKey() ^ 0x5a5a00
	if _, ok := qa.backupKey(true, bad); ok {
		t.Fatal("the made-up rkey has a backup")
	}
	if _, ok := qa.backupKey(false, bad); ok {
		t.Fatal("the made-up lkey has a backup")
	}
	paddr, _ := qb.slot(2, 0)
	for _, w := range []verbs.SendWR{
		{WRID: 7, Opcode: verbs.WRRDMAWrite, RemoteAddr: paddr, RKey: bad},
		{WRID: 8, Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: []verbs.SGE{{Addr: addr, Length: 8, LKey: bad}}},
	} {
		if n, err := a.rt.PostSend(a.id, qpn, []verbs.SendWR{w}); n != 0 || !errors.Is(err, ErrExpress) || qa.connState() != fsm.SQFallback {
			t.Fatalf("post of %+v: %d %v, Conn %v", w, n, err, qa.connState())
		}
	}

	buf := make([]byte, 4096)
	mr, err := a.pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	a.rt.MR(a.id, a.pd, mr, buf)
	has(false, mr.LKey())

	w := qa.round(qa.sent)[0]
	w.RKey = bad
	if n, err := a.rt.PostSend(a.id, qpn, []verbs.SendWR{w}); n != 0 || !errors.Is(err, ErrExpress) {
		t.Fatalf("post with an rkey without backup: %d %v", n, err)
	}
	s := qa.status()
	if qa.connState() != fsm.SQSurfaced || s.Layer != status.LayerNone || !strings.Contains(s.Reason, "no backup for the peer's rkey") {
		t.Fatalf("Conn %v, status %+v", qa.connState(), s)
	}
	if x, st := a.hp.ExpressCounts(), a.hp.LaneStats(qpn); x.Surfaces != 1 || !st.Surfaced || x.Reps != 0 {
		t.Fatalf("lane %+v, stats %+v", x, st)
	}
	if a.logCount("layer 2 failover failed", qpnAttr(qa)) != 1 {
		t.Fatalf("no single surfacing line in the log:\n%s", a.log)
	}
}

// TestExpressSurfaced: the backup path fails too (B's backup link goes
// down). A's lane hands the error completion to the application with
// the QP's number and reports it once; the runtime surfaces the Conn
// once, however often it is told; every signaled WR completes once.
func TestExpressSurfaced(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 55, l2opts{express: true})
	a := hosts[0]
	bothOnLane(t, f, hosts, qa, qb)
	if err := f.SetLink(f.Host("node1").HCA("mlx5_1").Port(1), false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 20*time.Microsecond, func() bool { return len(qa.errs) > 0 })
	settled(t, f, hosts...)
	qpn := qa.qp.QPN()
	if e := qa.errs[0]; e.Status != verbs.WCRetryExcErr || e.QPNum != qpn {
		t.Fatalf("first error %+v, want the retry error with the QP's number", e)
	}
	eachSignaledOnce(t, qa)
	if x := a.hp.ExpressCounts(); x.Reps != 1 || x.Surfaces != 0 {
		t.Fatalf("lane %+v: want one report and no ExpressSurface", x)
	}
	check := func() {
		t.Helper()
		s := qa.status()
		if qa.connState() != fsm.SQSurfaced || s.Layer != status.LayerNone ||
			s.Reason != "layer 2: the backup path failed too: "+verbs.WCRetryExcErr.String() {
			t.Fatalf("Conn %v, status %+v", qa.connState(), s)
		}
		if n := a.logCount("layer 2 failover failed", qpnAttr(qa)); n != 1 {
			t.Fatalf("%d surfacing lines in the log:\n%s", n, a.log)
		}
	}
	check()
	if a.logLine("express lane surfaced", qpnAttr(qa)) == "" {
		t.Fatalf("no lane surfacing line in the log:\n%s", a.log)
	}
	a.rt.ExpressSurfaced(a.id, qpn, verbs.WC{WRID: 1, Status: verbs.WCWRFlushErr, QPNum: qpn})
	check()
}

// TestExpressDestroy: destroying a QP on the lane takes it off (before its
// backup goes), empties its CQ's lane and gives the CQ back to the hot
// path.
func TestExpressDestroy(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 56, l2opts{express: true})
	a := hosts[0]
	bothOnLane(t, f, hosts, qa, qb)
	qpn, cq := qa.qp.QPN(), qa.scq
	qa.destroy(t)
	if x := a.hp.ExpressCounts(); x.Offs != 1 {
		t.Fatalf("ExpressOff %d times", x.Offs)
	}
	if qs, ok := a.hp.LaneCQ(cq); !ok || len(qs) != 0 {
		t.Fatalf("the CQ's lane QPs %v (%v), want none", qs, ok)
	}
	if _, _, rel := a.hp.Counts(); !slices.Equal(rel, []verbs.CQ{cq}) {
		t.Fatalf("released %v, want the QP's CQ", rel)
	}
	a.rt.l2mu.Lock()
	_, _, kept := a.rt.shadows[a.id].sh.BackupOf(qa.qp)
	onLane := len(a.rt.shadows[a.id].express)
	a.rt.l2mu.Unlock()
	if kept || onLane != 0 {
		t.Fatalf("backup kept %v, %d QPs on the lane", kept, onLane)
	}
	goPolls, _, _ := a.hp.Counts()
	if n, err := a.hp.PollCQ(cq, make([]verbs.WC, 4)); err != nil || n != 0 {
		t.Fatalf("poll of the given-back CQ: %d %v", n, err)
	}
	if g, _, _ := a.hp.Counts(); g != goPolls {
		t.Fatal("the given-back CQ was polled by the runtime")
	}
	if _, err := a.rt.PostSend(a.id, qpn, qa.round(0)); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("post to the destroyed QP: %v", err)
	}
}

// TestExpressLaneCQNotArmed: a QP made on a CQ already on the lane is not
// armed when its backup connects (its failover would need the Go data
// path on that CQ again), and says so; its traffic passes through the
// lane's polls of the CQ, retired in the hot path's rings.
func TestExpressLaneCQNotArmed(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 57, l2opts{express: true})
	a, b := hosts[0], hosts[1]
	bothOnLane(t, f, hosts, qa, qb)
	if err := f.SetLink(a.port, true); err != nil { // the new QP's path works
		t.Fatal(err)
	}
	qa2, qb2 := a.addQP(t, qpOpts{cq: qa.scq}), b.addQP(t, qpOpts{})
	connectPair(t, qa2, qb2)
	waitFor(t, "B's new QP armed", qb2.armed)
	waitFor(t, "A's new QP refused", func() bool { return strings.Contains(qa2.status().Reason, "express lane") })
	if qa2.armed() || a.logLine("does not arm a QP whose CQ is on the express lane", qpnAttr(qa2)) == "" {
		t.Fatalf("armed %v; log:\n%s", qa2.armed(), a.log)
	}
	goPolls, _, _ := a.hp.Counts()
	qa.total, qb.total = qa.sent, qb.sent
	qa2.total, qb2.total = 30, 30
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb, qa2, qb2))
	settled(t, f, a, b)
	if g, _, _ := a.hp.Counts(); g != goPolls || len(qa2.errs) != 0 {
		t.Fatalf("%d polls by the runtime; errors %v", g-goPolls, qa2.errs)
	}
	if _, _, sends, _ := a.hp.State(qa2.fq); sends != 0 {
		t.Fatalf("%d of the new QP's sends never retired in the hot path's rings", sends)
	}
}

// TestExpressLateBackupEvent: an event of a backup CQ read just before
// the QP went on the lane is handled after it: the runtime must leave
// the backup CQ to the lane (the completions are the lane's to deliver).
func TestExpressLateBackupEvent(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 58, l2opts{express: true})
	a := hosts[0]
	bothOnLane(t, f, hosts, qa, qb)
	qa.total, qb.total = qa.sent, qb.sent
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	qa.total++
	qa.sendNext(t)
	f.RunFor(50 * time.Microsecond)
	a.rt.l2mu.Lock()
	s := a.rt.shadows[a.id]
	a.rt.l2mu.Unlock()
	a.rt.onBackupEvent(s, qa.qp, time.Now())
	for i := 0; i < 50 && !finished(qa, qb)(); i++ {
		trafficStep(t, hosts)
		f.RunFor(5 * time.Microsecond)
	}
	if !finished(qa, qb)() {
		t.Fatalf("the last message's completions were lost: %s", progress(hosts))
	}
}

// TestExpressUnreplayableSurfaces: a QP on the lane is given a LOCAL_INV
// (which names a key of the default device): the lane hands it to the
// runtime, which surfaces the QP with that reason; the WR goes to the
// default QP, as after any surfacing, and never to the backup.
func TestExpressUnreplayableSurfaces(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 53, l2opts{express: true})
	bothOnLane(t, f, hosts, qa, qb)
	sends := qa.x.hp.LaneStats(qa.qp.QPN()).Sends
	_, _ = qa.x.hp.PostSend(qa.fq, []verbs.SendWR{{WRID: 99, Opcode: verbs.WRLocalInv, SendFlags: verbs.SendSignaled}})
	if sq := qa.connState(); sq != fsm.SQSurfaced {
		t.Fatalf("A's Conn is %v after a LOCAL_INV on the lane, want surfaced", sq)
	}
	var reason string
	qa.l2(func(l *l2qp) { reason = l.conn.Reason() })
	if !strings.Contains(reason, "WR 99 is a LOCAL_INV") {
		t.Fatalf("reason %q", reason)
	}
	after := qa.x.hp.LaneStats(qa.qp.QPN()).Sends
	if after != sends {
		t.Fatalf("the lane posted %d WRs on the backup, want none (the LOCAL_INV)", after-sends)
	}
}
