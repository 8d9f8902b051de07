package dbusapi

import (
	"context"
	"errors"
	"sync"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

// fakeBackend is an api.Backend that records calls, returns canned
// results and errors, and emits the events a test gives it.
type fakeBackend struct {
	mu     sync.Mutex
	node   status.Node
	result api.ActionResult
	err    error
	calls  []fakeCall
	subs   []chan status.Event
}

type fakeCall struct {
	action string
	caller api.Caller
	req    api.ActionRequest
}

func newFake() *fakeBackend {
	return &fakeBackend{node: status.Node{
		Schema:  status.SchemaVersion,
		Node:    "node1",
		Version: "1.2.3",
		Fabric:  status.Fabric{Kind: status.FabricSim, Reason: "test"},
		QPs:     []status.QP{{Device: "mlx5_0", QPN: 0x11}, {Device: "mlx5_0", QPN: 0x12}},
		Peers:   []status.Peer{{Name: "node2", State: status.PeerAlive}},
		Totals:  status.Totals{Migrations: 3, Failovers: 1, Switchbacks: 1, ArmedQPs: 2, SuppressedPorts: 1},
	}}
}

func (f *fakeBackend) Status() status.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.node
	n.QPsTotal = len(n.QPs)
	return n
}

// StatusOf is Status with the first rows QPs (all when rows < 0).
func (f *fakeBackend) StatusOf(rows int) status.Node {
	n := f.Status()
	if rows >= 0 && rows < len(n.QPs) {
		n.QPs = n.QPs[:rows]
	}
	return n
}

func (f *fakeBackend) Arm(ctx context.Context, c api.Caller, req api.ActionRequest) (api.ActionResult, error) {
	return f.act("arm", c, req)
}

func (f *fakeBackend) Migrate(ctx context.Context, c api.Caller, req api.ActionRequest) (api.ActionResult, error) {
	return f.act("migrate", c, req)
}

// Drain and Undrain are not served over D-Bus.
func (f *fakeBackend) Drain(context.Context, api.Caller, api.PortRequest) (api.DrainResult, error) {
	return api.DrainResult{}, errors.New("drain is not served over D-Bus")
}

func (f *fakeBackend) Undrain(context.Context, api.Caller, api.PortRequest) (api.DrainResult, error) {
	return api.DrainResult{}, errors.New("undrain is not served over D-Bus")
}

func (f *fakeBackend) act(action string, c api.Caller, req api.ActionRequest) (api.ActionResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{action, c, req})
	if f.err != nil {
		return api.ActionResult{}, f.err
	}
	r := f.result
	r.Action, r.Target, r.DryRun = action, req.Target, req.DryRun
	return r, nil
}

func (f *fakeBackend) Subscribe(buf int) (<-chan status.Event, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan status.Event, buf)
	f.subs = append(f.subs, ch)
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			for i, c := range f.subs {
				if c == ch {
					f.subs = append(f.subs[:i], f.subs[i+1:]...)
					break
				}
			}
			close(ch)
		})
	}
}

// emit hands ev to every subscriber.
func (f *fakeBackend) emit(ev status.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.subs {
		c <- ev
	}
}

func (f *fakeBackend) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

func (f *fakeBackend) update(fn func(*status.Node)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.node)
}

func (f *fakeBackend) setResult(r api.ActionResult, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.result, f.err = r, err
}

func (f *fakeBackend) recorded() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}
