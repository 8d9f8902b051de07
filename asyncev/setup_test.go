package asyncev

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

const guard = 5 * time.Second // failure guard for every wait

type testbed struct {
	f   *sim.Fabric
	hca *sim.HCA
	ctx *sim.Context
}

// newTestbed builds two hosts with one dual-port HCA each and opens
// node0/mlx5_0.
func newTestbed(t *testing.T) *testbed {
	t.Helper()
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2})
	must(t, err)
	h := f.Host("node0")
	c, err := h.Open("mlx5_0")
	must(t, err)
	return &testbed{f: f, hca: h.HCA("mlx5_0"), ctx: c.(*sim.Context)}
}

// bounce pulls the cable of port n and plugs it back: PORT_ERR, then
// PORT_ACTIVE after the subnet manager's sweep.
func (b *testbed) bounce(t *testing.T, n uint8) {
	t.Helper()
	p := b.hca.Port(n)
	must(t, b.f.SetLink(p, false))
	must(t, b.f.SetLink(p, true))
	b.f.RunFor(3 * time.Millisecond)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func recv(t *testing.T, s *Subscription) Event {
	t.Helper()
	select {
	case e, ok := <-s.C:
		if !ok {
			t.Fatal("subscription closed, want an event")
		}
		return e
	case <-time.After(guard):
		t.Fatal("no event within the guard time")
	}
	panic("unreachable")
}

func wantClosed(t *testing.T, s *Subscription) {
	t.Helper()
	select {
	case e, ok := <-s.C:
		if ok {
			t.Fatalf("got %v, want a closed channel", e)
		}
	case <-time.After(guard):
		t.Fatal("subscription channel not closed")
	}
}

func wantDone(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("%s did not finish within the guard time", what)
	}
}

func wantPort(t *testing.T, e Event, typ verbs.EventType, port uint8) {
	t.Helper()
	if e.Device != "mlx5_0" || e.Type != typ || e.Port != port {
		t.Fatalf("got %v, want mlx5_0 %v port %d", e, typ, port)
	}
}

// spyCtx wraps a simulated context (keeping AsyncReady) and reports every
// event read and acknowledged.
type spyCtx struct {
	*sim.Context
	got   chan verbs.AsyncEvent
	acked chan verbs.AsyncEvent
}

func newSpy(c *sim.Context) *spyCtx {
	return &spyCtx{Context: c, got: make(chan verbs.AsyncEvent, 1024), acked: make(chan verbs.AsyncEvent, 1024)}
}

func (s *spyCtx) GetAsyncEvent() (verbs.AsyncEvent, error) {
	ev, err := s.Context.GetAsyncEvent()
	if err == nil {
		s.got <- ev
	}
	return ev, err
}

func (s *spyCtx) AckAsyncEvent(ev verbs.AsyncEvent) {
	s.Context.AckAsyncEvent(ev)
	s.acked <- ev
}

func waitFor(t *testing.T, ch <-chan verbs.AsyncEvent, what string) verbs.AsyncEvent {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(guard):
		t.Fatalf("no %s within the guard time", what)
	}
	panic("unreachable")
}

// plainCtx hides AsyncReady: its method set is only verbs.Context.
type plainCtx struct{ verbs.Context }
