package shim

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/verbs"
)

// sendLog records the ibv_post_send calls made on the QPs of one device.
type sendLog struct {
	mu    sync.Mutex
	calls []sentCall
}

type sentCall struct {
	qpn  uint32
	n    int
	ctrl bool // its first WR is one of layer 2's own
}

func (l *sendLog) add(c sentCall) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

func (l *sendLog) snapshot() []sentCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sentCall(nil), l.calls...)
}

// watchedProvider opens dev with its QPs' posts logged and its completion
// channels gated: while gate is false they report nothing pending, so
// the events of several CQs pile up and are read together once it opens.
type watchedProvider struct {
	verbs.Provider
	dev  string
	log  *sendLog
	gate *gate
}

func (p watchedProvider) Open(name string) (verbs.Context, error) {
	c, err := p.Provider.Open(name)
	if err != nil || name != p.dev {
		return c, err
	}
	return watchedCtx{c, p.log, p.gate}, nil
}

type watchedCtx struct {
	verbs.Context
	log  *sendLog
	gate *gate
}

func (c watchedCtx) AllocPD() (verbs.PD, error) {
	pd, err := c.Context.AllocPD()
	if err != nil {
		return nil, err
	}
	return watchedPD{pd, c.log}, nil
}

func (c watchedCtx) CreateCompChannel() (verbs.CompChannel, error) {
	ch, err := c.Context.CreateCompChannel()
	if err != nil {
		return nil, err
	}
	return gatedChannel{ch, c.gate}, nil
}

func (c watchedCtx) CreateCQ(n int, ch verbs.CompChannel, vec int) (verbs.CQ, error) {
	if g, ok := ch.(gatedChannel); ok {
		ch = g.CompChannel
	}
	return c.Context.CreateCQ(n, ch, vec)
}

type gatedChannel struct {
	verbs.CompChannel
	g *gate
}

// gate holds a channel's events while closed. Once open, with hiccup
// set, the read after the first event finds nothing pending (as if the
// next had not arrived yet), and the reads after that find the rest.
type gate struct {
	open, hiccup atomic.Bool
	served       atomic.Int32
}

func (g gatedChannel) GetCQEvent() (verbs.CQ, error) {
	if !g.g.open.Load() {
		return nil, verbs.Errorf("ibv_get_cq_event", verbs.EAGAIN, "gated by the test")
	}
	if g.g.hiccup.Load() && g.g.served.Load() == 1 {
		g.g.hiccup.Store(false)
		return nil, verbs.Errorf("ibv_get_cq_event", verbs.EAGAIN, "the next event is late (the test)")
	}
	cq, err := g.CompChannel.GetCQEvent()
	if err == nil {
		g.g.served.Add(1)
	}
	return cq, err
}

type watchedPD struct {
	verbs.PD
	log *sendLog
}

func (p watchedPD) CreateQP(init verbs.QPInitAttr) (verbs.QP, error) {
	qp, err := p.PD.CreateQP(init)
	if err != nil {
		return nil, err
	}
	return watchedQP{qp, p.log}, nil
}

type watchedQP struct {
	verbs.QP
	log *sendLog
}

func (q watchedQP) PostSend(wrs []verbs.SendWR) (int, error) {
	if len(wrs) > 0 {
		q.log.add(sentCall{qpn: q.QPN(), n: len(wrs), ctrl: wrs[0].WRID >= ^uint64(0)-4})
	}
	return q.QP.PostSend(wrs)
}

// TestNotificationsAnsweredBeforeReplays: A's cable is pulled under two
// QPs that carry B's traffic; A fails both over and notifies B on both
// backups. B's runtime answers both before it replays either QP's
// outstanding sends: a peer never waits for the replay of another QP
// (which, on rdma_rxe in the lab, took the CPU the answers needed, up to
// seconds for the last of 4 QPs). It does when it reads the two
// notifications together, and when the second comes only while it
// answers the first (it reads its channel again before the replays).
func TestNotificationsAnsweredBeforeReplays(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := "together"
		if late {
			name = "second late"
		}
		t.Run(name, func(t *testing.T) { answeredBeforeReplays(t, late) })
	}
}

func answeredBeforeReplays(t *testing.T, late bool) {
	f := railFabric(t, 41)
	c := shimtest.NewCluster()
	log, gate := &sendLog{}, &gate{}
	gate.open.Store(true)
	a := newL2Host(t, f, "node0", 0, c, l2opts{})
	b := newL2Host(t, f, "node1", 1, c, l2opts{wrapProv: func(p verbs.Provider) verbs.Provider {
		return watchedProvider{p, "mlx5_1", log, gate}
	}})
	var qa, qb [2]*appQP
	for i := range qa {
		qa[i], qb[i] = a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
		connectPair(t, qb[i], qa[i])
	}
	waitFor(t, "every QP armed", func() bool { return qa[0].armed() && qa[1].armed() && qb[0].armed() && qb[1].armed() })
	hosts := []*l2host{a, b}
	for i := range qb {
		qb[i].total = 60
	}
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qb[0].sendDone) >= 10 && len(qb[1].sendDone) >= 10 })
	gate.open.Store(false) // B's backup events wait from here
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A diverted both QPs on PORT_ERR", func() bool { return qa[0].diverted() && qa[1].diverted() })
	postStep(t, hosts)               // B keeps sends outstanding, which its failover replays
	f.RunFor(100 * time.Microsecond) // A's notifications reach B's backup QPs
	start := len(log.snapshot())
	gate.served.Store(0)
	gate.hiccup.Store(late)
	gate.open.Store(true)
	waitFor(t, "B diverted both QPs on A's notifications", func() bool { return qb[0].diverted() && qb[1].diverted() })
	drive(t, f, hosts, 5*time.Microsecond, finished(qb[0], qb[1]))
	for i := range qb {
		checkFailedOver(t, qb[i], `reason="the peer's fallback notification on the backup QP"`)
		eachSignaledOnce(t, qb[i])
	}
	// Each backup QP of B: where its answer (the acknowledgement and its
	// announcement, one post of two) and its first replayed WRs went.
	answer, replay := map[uint32]int{}, map[uint32]int{}
	calls := log.snapshot()[start:]
	for k, cl := range calls {
		switch {
		case cl.ctrl && cl.n == 2:
			if _, ok := answer[cl.qpn]; !ok {
				answer[cl.qpn] = k
			}
		case !cl.ctrl:
			if _, ok := replay[cl.qpn]; !ok {
				replay[cl.qpn] = k
			}
		}
	}
	if len(answer) != 2 || len(replay) != 2 {
		t.Fatalf("B's backup posts %+v: want an answer and a replay on each of its 2 backup QPs", calls)
	}
	for qpn, r := range replay {
		for other, an := range answer {
			if an > r {
				t.Errorf("B answered QP %#x's peer (post %d) after it replayed QP %#x (post %d): %+v", other, an, qpn, r, calls)
			}
		}
	}
}
