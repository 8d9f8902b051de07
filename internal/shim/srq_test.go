package shim

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

const (
	srqPoolOff = l2QPs * 3 * l2Slots * l2Slot // the SRQ's receive buffers in a host's region
	l2SRQBufs  = 48                           // buffers in that pool
	l2SRQRecvs = 24                           // receives the application keeps posted on its SRQ
	srqWRID    = 5000                         // wr_id of the receive into pool buffer b: srqWRID+b
)

// withSRQ gives x an SRQ that layer 2 follows, as the interposed
// ibv_create_srq does.
func (x *l2host) withSRQ(t *testing.T) {
	t.Helper()
	srq, err := x.pd.(verbs.SRQCreator).CreateSRQ(verbs.SRQAttr{MaxWR: 64, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !x.rt.SRQCreated(x.id, x.pd, srq) {
		t.Fatal("layer 2 does not follow the SRQ")
	}
	x.srq, x.fsrq, x.srqPosted = srq, x.hp.AddSRQ(srq), map[uint64]bool{}
	for b := range l2SRQBufs {
		x.srqFree = append(x.srqFree, b)
	}
}

// srqBuf is pool buffer b.
func (x *l2host) srqBuf(b int) (uint64, []byte) {
	o := srqPoolOff + b*l2Slot
	return x.mr.Addr() + uint64(o), x.buf[o : o+l2Slot]
}

// fillSRQ keeps l2SRQRecvs receives posted on the SRQ.
func (x *l2host) fillSRQ(t *testing.T) {
	t.Helper()
	for len(x.srqPosted) < l2SRQRecvs && len(x.srqFree) > 0 {
		b := x.srqFree[0]
		x.srqFree = x.srqFree[1:]
		addr, _ := x.srqBuf(b)
		id := uint64(srqWRID + b)
		if _, err := x.hp.PostSRQRecv(x.fsrq, []verbs.RecvWR{{WRID: id, SGList: []verbs.SGE{{Addr: addr, Length: l2Slot, LKey: x.mr.LKey()}}}}); err != nil {
			t.Fatalf("%s: post SRQ receive %d: %v", x.name, id, err)
		}
		x.srqPosted[id] = true
	}
}

// onSRQRecv checks a receive of q through the SRQ: into a receive posted
// and not completed yet, the QP's next message, with its data; the
// buffer is free again.
func (x *l2host) onSRQRecv(t *testing.T, q *appQP, wc verbs.WC) {
	t.Helper()
	k := len(q.recvd)
	if !x.srqPosted[wc.WRID] {
		t.Fatalf("%s QP %d: receive %d completed, but it is not posted (a receive used twice)", x.name, q.idx, wc.WRID)
	}
	delete(x.srqPosted, wc.WRID)
	b := int(wc.WRID - srqWRID)
	_, got := x.srqBuf(b)
	_, wrote := q.slot(shimtest.RegionWrite, k)
	if err := shimtest.CheckMessage(k, wc, got, wrote, shimtest.Pattern(q.peer.x.side, q.peer.idx, k)); err != nil {
		t.Fatalf("%s QP %d: %v: %+v", x.name, q.idx, err, wc)
	}
	q.recvd = append(q.recvd, wc.ImmData)
	x.srqFree = append(x.srqFree, b)
}

// srqWorld: node1's QPs receive through one SRQ, node0's through their
// own queues; each pair sends total messages both ways.
func srqWorld(t *testing.T, seed uint64, qps, total int, o l2opts) (f *sim.Fabric, a, b *l2host, as, bs []*appQP) {
	t.Helper()
	f = railFabric(t, seed)
	c := shimtest.NewCluster()
	a = newL2Host(t, f, "node0", 0, c, o)
	b = newL2Host(t, f, "node1", 1, c, o)
	b.withSRQ(t)
	for range qps {
		qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{srq: true})
		connectPair(t, qa, qb)
		qa.total, qb.total = total, total
		as, bs = append(as, qa), append(bs, qb)
	}
	for _, q := range append(append([]*appQP{}, as...), bs...) {
		waitFor(t, "armed", q.armed)
	}
	return f, a, b, as, bs
}

// checkSRQFailedOver: every QP of the SRQ runs on the backup, carried by
// layer 2, failed over once, and finished its exchange without an error.
func checkSRQFailedOver(t *testing.T, b *l2host, bs []*appQP) {
	t.Helper()
	for _, q := range bs {
		s := q.status()
		if !q.diverted() || len(q.errs) != 0 || s.Layer != status.LayerCrossNIC || s.CrossNIC != fsm.SQFallback.String() || s.Failovers != 1 {
			t.Errorf("%s QP %d: diverted %v, errors %v, status %+v; want layer 2 on the backup", b.name, q.idx, q.diverted(), q.errs, s)
		}
	}
	if l := b.logLine("layer 2 diverted the QPs of an SRQ", "qps="+strconv.Itoa(len(bs))); l == "" {
		t.Errorf("%s: no log line for the SRQ's move:\n%s", b.name, b.log)
	}
	// every receive the application posted and did not see complete is
	// the group's, and on the backup SRQ (the group's control receive
	// was consumed by the first control message)
	b.rt.fo.mu.Lock()
	g := b.rt.fo.srqs[b.srq]
	n := -1
	if g != nil && g.group != nil {
		n = g.group.Outstanding()
	}
	b.rt.fo.mu.Unlock()
	b.rt.l2mu.Lock()
	bak, _ := b.rt.shadows[b.id].sh.BackupSRQ(b.srq)
	b.rt.l2mu.Unlock()
	if n != len(b.srqPosted) || bak.(*sim.SRQ).Outstanding() != len(b.srqPosted) {
		t.Errorf("%s: the application has %d SRQ receives outstanding, layer 2 %d, the backup SRQ %d", b.name, len(b.srqPosted), n, bak.(*sim.SRQ).Outstanding())
	}
}

// allFinished: every QP's exchange is done both ways.
func allFinished(qps []*appQP) func() bool {
	return finished(qps...)
}

// TestFailoverSRQ: a link goes down. On the SRQ side ("SRQ side's
// port"), its runtime diverts every QP on the SRQ with the SRQ's
// receives; on the other side ("peer's port"), the peer's notification
// reaches one QP of the SRQ on its backup and the SRQ side moves every
// QP on it. Either way each QP fails over, and each QP's messages arrive
// once, in order, each into a receive posted and not completed yet.
func TestFailoverSRQ(t *testing.T) {
	for _, c := range []struct {
		name       string
		seed       uint64
		qps, total int
		srqSide    bool // the link cut is the SRQ side's
	}{
		{"SRQ side's port", 41, 3, 60, true},
		{"peer's port", 42, 2, 50, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, a, b, as, bs := srqWorld(t, c.seed, c.qps, c.total, l2opts{})
			hosts := []*l2host{a, b}
			drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(bs[c.qps-1].recvd) >= 10 && len(as[0].recvd) >= 10 })
			cut := a.port
			if c.srqSide {
				cut = b.port
			}
			if err := f.SetLink(cut, false); err != nil {
				t.Fatal(err)
			}
			drive(t, f, hosts, 5*time.Microsecond, allFinished(append(append([]*appQP{}, as...), bs...)))
			settled(t, f, hosts...)
			checkSRQFailedOver(t, b, bs)
		})
	}
}

// TestFailoverSRQNotReady: one QP on the SRQ has no backup: the SRQ
// cannot move, and the QP that fails surfaces its error as plain verbs
// report it; the other QPs carry on on the default device.
func TestFailoverSRQNotReady(t *testing.T) {
	f := railFabric(t, 43)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{noWatch: true}), newL2Host(t, f, "node1", 1, c, l2opts{noWatch: true})
	b.withSRQ(t)
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{srq: true})
	connectPair(t, qa, qb)
	ra, rb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{srq: true})
	connectPair(t, ra, rb)
	lone := b.addQP(t, qpOpts{srq: true}) // never connected: no backup
	waitFor(t, "armed", func() bool { return qa.armed() && qb.armed() && ra.armed() && rb.armed() })
	if lone.armed() {
		t.Fatal("a QP without a backup is armed")
	}
	qb.total, rb.total = 30, 30
	hosts := []*l2host{a, b}
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qb.sendDone) >= 5 })
	qb.failNext(t, f)
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qb.errs) > 0 && len(rb.sendDone) == rb.total })
	if s := qb.status(); s.Layer != status.LayerNone || !strings.Contains(s.Reason, "the SRQ cannot move") {
		t.Fatalf("the failed QP's status %+v, want its error surfaced because the SRQ cannot move", s)
	}
	if rb.diverted() || len(rb.errs) != 0 {
		t.Fatalf("the other QP: diverted %v, errors %v; want it untouched", rb.diverted(), rb.errs)
	}
	if qb.errs[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("first error %v, want RETRY_EXC_ERR as plain verbs report it", qb.errs[0].Status)
	}
}

// TestFailoverSRQStaysOffLane: with the express lane on, the QPs of an
// SRQ stay on the Go data path after their failover (the lane would
// complete the group's receives behind its back, and the group, which
// retires each by its completion, would fill up): a long exchange after
// the failover runs to its end with every receive accounted for.
func TestFailoverSRQStaysOffLane(t *testing.T) {
	f, a, b, as, bs := srqWorld(t, 44, 2, 300, l2opts{express: true})
	hosts := []*l2host{a, b}
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(bs[0].recvd) >= 10 })
	if err := f.SetLink(b.port, false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 5*time.Microsecond, allFinished(append(append([]*appQP{}, as...), bs...)))
	settled(t, f, hosts...)
	checkSRQFailedOver(t, b, bs)
	b.rt.fo.mu.Lock()
	for _, q := range bs {
		if l2 := b.rt.fo.qps[qpKey{b.id, q.qp.QPN()}]; l2 == nil || l2.express {
			t.Errorf("QP %d of the SRQ went on the express lane", q.idx)
		}
	}
	b.rt.fo.mu.Unlock()
}
