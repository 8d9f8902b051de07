package shim

import (
	"errors"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

func TestWatchFollowsPortEventsOnItsOwnContext(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2})
	if err != nil {
		t.Fatal(err)
	}
	h := f.Host("node0")
	r := NewRuntime(Config{Record: true, APM: true}, nil)
	defer r.Close()
	opened := 0
	r.SetProvider(countingProvider{h, &opened})
	r.Opened(1, "mlx5_0", nil, nil)
	r.Opened(2, "mlx5_0", nil, nil) // a second application context: no second watcher
	if opened != 1 {
		t.Fatalf("opened %d contexts of its own for one device", opened)
	}
	if err := f.SetLink(h.HCA("mlx5_0").Port(2), false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.RunFor(time.Millisecond)
		ps := r.Ports()
		if len(ps) == 1 && ps[0] == (PortState{Device: "mlx5_0", Port: 2, Up: false, Event: verbs.EventPortErr}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no PORT_ERR seen: %+v", ps)
		}
		time.Sleep(time.Millisecond)
	}
	// An opener that fails leaves the shim working without its context.
	r2 := NewRuntime(Config{Record: true}, nil)
	r2.SetProvider(failingProvider{h})
	r2.Opened(1, "mlx5_1", nil, nil)
	if !r2.Created(1, QPInfo{QPN: 1, Type: verbs.QPTRC}) {
		t.Fatal("without its own context the shim stopped protecting QPs")
	}
	r2.Close()
}

// countingProvider counts the contexts opened through it.
type countingProvider struct {
	verbs.Provider
	n *int
}

func (p countingProvider) Open(name string) (verbs.Context, error) {
	*p.n++
	return p.Provider.Open(name)
}

// failingProvider opens nothing.
type failingProvider struct{ verbs.Provider }

func (failingProvider) Open(string) (verbs.Context, error) {
	return nil, errors.New("ibv_open_device: ENODEV")
}
