package shim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
)

// lateMRLookups is a session whose lookups of single regions all run out
// of time (ibpathd busy with the fault, as under TCG in the lab's
// nccl.on.ipdown-g2), while lookup_mrs answers.
type lateMRLookups struct {
	*shimtest.Node
	lookups atomic.Int32
}

func (n *lateMRLookups) LookupMR(context.Context, store.MRKey) (store.MRBackup, error) {
	n.lookups.Add(1)
	return store.MRBackup{}, fmt.Errorf("ownerproto: lookup_mr: %w", context.DeadlineExceeded)
}

// olderNode is the session of an ibpathd without lookup_mrs: only what
// Reporter and Publisher name.
type olderNode struct {
	olderSession
}

type olderSession interface {
	Reporter
	Publisher
}

// peerRegion is how x's runtime names the region of peer's host.
func peerRegion(t *testing.T, peer *l2host) crossnic.MRRef {
	t.Helper()
	p, err := peer.ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return crossnic.MRRef{LID: p.LID, RKey: peer.mr.RKey()}
}

// TestFailoverFindsPeerMRsFetchedAhead: ibpathd answers no lookup of a
// single region in time, as when it is busy with the fault. The runtimes
// fetched the peers' regions ahead (lookup_mrs) once their QPs were
// connected, so the failover translates every RDMA WRITE's rkey from
// memory: the traffic finishes on the backup and no lookup was asked.
func TestFailoverFindsPeerMRsFetchedAhead(t *testing.T) {
	f := railFabric(t, 61)
	c := shimtest.NewCluster()
	var sessions []*lateMRLookups
	late := func(n *shimtest.Node) Reporter {
		s := &lateMRLookups{Node: n}
		sessions = append(sessions, s)
		return s
	}
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{session: late}), newL2Host(t, f, "node1", 1, c, l2opts{session: late})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	ra, rb := peerRegion(t, b), peerRegion(t, a)
	waitFor(t, "each runtime holds the peer's region", func() bool {
		ka, okA := a.rt.peerMRs.get(ra)
		kb, okB := b.rt.peerMRs.get(rb)
		return okA && okB && ka != 0 && kb != 0 && ka != ra.RKey && kb != rb.RKey
	})
	hosts := []*l2host{a, b}
	qa.total, qb.total = 40, 40
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 && len(qb.sendDone) >= 10 })
	portErrFailover(t, f, a, b, qa, qb)
	for i, s := range sessions {
		if n := s.lookups.Load(); n != 0 {
			t.Fatalf("session %d asked ibpathd for %d regions one at a time", i, n)
		}
	}
}

// TestFailoverWithAnOlderIbpathd: an ibpathd without lookup_mrs (a
// session that does not list) leaves the runtime to look each rkey up at
// the failover, as before: the traffic finishes on the backup.
func TestFailoverWithAnOlderIbpathd(t *testing.T) {
	f := railFabric(t, 62)
	c := shimtest.NewCluster()
	older := func(n *shimtest.Node) Reporter { return olderNode{n} }
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{session: older}), newL2Host(t, f, "node1", 1, c, l2opts{session: older})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total, qb.total = 30, 30
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 })
	portErrFailover(t, f, a, b, qa, qb)
	if n := a.rt.peerMRs.size() + b.rt.peerMRs.size(); n != 0 || c.MRLists() != 0 {
		t.Fatalf("%d regions fetched ahead, %d lists, from an ibpathd that lists none", n, c.MRLists())
	}
}

// refusingLister speaks a protocol without lookup_mrs.
type refusingLister struct {
	*shimtest.Node
	calls atomic.Int32
}

func (n *refusingLister) LookupMRs(context.Context, []ownerproto.Route, uint64) (ownerproto.MRPage, error) {
	n.calls.Add(1)
	return ownerproto.MRPage{}, fmt.Errorf("%w: lookup_mrs needs protocol 4, the session has 3", ownerproto.ErrOlderDaemon)
}

// TestPeerMRsPagedAndFollowed: the peer's regions come in pages; those
// it registers later come with a later scan, from the mark the scan
// reached; an idle scan asks once.
func TestPeerMRsPagedAndFollowed(t *testing.T) {
	f := railFabric(t, 63)
	c := shimtest.NewCluster()
	paged := func(n *shimtest.Node) Reporter { n.PageMRs = 2; return n }
	a := newL2Host(t, f, "node0", 0, c, l2opts{session: paged})
	b := newL2Host(t, f, "node1", 1, c, l2opts{})
	// five more regions of B before the connect, two after
	reg := func(n int) []verbs.MR {
		var out []verbs.MR
		for range n {
			buf := make([]byte, 4096)
			mr, err := b.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			b.rt.MR(b.id, b.pd, mr, buf)
			out = append(out, mr)
		}
		return out
	}
	early := reg(5)
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	lid := peerRegion(t, b).LID
	has := func(mrs []verbs.MR) func() bool {
		return func() bool {
			for _, mr := range mrs {
				if _, ok := a.rt.peerMRs.get(crossnic.MRRef{LID: lid, RKey: mr.RKey()}); !ok {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "B's six regions fetched in pages of two", has(append(early, b.mr)))
	if n := a.rt.peerMRs.size(); n != 6 {
		t.Fatalf("A holds %d regions of peers, want B's 6", n)
	}
	if n := c.MRLists(); n < 3 {
		t.Fatalf("six regions in %d lists, want pages of two", n)
	}
	late := reg(2)
	waitFor(t, "B's later regions fetched", has(late))
	if n := a.rt.peerMRs.size(); n != 8 {
		t.Fatalf("A holds %d regions of peers, want 8", n)
	}
}

// TestMergeGroups: the queries of the peer ports join while their routes
// fit one query, going on from the earlier mark; a route is never lost.
func TestMergeGroups(t *testing.T) {
	routes := func(from, n int) []ownerproto.Route {
		var out []ownerproto.Route
		for i := range n {
			out = append(out, ownerproto.Route{LID: uint16(from + i)})
		}
		return out
	}
	gs := mergeGroups([]mrGroup{
		{routes: routes(1, 10), since: 50},
		{routes: routes(11, 2), since: 40}, // new routes, fetched after the first
		{routes: routes(13, 60), since: 55},
		{routes: routes(73, 1), since: 56},
	})
	if len(gs) != 2 || len(gs[0].routes) != 12 || gs[0].since != 40 || len(gs[1].routes) != 61 || gs[1].since != 55 {
		var got []string
		for _, g := range gs {
			got = append(got, fmt.Sprintf("%d routes since %d", len(g.routes), g.since))
		}
		t.Fatalf("merged into %v, want [12 routes since 40, 61 routes since 55]", got)
	}
	seen := map[ownerproto.Route]bool{}
	for _, g := range gs {
		if len(g.routes) > ownerproto.MaxQueryRoutes {
			t.Fatalf("a query of %d routes", len(g.routes))
		}
		for _, r := range g.routes {
			seen[r] = true
		}
	}
	if len(seen) != 73 {
		t.Fatalf("%d routes after the merge, want 73", len(seen))
	}
}

// TestPeerMRsOlderIbpathd: a session of an ibpathd too old for
// lookup_mrs is asked once, and the log says why.
func TestPeerMRsOlderIbpathd(t *testing.T) {
	f := railFabric(t, 64)
	c := shimtest.NewCluster()
	older := &refusingLister{}
	x := newL2Host(t, f, "node0", 0, c, l2opts{session: func(n *shimtest.Node) Reporter { older.Node = n; return older }})
	y := newL2Host(t, f, "node1", 1, c, l2opts{})
	qx, qy := x.addQP(t, qpOpts{}), y.addQP(t, qpOpts{})
	connectPair(t, qx, qy)
	waitFor(t, "both QPs armed", func() bool { return qx.armed() && qy.armed() })
	for range 3 {
		x.rt.prefetchMRs()
	}
	if n := older.calls.Load(); n != 1 {
		t.Fatalf("an ibpathd without lookup_mrs was asked %d times, want once", n)
	}
	if !strings.Contains(x.log.String(), "lists no peer registrations") {
		t.Fatalf("no line says why the regions are not fetched ahead:\n%s", x.log)
	}
}

// sinceRecorder records the marks lookup_mrs is asked from.
type sinceRecorder struct {
	*shimtest.Node
	mu     sync.Mutex
	sinces []uint64
}

func (n *sinceRecorder) LookupMRs(ctx context.Context, routes []ownerproto.Route, since uint64) (ownerproto.MRPage, error) {
	n.mu.Lock()
	n.sinces = append(n.sinces, since)
	n.mu.Unlock()
	return n.Node.LookupMRs(ctx, routes, since)
}

func (n *sinceRecorder) marks() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]uint64(nil), n.sinces...)
}

// TestPeerMRsNewSession: the marks belong to a session (an ibpathd counts
// from its own start): after a new session the peers' regions are asked
// for from 0 again.
func TestPeerMRsNewSession(t *testing.T) {
	f := railFabric(t, 65)
	c := shimtest.NewCluster()
	a := newL2Host(t, f, "node0", 0, c, l2opts{})
	b := newL2Host(t, f, "node1", 1, c, l2opts{})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	r := peerRegion(t, b)
	waitFor(t, "A holds B's region", func() bool { _, ok := a.rt.peerMRs.get(r); return ok })
	a.rt.prefetchMRs()
	rec := &sinceRecorder{Node: shimtest.NewNode(c)}
	a.rt.SetReporter(rec)
	a.rt.prefetchMRs()
	a.rt.prefetchMRs()
	m := rec.marks()
	if len(m) < 2 || m[0] != 0 || m[len(m)-1] == 0 {
		t.Fatalf("the new session was asked from %v; want 0 first, then the mark it gave", m)
	}
}
