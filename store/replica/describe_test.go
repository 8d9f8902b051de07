package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/verbs"
)

// hcaOf is node n's adapter: port 1 holds its GID and LID 100+n, port 2
// is down; state says port 1's current state.
func hcaOf(n int, state *atomic.Uint32) HCA {
	return HCA{Name: fmt.Sprintf("mlx5_%d", n), GUID: uint64(n), APM: true, Ports: []HCAPort{
		{Num: 1, State: verbs.PortState(state.Load()), LinkLayer: verbs.LinkLayerInfiniBand, LID: uint16(100 + n), GIDs: []verbs.GID{nodeGID(n)}},
		{Num: 2, State: verbs.PortDown, LinkLayer: verbs.LinkLayerInfiniBand},
	}}
}

// describer answers for node n's routes and counts the requests.
type describer struct {
	n     int
	state atomic.Uint32
	calls atomic.Int32
}

func newDescriber(n int) *describer {
	d := &describer{n: n}
	d.state.Store(uint32(verbs.PortActive))
	return d
}

func (d *describer) describe(rt Route) (HCA, error) {
	d.calls.Add(1)
	if (rt.GID == (verbs.GID{}) && rt.LID == uint16(100+d.n)) || rt.GID == nodeGID(d.n) {
		return hcaOf(d.n, &d.state), nil
	}
	return HCA{}, fmt.Errorf("no adapter of node%d holds %v", d.n, rt)
}

func withDescriber(d *describer, ttl time.Duration) func(*Config) {
	return func(c *Config) { c.Describe, c.DescribeTTL = d.describe, ttl }
}

func TestDescribeAcrossNodes(t *testing.T) {
	dir := t.TempDir()
	ds := []*describer{nil, newDescriber(1), newDescriber(2), newDescriber(3)}
	a := startNode(t, dir, 1, "127.0.0.1", nil, withDescriber(ds[1], time.Hour))
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, withDescriber(ds[2], 100*time.Millisecond))
	c := startNode(t, dir, 3, "127.0.0.3", []string{a.r.Addr()}, withDescriber(ds[3], time.Hour))
	waitMembers(t, a, b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Every node describes every other's adapter, by GID and by LID.
	for _, x := range []*testNode{a, b, c} {
		for n := 1; n <= 3; n++ {
			for _, rt := range []Route{{GID: nodeGID(n)}, {LID: uint16(100 + n)}} {
				h, err := x.r.DescribeHCA(ctx, rt)
				if err != nil {
					t.Fatalf("%s describes %v: %v", x.name, rt, err)
				}
				if h.Name != fmt.Sprintf("mlx5_%d", n) || len(h.Ports) != 2 || h.Ports[0].GIDs[0] != nodeGID(n) || h.Ports[0].State != verbs.PortActive {
					t.Fatalf("%s describes %v as %+v", x.name, rt, h)
				}
			}
		}
	}
	// A local route is answered locally: nothing was sent for it.
	if s := a.r.Stats(); s.Describes != 4 || ds[1].calls.Load() != 2+2+2 {
		t.Fatalf("node1 stats %+v, its describer called %d times: want 4 requests sent and 2 local + 4 peer answers", s, ds[1].calls.Load())
	}
	if s := b.r.Stats(); s.DescribesAnswered != 4 {
		t.Fatalf("node2 answered %d requests, want 4", s.DescribesAnswered)
	}

	// Cached: node1 (TTL 1 h) asks again without sending, and still sees
	// port 1 active after node3's went down. node2 (TTL 100 ms) sees the
	// change once its cached answer expires.
	ds[3].state.Store(uint32(verbs.PortDown))
	sent := a.r.Stats().Describes
	h, err := a.r.DescribeHCA(ctx, Route{GID: nodeGID(3)})
	if err != nil || h.Ports[0].State != verbs.PortActive || a.r.Stats().Describes != sent || a.r.Stats().DescribesCached == 0 {
		t.Fatalf("within the TTL: %+v %v, stats %+v: want the cached answer, nothing sent", h, err, a.r.Stats())
	}
	time.Sleep(150 * time.Millisecond)
	if h, err := b.r.DescribeHCA(ctx, Route{GID: nodeGID(3)}); err != nil || h.Ports[0].State != verbs.PortDown {
		t.Fatalf("after the TTL: %+v %v, want port 1 down", h, err)
	}

	// A route nobody holds fails clearly, without asking anyone.
	sent = a.r.Stats().Describes
	if _, err := a.r.DescribeHCA(ctx, Route{LID: 999}); !errors.Is(err, ErrNoRoute) || !strings.Contains(err.Error(), "LID 999") {
		t.Fatalf("unknown route: %v", err)
	}
	if a.r.Stats().Describes != sent {
		t.Fatal("a request was sent for a route no member holds")
	}
	// A route whose node has no description for it: the node's reason.
	_, err = a.r.DescribeHCA(ctx, Route{GID: nodeGID(9), LID: 102})
	if !errors.Is(err, ErrNoHCA) || !strings.Contains(err.Error(), "no adapter of node2 holds") {
		t.Fatalf("a route node2 does not describe: %v", err)
	}
}

func TestDescribeWithoutDescriber(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, dir, 1, "127.0.0.1", nil, nil)
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, nil)
	waitMembers(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, rt := range []Route{routeOf(1), routeOf(2)} {
		if _, err := a.r.DescribeHCA(ctx, rt); !errors.Is(err, ErrNoHCA) || !strings.Contains(err.Error(), "does not describe its adapters") {
			t.Fatalf("describe %v with no describer: %v", rt, err)
		}
	}
}

// A node with the wrong cluster key learns node1's address and asks it
// directly: node1 refuses the stream and never describes anything.
func TestDescribeRefusedWithoutTheKey(t *testing.T) {
	dir := t.TempDir()
	d1 := newDescriber(1)
	a := startNode(t, dir, 1, "127.0.0.1", nil, withDescriber(d1, time.Hour))
	wrong := startNode(t, dir, 2, "127.0.0.2", nil, func(c *Config) { c.Key = []byte("fedcba9876543210"); c.PushTimeout = 300 * time.Millisecond })
	if _, err := wrong.r.DescribeHCA(context.Background(), routeOf(1)); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("before learning node1's address: %v", err)
	}
	meta, err := encodeMeta(nodeMeta(a.cfg.Meta))
	if err != nil {
		t.Fatal(err)
	}
	n := a.r.ml.LocalNode()
	wrong.r.dir.set(&memberlist.Node{Name: "node1", Addr: n.Addr, Port: n.Port, Meta: meta}, StateAlive)
	refused := a.r.Stats().PeersRefused
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if h, err := wrong.r.DescribeHCA(ctx, routeOf(1)); err == nil {
		t.Fatalf("a node without the key got node1's adapter: %+v", h)
	}
	eventually(t, 5*time.Second, "the refusal counted", func() bool { return a.r.Stats().PeersRefused > refused })
	if d1.calls.Load() != 0 || a.r.Stats().DescribesAnswered != 0 {
		t.Fatalf("node1 described its adapter %d times for a refused peer", d1.calls.Load())
	}
}
