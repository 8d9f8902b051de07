package sim_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// srqPair is two RC connections from node0 to node1 whose node1 ends
// receive through one SRQ: a[i] talks to b[i].
type srqPair struct {
	c   *conn
	srq verbs.SRQ
	a   [2]*end
	b   [2]*end
}

func newSRQPair(t *testing.T, o connOpts, srqWR int) *srqPair {
	t.Helper()
	o = defaults(o)
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	p := &srqPair{c: &conn{f: f}}
	b0 := openEnd(t, f.Host("node1"), o)
	must(t, b0.qp.Destroy())
	p.srq, err = b0.pd.(verbs.SRQCreator).CreateSRQ(verbs.SRQAttr{MaxWR: srqWR, MaxSGE: 2})
	must(t, err)
	for i := range p.b {
		e := *b0
		e.qp, err = b0.pd.CreateQP(verbs.QPInitAttr{SendCQ: b0.cq, RecvCQ: b0.cq, QPType: verbs.QPTRC, SRQ: p.srq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
		must(t, err)
		p.b[i] = &e
		p.a[i] = openEnd(t, f.Host("node0"), o)
		connectRC(t, p.a[i], p.b[i], o)
		connectRC(t, p.b[i], p.a[i], o)
	}
	p.c.a, p.c.b = p.a[0], p.b[0]
	return p
}

func (p *srqPair) postSRQ(t *testing.T, wrid uint64, off, n int) {
	t.Helper()
	b := p.b[0]
	if _, err := p.srq.PostRecv([]verbs.RecvWR{{WRID: wrid, SGList: []verbs.SGE{b.sge(off, n)}}}); err != nil {
		t.Fatalf("post_srq_recv: %v", err)
	}
}

func send(wrid uint64, local verbs.SGE) verbs.SendWR {
	return verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{local}}
}

// Receives posted to an SRQ are consumed in the order posted, whichever of
// its QPs a message arrives on; each completion names the QP (rule 98).
func TestSRQConsumedInOrderAcrossQPs(t *testing.T) {
	p := newSRQPair(t, connOpts{}, 8)
	for i := range 4 {
		p.postSRQ(t, uint64(10+i), i*256, 256)
	}
	order := []int{1, 0, 1, 0}
	for k, i := range order {
		a := p.a[i]
		copy(a.buf[k*16:], []byte{byte(0xa0 + k), byte(i)})
		a.post(t, send(uint64(k), a.sge(k*16, 2)))
		p.c.run(100 * time.Microsecond)
	}
	got := p.b[0].poll(t)
	if len(got) != 4 {
		t.Fatalf("%d receive completions, want 4: %+v", len(got), got)
	}
	for k, w := range got {
		i := order[k]
		if w.Status != verbs.WCSuccess || w.WRID != uint64(10+k) || w.QPNum != p.b[i].qp.QPN() || w.ByteLen != 2 {
			t.Errorf("completion %d: %+v, want wr_id %d on qp %#x", k, w, 10+k, p.b[i].qp.QPN())
		}
		if b := p.b[0].buf[k*256:]; b[0] != byte(0xa0+k) || b[1] != byte(i) {
			t.Errorf("receive %d holds %x, want the message sent %d-th", k, b[:2], k)
		}
	}
	if _, err := p.b[0].qp.PostRecv([]verbs.RecvWR{{WRID: 1}}); !errors.Is(err, verbs.EINVAL) {
		t.Errorf("post_recv on a QP of an SRQ: %v, want EINVAL", err)
	}
	_, init, err := p.b[1].qp.Query(0)
	must(t, err)
	if init.SRQ != p.srq || init.Cap.MaxRecvWR != 0 {
		t.Errorf("query_qp: srq %v cap %+v, want the SRQ and no receive queue", init.SRQ, init.Cap)
	}
}

// An empty SRQ answers with an RNR NAK; a receive posted within the
// requester's RNR retries takes the message (rule 99).
func TestSRQEmptyIsRNR(t *testing.T) {
	p := newSRQPair(t, connOpts{}, 4)
	a := p.a[1]
	a.post(t, send(7, a.sge(0, 8)))
	p.c.run(50 * time.Microsecond)
	if got := p.b[0].poll(t); len(got) != 0 {
		t.Fatalf("completions before any receive: %+v", got)
	}
	p.postSRQ(t, 3, 0, 64)
	p.c.run(5 * time.Millisecond)
	got := p.b[0].poll(t)
	if len(got) != 1 || got[0].WRID != 3 || got[0].Status != verbs.WCSuccess {
		t.Fatalf("after the post: %+v, want wr_id 3 received", got)
	}
	if s := statuses(a.poll(t)); !slices.Equal(s, []verbs.WCStatus{verbs.WCSuccess}) {
		t.Fatalf("sender: %v, want one success after the RNR wait", s)
	}
}

// The armed limit raises SRQ_LIMIT_REACHED once when fewer WRs than the
// limit are left, then reads 0 until armed again (rule 100).
func TestSRQLimitEventFiresOnce(t *testing.T) {
	p := newSRQPair(t, connOpts{}, 8)
	for i := range 4 {
		p.postSRQ(t, uint64(i), i*64, 64)
	}
	must(t, p.srq.Modify(verbs.SRQAttr{Limit: 3}, verbs.SRQAttrLimit))
	a := p.a[0]
	a.post(t, send(1, a.sge(0, 4)))
	p.c.run(100 * time.Microsecond)
	if ev := p.b[0].events(); len(ev) != 0 {
		t.Fatalf("events with 3 of limit 3 left: %v", ev)
	}
	a.post(t, send(2, a.sge(0, 4)), send(3, a.sge(0, 4)))
	p.c.run(100 * time.Microsecond)
	ev, err := p.b[0].ctx.GetAsyncEvent()
	must(t, err)
	if ev.Type != verbs.EventSRQLimitReached || ev.SRQ != p.srq {
		t.Fatalf("event %v on %v, want SRQ_LIMIT_REACHED on the SRQ", ev.Type, ev.SRQ)
	}
	if err := p.srq.Destroy(); !errors.Is(err, verbs.EBUSY) {
		t.Errorf("destroy with an unacknowledged event: %v, want EBUSY", err)
	}
	p.b[0].ctx.AckAsyncEvent(ev)
	if more := p.b[0].events(); len(more) != 0 {
		t.Errorf("second event: %v, want one only", more)
	}
	attr, err := p.srq.Query()
	must(t, err)
	if attr.Limit != 0 || attr.MaxWR != 8 {
		t.Errorf("query after the event: %+v, want limit 0 (disarmed), max_wr 8", attr)
	}
}

// A QP of an SRQ that goes to ERR flushes none of the SRQ's WRs (its
// other QPs still consume them) and raises QP_LAST_WQE_REACHED (rule 101).
func TestSRQQPErrorKeepsWQEs(t *testing.T) {
	p := newSRQPair(t, connOpts{}, 8)
	for i := range 3 {
		p.postSRQ(t, uint64(i), i*64, 64)
	}
	must(t, p.b[0].qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState))
	p.c.run(10 * time.Microsecond)
	if got := p.b[0].poll(t); len(got) != 0 {
		t.Fatalf("completions after a QP of the SRQ went to ERR: %+v", got)
	}
	if ev := p.b[0].events(); !slices.Equal(ev, []verbs.EventType{verbs.EventQPLastWQEReached}) {
		t.Fatalf("events %v, want QP_LAST_WQE_REACHED", ev)
	}
	if n := p.srq.(*sim.SRQ).Outstanding(); n != 3 {
		t.Fatalf("%d WRs left on the SRQ, want 3", n)
	}
	a := p.a[1]
	a.post(t, send(1, a.sge(0, 4)))
	p.c.run(100 * time.Microsecond)
	got := p.b[0].poll(t)
	if len(got) != 1 || got[0].WRID != 0 || got[0].QPNum != p.b[1].qp.QPN() {
		t.Fatalf("the other QP's message: %+v, want wr_id 0 on qp %#x", got, p.b[1].qp.QPN())
	}
}

// The SRQ verbs refuse what mlx5 and rxe refuse (rule 102).
func TestSRQVerbErrors(t *testing.T) {
	p := newSRQPair(t, connOpts{}, 4)
	pd := p.b[0].pd
	sc := pd.(verbs.SRQCreator)
	for _, a := range []verbs.SRQAttr{{MaxWR: 0}, {MaxWR: 1 << 20}, {MaxWR: 4, MaxSGE: 64}, {MaxWR: 4, Limit: 4}} {
		if _, err := sc.CreateSRQ(a); !errors.Is(err, verbs.EINVAL) {
			t.Errorf("create_srq %+v: %v, want EINVAL", a, err)
		}
	}
	if err := p.srq.Modify(verbs.SRQAttr{MaxWR: 16}, verbs.SRQAttrMaxWR); !errors.Is(err, verbs.EINVAL) {
		t.Errorf("resize: %v, want EINVAL (mlx5)", err)
	}
	if err := p.srq.Modify(verbs.SRQAttr{Limit: 4}, verbs.SRQAttrLimit); !errors.Is(err, verbs.EINVAL) {
		t.Errorf("limit 4 of 4: %v, want EINVAL", err)
	}
	b := p.b[0]
	three := []verbs.SGE{b.sge(0, 1), b.sge(1, 1), b.sge(2, 1)}
	if n, err := p.srq.PostRecv([]verbs.RecvWR{{WRID: 1}, {WRID: 2, SGList: three}}); n != 1 || !errors.Is(err, verbs.EINVAL) {
		t.Errorf("post of 3 SGEs on max_sge 2: %d, %v, want 1 posted and EINVAL", n, err)
	}
	if n, err := p.srq.PostRecv(make([]verbs.RecvWR, 4)); n != 3 || !errors.Is(err, verbs.ENOMEM) {
		t.Errorf("post beyond max_wr: %d, %v, want 3 posted and ENOMEM", n, err)
	}
	if err := p.srq.Destroy(); !errors.Is(err, verbs.EBUSY) {
		t.Errorf("destroy with QPs on it: %v, want EBUSY", err)
	}
	other := p.a[0]
	if _, err := other.pd.CreateQP(verbs.QPInitAttr{SendCQ: other.cq, RecvCQ: other.cq, QPType: verbs.QPTRC, SRQ: p.srq}); !errors.Is(err, verbs.EINVAL) {
		t.Errorf("QP on an SRQ of another device: %v, want EINVAL", err)
	}
	for _, e := range p.b {
		must(t, e.qp.Destroy())
	}
	if err := pd.Dealloc(); !errors.Is(err, verbs.EBUSY) {
		t.Errorf("dealloc_pd with an SRQ: %v, want EBUSY", err)
	}
	must(t, p.srq.Destroy())
	if _, err := p.srq.PostRecv([]verbs.RecvWR{{WRID: 1}}); !errors.Is(err, verbs.EINVAL) {
		t.Errorf("post on a destroyed SRQ: %v, want EINVAL", err)
	}
}
