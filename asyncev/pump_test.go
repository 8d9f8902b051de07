package asyncev

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

func TestPumpDeliversPortEventsToEverySubscriber(t *testing.T) {
	b := newTestbed(t)
	p := Start(b.ctx, Options{})
	defer p.Close()
	s1, s2 := p.Subscribe(4), p.Subscribe(0)

	b.bounce(t, 1)
	// s2 is unbuffered: the pump waits for it before the next event, so
	// read event by event.
	for _, want := range []verbs.EventType{verbs.EventPortErr, verbs.EventPortActive} {
		for _, s := range []*Subscription{s1, s2} {
			wantPort(t, recv(t, s), want, 1)
		}
	}
	p.Close()
	if n := b.ctx.PendingEvents(); n != 0 {
		t.Fatalf("%d events still queued in the context, want 0", n)
	}
	if _, err := b.ctx.GetAsyncEvent(); !errors.Is(err, verbs.EAGAIN) {
		t.Fatalf("GetAsyncEvent after the pump drained: %v, want EAGAIN", err)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("Err after Close = %v, want nil", err)
	}
	wantClosed(t, s1)
	wantClosed(t, s2)
}

// armedQP connects an RC QP of b's context to a QP on node1, both with an
// alternate path on port 2, and exchanges one packet so both turn ARMED
// (REARM -> ARMED needs a packet from the re-armed peer); a manual
// migration then raises PATH_MIG.
func armedQP(t *testing.T, b *testbed) (verbs.QP, verbs.CQ) {
	t.Helper()
	peerCtx, err := b.f.Host("node1").Open("mlx5_0")
	must(t, err)
	qp, cq := newQP(t, b.ctx)
	peer, _ := newQP(t, peerCtx)
	connect := func(q verbs.QP, to verbs.Context, dest verbs.QP) {
		ah := func(port uint8) verbs.AHAttr {
			pa, err := to.QueryPort(port)
			must(t, err)
			return verbs.AHAttr{DLID: pa.LID, PortNum: port}
		}
		c := verbs.RCConnect{AH: ah(1), Access: verbs.AccessRemoteWrite, PathMTU: verbs.MTU1024, DestQPN: dest.QPN(),
			RQPSN: 1, SQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 1, Timeout: 10, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1}
		must(t, c.Apply(q.Modify))
		must(t, q.Modify(&verbs.QPAttr{AltAHAttr: ah(2), AltPortNum: 2, AltTimeout: 10, PathMigState: verbs.MigRearm},
			verbs.QPAttrAltPath|verbs.QPAttrPathMigState))
	}
	connect(qp, peerCtx, peer)
	connect(peer, b.ctx, qp)
	b.f.RunFor(time.Millisecond)
	// A zero-length unsignaled WRITE (no key is checked) and its ACK.
	if _, err := qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite}}); err != nil {
		t.Fatal(err)
	}
	b.f.RunFor(time.Millisecond)
	a, _, err := qp.Query(verbs.QPAttrPathMigState)
	must(t, err)
	if a.PathMigState != verbs.MigArmed {
		t.Fatalf("test QP not armed: %v", a.PathMigState)
	}
	return qp, cq
}

func newQP(t *testing.T, ctx verbs.Context) (verbs.QP, verbs.CQ) {
	t.Helper()
	pd, err := ctx.AllocPD()
	must(t, err)
	cq, err := ctx.CreateCQ(64, nil, 0)
	must(t, err)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	return qp, cq
}

// An event is acknowledged only after every subscriber received it: until
// then the QP it names cannot be destroyed.
func TestPumpAcksAfterEverySubscriberReceived(t *testing.T) {
	b := newTestbed(t)
	qp, cq := armedQP(t, b)
	spy := newSpy(b.ctx)
	fast, slow := NewSubscription(8), NewSubscription(0)
	p := Start(spy, Options{Subscribers: []*Subscription{fast, slow}})
	defer p.Close()

	must(t, qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState))
	waitFor(t, spy.got, "event read")
	e := recv(t, fast)
	want := fmt.Sprintf("mlx5_0 PATH_MIG qp %#x", qp.QPN())
	if e.String() != want || e.QP != qp {
		t.Fatalf("got %v, want %s", e, want)
	}
	// slow has not read it: not acknowledged, the QP is pinned.
	select {
	case ev := <-spy.acked:
		t.Fatalf("%v acknowledged before every subscriber received it", ev.Type)
	default:
	}
	if err := qp.Destroy(); !errors.Is(err, verbs.EBUSY) {
		t.Fatalf("destroy before the ack: %v, want EBUSY", err)
	}
	if e := recv(t, slow); e.Type != verbs.EventPathMig || e.QP != qp {
		t.Fatalf("slow subscriber got %v", e)
	}
	if ev := waitFor(t, spy.acked, "ack"); ev.Type != verbs.EventPathMig {
		t.Fatalf("acked %v, want PATH_MIG", ev.Type)
	}
	must(t, qp.Destroy())
	must(t, cq.Destroy())
}

func TestPumpManyEventsSlowSubscriberLosesNothing(t *testing.T) {
	const flaps = 200
	b := newTestbed(t)
	fast, slow := NewSubscription(1), NewSubscription(1)
	p := Start(b.ctx, Options{Subscribers: []*Subscription{fast, slow}})
	defer p.Close()
	port := b.hca.Port(1)
	const period = 5 * time.Millisecond // down 1ms, ACTIVE 2ms after replug
	must(t, b.f.Flap(port, b.f.Now()+time.Millisecond, time.Millisecond, period, flaps))

	var wg sync.WaitGroup
	got := make([][]Event, 2)
	for i, s := range []*Subscription{fast, slow} {
		wg.Go(func() {
			for len(got[i]) < 2*flaps {
				var e Event
				select {
				case e = <-s.C:
				case <-time.After(guard):
					t.Errorf("subscriber %d: stuck after %d events", i, len(got[i]))
					return
				}
				got[i] = append(got[i], e)
				if s == slow {
					time.Sleep(20 * time.Microsecond)
				}
			}
		})
	}
	for range flaps + 2 { // the fabric runs while the pump reads
		b.f.RunFor(period)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, evs := range got {
		for k, e := range evs {
			want := verbs.EventPortErr
			if k%2 == 1 {
				want = verbs.EventPortActive
			}
			if e.Type != want || e.Port != 1 || e.Device != "mlx5_0" {
				t.Fatalf("subscriber %d event %d = %v, want %v port 1", i, k, e, want)
			}
		}
	}
	p.Close()
	if n := b.ctx.PendingEvents(); n != 0 {
		t.Fatalf("%d events left in the context", n)
	}
	for _, s := range []*Subscription{fast, slow} {
		wantClosed(t, s) // and nothing extra was delivered
	}
}

func TestUnsubscribeWhileThePumpIsBlockedOnIt(t *testing.T) {
	b := newTestbed(t)
	spy := newSpy(b.ctx)
	stuck, live := NewSubscription(0), NewSubscription(0)
	p := Start(spy, Options{Subscribers: []*Subscription{stuck, live}})
	defer p.Close()

	b.bounce(t, 1)
	b.bounce(t, 2)
	// The pump read PORT_ERR and now waits for stuck, which never reads.
	waitFor(t, spy.got, "first event read")
	closed := make(chan struct{})
	go func() { stuck.Close(); close(closed) }()
	wantDone(t, closed, "Subscription.Close")
	stuck.Close() // idempotent
	wantClosed(t, stuck)

	wantPort(t, recv(t, live), verbs.EventPortErr, 1)
	wantPort(t, recv(t, live), verbs.EventPortActive, 1)
	wantPort(t, recv(t, live), verbs.EventPortErr, 2)
	wantPort(t, recv(t, live), verbs.EventPortActive, 2)
	for range 4 {
		waitFor(t, spy.acked, "ack")
	}
}

func TestCloseWithABlockedSubscriber(t *testing.T) {
	b := newTestbed(t)
	spy := newSpy(b.ctx)
	p := Start(spy, Options{})
	s := p.Subscribe(0)
	b.bounce(t, 1)
	waitFor(t, spy.got, "event read") // the pump is now blocked on s

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(p.Close)
	}
	closed := make(chan struct{})
	go func() { wg.Wait(); close(closed) }()
	wantDone(t, closed, "concurrent Close")
	p.Close()
	wantDone(t, p.Done(), "Done")
	wantClosed(t, s)
	s.Close()
	if err := p.Err(); err != nil {
		t.Fatalf("Err = %v, want nil after Close", err)
	}
	// The event read but not delivered is still acknowledged.
	if ev := waitFor(t, spy.acked, "ack"); ev.Type != verbs.EventPortErr {
		t.Fatalf("acked %v, want PORT_ERR", ev.Type)
	}
	// Subscribing to a stopped pump gives a closed channel.
	wantClosed(t, p.Subscribe(1))
}

func TestContextCloseEndsThePump(t *testing.T) {
	b := newTestbed(t)
	p := Start(b.ctx, Options{MaxWait: 5 * time.Millisecond})
	defer p.Close()
	s := p.Subscribe(1)
	must(t, b.ctx.Close())
	wantDone(t, p.Done(), "pump after ctx.Close")
	err := p.Err()
	if !errors.Is(err, verbs.EINVAL) || !strings.Contains(err.Error(), "ibv_get_async_event") {
		t.Fatalf("Err = %v, want EINVAL from ibv_get_async_event", err)
	}
	wantClosed(t, s)
}

func TestDeviceFatalIsDelivered(t *testing.T) {
	b := newTestbed(t)
	p := Start(b.ctx, Options{MaxWait: 5 * time.Millisecond})
	defer p.Close()
	s := p.Subscribe(1)
	must(t, b.f.KillHCA(b.hca))
	if e := recv(t, s); e.Type != verbs.EventDeviceFatal || e.String() != "mlx5_0 DEVICE_FATAL" {
		t.Fatalf("got %v, want mlx5_0 DEVICE_FATAL", e)
	}
}

func TestPumpWithoutNotifierPolls(t *testing.T) {
	b := newTestbed(t)
	var ctx verbs.Context = plainCtx{b.ctx}
	if _, ok := ctx.(verbs.AsyncNotifier); ok {
		t.Fatal("test context must not implement AsyncNotifier")
	}
	p := Start(ctx, Options{MinPoll: 100 * time.Microsecond, MaxWait: 2 * time.Millisecond})
	defer p.Close()
	if p.ready != nil {
		t.Fatal("pump found a readiness channel on a context without one")
	}
	s := p.Subscribe(2)
	for range 3 {
		b.bounce(t, 2)
		wantPort(t, recv(t, s), verbs.EventPortErr, 2)
		wantPort(t, recv(t, s), verbs.EventPortActive, 2)
	}
}

// countCtx counts reads and hides AsyncReady.
type countCtx struct {
	verbs.Context
	reads atomic.Int64
}

func (c *countCtx) GetAsyncEvent() (verbs.AsyncEvent, error) {
	c.reads.Add(1)
	return c.Context.GetAsyncEvent()
}

func TestPollingBacksOff(t *testing.T) {
	b := newTestbed(t)
	ctx := &countCtx{Context: b.ctx}
	p := Start(ctx, Options{MinPoll: time.Millisecond, MaxWait: 16 * time.Millisecond})
	defer p.Close()
	p.Subscribe(1)
	time.Sleep(200 * time.Millisecond) // a measurement window, not synchronisation
	// 1+2+4+8+16+16+... ms: about 15 reads in 200ms; fixed 1ms polling
	// would make about 200.
	if n := ctx.reads.Load(); n < 4 || n > 40 {
		t.Fatalf("%d reads in 200ms with backoff 1ms..16ms, want about 15", n)
	}
}

func TestEventsWaitForTheFirstSubscriber(t *testing.T) {
	b := newTestbed(t)
	p := Start(b.ctx, Options{MaxWait: time.Millisecond})
	defer p.Close()
	b.bounce(t, 1)
	time.Sleep(20 * time.Millisecond) // give the pump a chance to (wrongly) read
	if n := b.ctx.PendingEvents(); n != 2 {
		t.Fatalf("%d events queued with no subscriber, want 2 (the pump must not consume them)", n)
	}
	s := p.Subscribe(0)
	wantPort(t, recv(t, s), verbs.EventPortErr, 1)
	wantPort(t, recv(t, s), verbs.EventPortActive, 1)
}

func TestSubscriptionRules(t *testing.T) {
	b := newTestbed(t)
	// Closed before it was attached: C is closed, attaching is harmless.
	early := NewSubscription(1)
	early.Close()
	wantClosed(t, early)
	p := Start(b.ctx, Options{Subscribers: []*Subscription{early}})
	defer p.Close()

	s := p.Subscribe(1)
	defer func() {
		if recover() == nil {
			t.Fatal("attaching a subscription to a second pump did not panic")
		}
	}()
	q := Start(b.ctx, Options{Subscribers: []*Subscription{s}})
	q.Close()
}
