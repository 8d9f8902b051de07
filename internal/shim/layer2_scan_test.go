package shim

import (
	"context"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// lookupNode is a node that counts the lookups made inside a connect
// (Runtime.Connected) and by the scan loop, and can hold the scan loop's
// lookups (an ibpathd, or the peer's node behind it, slow to answer).
type lookupNode struct {
	*shimtest.Node
	inConnect atomic.Int64
	inScan    atomic.Int64
	hold      chan struct{} // non-nil: the scan's lookups wait until it is closed
	held      chan struct{} // closed when the first scan lookup waits
	heldOnce  sync.Once
}

func (n *lookupNode) LookupQP(ctx context.Context, k store.QPKey) (store.QPBackup, error) {
	st := string(debug.Stack())
	switch {
	case strings.Contains(st, "shim.(*Runtime).Connected("):
		n.inConnect.Add(1)
	case strings.Contains(st, "shim.(*Runtime).scanOnce("):
		n.inScan.Add(1)
		if n.hold != nil {
			n.heldOnce.Do(func() { close(n.held) })
			<-n.hold
		}
	}
	return n.Node.LookupQP(ctx, k)
}

// addQP makes one more protected RC QP on x, with a CQ of its own.
func (x *host) addQP(t testing.TB) verbs.QP {
	t.Helper()
	cq, err := x.ctx.CreateCQ(64, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	init := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qp, err := x.pd.CreateQP(init)
	if err != nil {
		t.Fatal(err)
	}
	if !x.rt.Created(x.id, QPInfo{QPN: qp.QPN(), Type: verbs.QPTRC}) {
		t.Fatal("an RC QP is not protected")
	}
	x.rt.ShadowQP(x.id, x.pd, qp, cq, cq, init)
	return qp
}

// connectTo is the application's connect of qp to QP destQPN behind
// peer's port (which need not exist: its backup is never published).
func (x *host) connectTo(t testing.TB, qp verbs.QP, peer *host, destQPN uint32) {
	t.Helper()
	pa, err := peer.ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shimtest.ConnectSteps(verbs.AHAttr{DLID: pa.LID, PortNum: 1}, destQPN, verbs.AccessRemoteWrite, shimtest.Timeout) {
		if err := qp.Modify(&s.Attr, s.Mask); err != nil {
			t.Fatal(err)
		}
		x.rt.Modified(x.id, Modify{QPN: qp.QPN(), Mask: s.Mask, State: s.Attr.QPState, Port: s.Attr.PortNum,
			DLID: s.Attr.AHAttr.DLID, DestQPN: s.Attr.DestQPN})
	}
	x.rt.Connected(x.id, qp.QPN())
}

func scanWorld(t *testing.T, n *lookupNode) (a, b *host) {
	t.Helper()
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := shimtest.NewCluster()
	n.Node = shimtest.NewNode(c)
	return newHostWith(t, f.Host("node0"), n), newHost(t, f.Host("node1"), c)
}

// TestLayer2ConnectLooksUpItsOwnPeer: a program that connects n QPs
// before its peer published any (the server of ibv_srq_pingpong connects
// its 16 QPs before it sends its addresses) makes one lookup per connect
// in its own thread. Each connect used to look up every QP still waiting,
// n(n+1)/2 round trips to ibpathd in ibv_modify_qp, each a pull from the
// peer's node.
func TestLayer2ConnectLooksUpItsOwnPeer(t *testing.T) {
	n := &lookupNode{}
	a, b := scanWorld(t, n)
	const qps = 8
	list := []verbs.QP{a.qp}
	for len(list) < qps {
		list = append(list, a.addQP(t))
	}
	for i, qp := range list {
		a.connectTo(t, qp, b, 0x9000+uint32(i))
	}
	if got := n.inConnect.Load(); got != qps {
		t.Fatalf("%d connects looked up the peers' backups %d times in the connecting thread, want %d (one each)", qps, got, qps)
	}
	// The scan still asks for all of them.
	waitFor(t, "the scan to look up the waiting QPs", func() bool { return n.inScan.Load() >= qps })
}

// TestLayer2ScanLookupsOutsideTheLock: while the scan loop waits for
// ibpathd's answer about a waiting QP, the application connects another
// QP without waiting for that answer.
func TestLayer2ScanLookupsOutsideTheLock(t *testing.T) {
	n := &lookupNode{hold: make(chan struct{}), held: make(chan struct{})}
	a, b := scanWorld(t, n)
	release := sync.OnceFunc(func() { close(n.hold) })
	t.Cleanup(release)
	second := a.addQP(t)
	a.connectTo(t, a.qp, b, 0x9000)
	select {
	case <-n.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the scan loop never looked up the waiting QP's peer")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.connectTo(t, second, b, 0x9001)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		release()
		<-done
		t.Fatal("a connect waited for the scan loop's lookup of another QP")
	}
	release()
	if got := n.inConnect.Load(); got != 2 {
		t.Fatalf("lookups in the connects: %d, want 2", got)
	}
}

// slowLookups is a node whose every lookup takes delay: a round trip to
// ibpathd and a pull from the peer's node.
type slowLookups struct {
	*lookupNode
	delay time.Duration
}

func (n *slowLookups) LookupQP(ctx context.Context, k store.QPKey) (store.QPBackup, error) {
	time.Sleep(n.delay)
	return n.lookupNode.LookupQP(ctx, k)
}

// BenchmarkConnectBurst: a program connects qps QPs one after the other
// before its peer published any backup, each lookup through ibpathd
// taking 200 us; the time is the burst's, the application's connects
// alone. lookups/connect counts those made in the connecting thread.
func BenchmarkConnectBurst(b *testing.B) {
	for _, qps := range []int{16, 64} {
		b.Run("qps="+strconv.Itoa(qps), func(b *testing.B) {
			var lookups int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
				if err != nil {
					b.Fatal(err)
				}
				c := shimtest.NewCluster()
				n := &slowLookups{lookupNode: &lookupNode{Node: shimtest.NewNode(c)}, delay: 200 * time.Microsecond}
				x, peer := newHostWith(b, f.Host("node0"), n), newHost(b, f.Host("node1"), c)
				list := []verbs.QP{x.qp}
				for len(list) < qps {
					list = append(list, x.addQP(b))
				}
				b.StartTimer()
				for j, qp := range list {
					x.connectTo(b, qp, peer, 0x9000+uint32(j))
				}
				b.StopTimer()
				lookups += n.inConnect.Load()
				x.rt.Close()
				peer.rt.Close()
			}
			b.ReportMetric(float64(lookups)/float64(b.N*qps), "lookups/connect")
		})
	}
}
