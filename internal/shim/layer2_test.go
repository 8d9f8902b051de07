package shim

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/internal/syncbuf"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// cluster is what the ibpathd of two nodes do for layer 2, in memory:
// every publication is readable by both (push and replication included).
type cluster struct {
	mu     sync.Mutex
	qps    map[store.QPKey]store.QPBackup
	mrs    map[store.MRKey]store.MRBackup
	push   []ownerproto.Route                 // the push target of every QP publication
	mrPush map[store.MRKey][]ownerproto.Route // the push targets of each MR's publications
	events []status.Event                     // every event the processes sent
}

type node struct {
	c   *cluster
	rep fakeReporter
}

func (n *node) ReportQP(q status.QP) error        { return n.rep.ReportQP(q) }
func (n *node) QPGone(d string, qpn uint32) error { return n.rep.QPGone(d, qpn) }
func (n *node) Event(e status.Event) error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.c.events = append(n.c.events, e)
	return nil
}
func (n *node) PublishQP(_ context.Context, p ownerproto.PublishQP) error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.c.qps[p.Key] = p.Backup
	n.c.push = append(n.c.push, p.Remote)
	return nil
}
func (n *node) PublishMR(_ context.Context, p ownerproto.PublishMR) error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.c.mrs[p.Key] = p.Backup
	if n.c.mrPush == nil {
		n.c.mrPush = map[store.MRKey][]ownerproto.Route{}
	}
	n.c.mrPush[p.Key] = append(n.c.mrPush[p.Key], p.Remotes...)
	return nil
}
func (n *node) LookupQP(_ context.Context, k store.QPKey) (store.QPBackup, error) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	v, ok := n.c.qps[k]
	if !ok {
		return v, ownerproto.ErrNotFound
	}
	return v, nil
}
func (n *node) LookupMR(_ context.Context, k store.MRKey) (store.MRBackup, error) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	v, ok := n.c.mrs[k]
	if !ok {
		return v, ownerproto.ErrNotFound
	}
	return v, nil
}

// host is one application on a simulated host, under the runtime, doing
// what the interposed verbs report.
type host struct {
	rt  *Runtime
	ctx verbs.Context
	pd  verbs.PD
	qp  verbs.QP
	id  uintptr
}

func newHost(t *testing.T, h *sim.Host, c *cluster) *host {
	t.Helper()
	return newHostWith(t, h, &node{c: c})
}

// newHostWith is newHost with the session rep (its ibpathd).
func newHostWith(t *testing.T, h *sim.Host, rep Reporter) *host {
	t.Helper()
	cfg, _ := FromEnv(env(nil))
	rt := NewRuntime(cfg, nil)
	t.Cleanup(rt.Close)
	rt.SetProvider(h)
	rt.SetReporter(rep)
	x := &host{rt: rt, id: 1}
	var err error
	if x.ctx, err = h.Open("mlx5_0"); err != nil {
		t.Fatal(err)
	}
	rt.Opened(x.id, "mlx5_0", []Port{{Num: 1, LinkLayer: verbs.LinkLayerInfiniBand}}, x.ctx)
	if x.pd, err = x.ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	mr, err := x.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	rt.MR(x.id, x.pd, mr, buf)
	cq, err := x.ctx.CreateCQ(64, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	init := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if x.qp, err = x.pd.CreateQP(init); err != nil {
		t.Fatal(err)
	}
	if !rt.Created(x.id, QPInfo{QPN: x.qp.QPN(), Type: verbs.QPTRC}) {
		t.Fatal("an RC QP is not protected")
	}
	rt.ShadowQP(x.id, x.pd, x.qp, cq, cq, init)
	return x
}

// connect is the application's connect to peer, reported as the shim does.
func (x *host) connect(t *testing.T, peer *host) {
	t.Helper()
	pa, err := peer.ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	steps := rcSteps(pa.LID, peer.qp.QPN(), verbs.AccessRemoteWrite)
	for _, s := range steps {
		if err := x.qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
		x.rt.Modified(x.id, Modify{QPN: x.qp.QPN(), Mask: s.mask, State: s.a.QPState, Port: s.a.PortNum,
			DLID: s.a.AHAttr.DLID, DestQPN: s.a.DestQPN})
	}
	x.rt.Connected(x.id, x.qp.QPN())
}

func (x *host) backup() string {
	for _, q := range x.rt.QPs() {
		if q.QPN == x.qp.QPN() {
			if q.Backup.Device == "" {
				return ""
			}
			return q.Backup.String()
		}
	}
	return ""
}

// TestLayer2ShadowThroughTheDaemon: each host's QP and MR are mirrored on
// its other HCA, the mappings are published with the peer's route as the
// push target, and the backups connect once both are published (the
// second host at once, the first by its background scan).
func TestLayer2ShadowThroughTheDaemon(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{qps: map[store.QPKey]store.QPBackup{}, mrs: map[store.MRKey]store.MRBackup{}}
	a, b := newHost(t, f.Host("node0"), c), newHost(t, f.Host("node1"), c)
	if len(c.mrs) != 2 {
		t.Fatalf("published MRs %v, want one per host", c.mrs)
	}
	a.connect(t, b)
	if got := a.backup(); !strings.HasPrefix(got, "mlx5_1 0x") || !strings.HasSuffix(got, "(connecting)") {
		t.Fatalf("a's backup before b published: %q", got)
	}
	b.connect(t, a)
	if got := b.backup(); !strings.HasPrefix(got, "mlx5_1 0x") || strings.Contains(got, "connecting") {
		t.Fatalf("b's backup once a's was published: %q", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Contains(a.backup(), "connecting") {
		if time.Now().After(deadline) {
			t.Fatalf("a's backup never connected: %q", a.backup())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.qps) != 2 || len(c.push) != 2 {
		t.Fatalf("published QPs %v, push targets %v", c.qps, c.push)
	}
	pb, _ := b.ctx.QueryPort(1)
	if c.push[0] != (ownerproto.Route{LID: pb.LID}) {
		t.Fatalf("a's mapping was pushed towards %+v, want b's port (LID %d)", c.push[0], pb.LID)
	}
	// The MRs were registered before any QP was connected (no peer known
	// then); publishing a QP pushes them to its peer's node, once.
	pa, _ := a.ctx.QueryPort(1)
	for k, routes := range c.mrPush {
		want := ownerproto.Route{LID: pb.LID} // a's MR goes to b's node
		if k.LID == pb.LID {
			want = ownerproto.Route{LID: pa.LID}
		}
		if len(routes) != 1 || routes[0] != want {
			t.Fatalf("MR %+v pushed to %v, want once to %+v", k, routes, want)
		}
	}
	if len(c.mrPush) != 2 {
		t.Fatalf("MR pushes %v, want both hosts' MRs", c.mrPush)
	}
}

// TestLayer2WithoutBackupDevice: a host with one HCA has no backup; QPs
// are still tracked, without a backup.
func TestLayer2WithoutBackupDevice(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{qps: map[store.QPKey]store.QPBackup{}, mrs: map[store.MRKey]store.MRBackup{}}
	a := newHost(t, f.Host("node0"), c)
	if a.backup() != "" || len(c.mrs) != 0 {
		t.Fatalf("backup %q, MRs %v without a second HCA", a.backup(), c.mrs)
	}
}

// TestLayer2PublishesWhenTheSessionComesLate: mappings made before the
// ibpathd session attached are sent when it does, and the backups then
// connect.
func TestLayer2PublishesWhenTheSessionComesLate(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{qps: map[store.QPKey]store.QPBackup{}, mrs: map[store.MRKey]store.MRBackup{}}
	a, b := newHost(t, f.Host("node0"), c), newHost(t, f.Host("node1"), c)
	a.rt.SetReporter(nil) // a's session is not up yet
	b.rt.SetReporter(nil)
	a.connect(t, b)
	b.connect(t, a)
	c.mu.Lock()
	n := len(c.qps)
	c.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d QP mappings reached ibpathd without a session", n)
	}
	a.rt.SetReporter(&node{c: c})
	b.rt.SetReporter(&node{c: c})
	deadline := time.Now().Add(5 * time.Second)
	for strings.Contains(a.backup(), "connecting") || strings.Contains(b.backup(), "connecting") {
		if time.Now().After(deadline) {
			t.Fatalf("backups never connected after the sessions came: %q %q", a.backup(), b.backup())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.qps) != 2 || len(c.mrs) != 2 {
		t.Fatalf("after attach: QPs %v MRs %v", c.qps, c.mrs)
	}
}

// slowNode is a node whose first failQPs QP publications and first
// failMRs MR publications time out (an ibpathd slow to answer, as under
// TCG in the lab).
type slowNode struct {
	*node
	mu      sync.Mutex
	failQPs int
	failMRs int
}

func (n *slowNode) PublishMR(ctx context.Context, p ownerproto.PublishMR) error {
	if err := n.late(&n.failMRs, "publish_mr"); err != nil {
		return err
	}
	return n.node.PublishMR(ctx, p)
}

// late counts one publication off *left and reports whether it times out.
func (n *slowNode) late(left *int, what string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	*left--
	if *left >= 0 {
		return fmt.Errorf("ownerproto: %s: %w", what, context.DeadlineExceeded)
	}
	return nil
}

func (n *slowNode) PublishQP(ctx context.Context, p ownerproto.PublishQP) error {
	if err := n.late(&n.failQPs, "publish_qp"); err != nil {
		return err
	}
	return n.node.PublishQP(ctx, p)
}

// TestLayer2RepublishRetried: a's session comes after its QP connected,
// and ibpathd answers a's first QP publications late (a timeout). The MR
// mapping is sent all the same (the peer's replay of an RDMA WRITE needs
// it), pushed to b's node, and the QP's publication is tried again until
// it goes through; the log says so.
func TestLayer2RepublishRetried(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{qps: map[store.QPKey]store.QPBackup{}, mrs: map[store.MRKey]store.MRBackup{}}
	a, b := newHost(t, f.Host("node0"), c), newHost(t, f.Host("node1"), c)
	lb := &syncbuf.Buffer{}
	a.rt.log = slog.New(slog.NewTextHandler(lb, nil))
	a.rt.SetReporter(nil)
	c.mu.Lock()
	c.qps, c.mrs = map[store.QPKey]store.QPBackup{}, map[store.MRKey]store.MRBackup{}
	c.mu.Unlock()
	a.connect(t, b)
	b.connect(t, a)
	a.rt.SetReporter(&slowNode{node: &node{c: c}, failQPs: 2})
	pb, _ := b.ctx.QueryPort(1)
	c.mu.Lock()
	var pushed []ownerproto.Route
	aMR := false
	for k := range c.mrs {
		if k.LID != pb.LID {
			aMR, pushed = true, c.mrPush[k]
		}
	}
	c.mu.Unlock()
	if !aMR || len(pushed) == 0 || pushed[len(pushed)-1] != (ownerproto.Route{LID: pb.LID}) {
		t.Fatalf("after attach: a's MR mapping published %v, pushed to %v; want it pushed to b's node (LID %d)", aMR, pushed, pb.LID)
	}
	if !strings.Contains(lb.String(), "trying again") {
		t.Fatalf("no line says the republication failed:\n%s", lb)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Contains(b.backup(), "connecting") || strings.Contains(a.backup(), "connecting") {
		if time.Now().After(deadline) {
			t.Fatalf("backups never connected: a %q, b %q\n%s", a.backup(), b.backup(), lb)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a.rt.republishAt.Load() != 0 {
		t.Fatal("a republication is still due after every one went through")
	}
}

// TestLayer2PublicationRetriedInSession: with the session attached from
// the start, ibpathd answers a's first MR and QP publications late (a
// timeout, as under load in the lab, where the peer's failover then found
// no backup rkey for its replayed WRITE). Neither is dropped: both are
// sent again until they go through, b's node learns a's MR mapping, and
// the backups connect.
func TestLayer2PublicationRetriedInSession(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{qps: map[store.QPKey]store.QPBackup{}, mrs: map[store.MRKey]store.MRBackup{}}
	lb := &syncbuf.Buffer{}
	slow := &slowNode{node: &node{c: c}, failQPs: 1, failMRs: 2}
	a := newHostWith(t, f.Host("node0"), slow)
	a.rt.log = slog.New(slog.NewTextHandler(lb, nil))
	b := newHost(t, f.Host("node1"), c)
	pa, _ := a.ctx.QueryPort(1)
	aMR := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for k := range c.mrs {
			if k.LID == pa.LID {
				return true
			}
		}
		return false
	}
	if aMR() {
		t.Fatal("a's MR publication was meant to time out")
	}
	a.connect(t, b)
	b.connect(t, a)
	deadline := time.Now().Add(10 * time.Second)
	for !aMR() || strings.Contains(b.backup(), "connecting") || strings.Contains(a.backup(), "connecting") {
		if time.Now().After(deadline) {
			t.Fatalf("a's MR mapping published %v, backups a %q b %q\n%s", aMR(), a.backup(), b.backup(), lb)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(lb.String(), "did not reach ibpathd; trying again") {
		t.Fatalf("no line says a publication failed:\n%s", lb)
	}
	deadline = time.Now().Add(5 * time.Second)
	for a.rt.republishAt.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a republication is still due after every one went through")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// refusingNode is a node whose ibpathd refuses every MR publication.
type refusingNode struct{ *node }

func (n *refusingNode) PublishMR(context.Context, ownerproto.PublishMR) error {
	return fmt.Errorf("%w: publish_mr: not yours", ownerproto.ErrRefused)
}

// TestLayer2RefusalNotRetried: a publication ibpathd refuses would be
// refused again: it is logged as such and no retry is scheduled.
func TestLayer2RefusalNotRetried(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{qps: map[store.QPKey]store.QPBackup{}, mrs: map[store.MRKey]store.MRBackup{}}
	a := newHostWith(t, f.Host("node0"), nil)
	lb := &syncbuf.Buffer{}
	a.rt.log = slog.New(slog.NewTextHandler(lb, nil))
	a.rt.SetReporter(&refusingNode{&node{c: c}}) // republishes the MR: refused
	if !strings.Contains(lb.String(), "ibpathd refused backup attributes") {
		t.Fatalf("no line says the MR was refused:\n%s", lb)
	}
	if at := a.rt.republishAt.Load(); at != 0 {
		t.Fatalf("a refused publication is retried at %d", at)
	}
}

// connectStep is one modify of an application's RC connect.
type connectStep struct {
	a    verbs.QPAttr
	mask verbs.QPAttrMask
}

// rcSteps are the INIT, RTR and RTS modifies of an RC connect to the QP
// destQPN behind LID dlid, as the tests' applications make them.
func rcSteps(dlid uint16, destQPN uint32, access verbs.AccessFlags) []connectStep {
	return rcStepsTimeout(dlid, destQPN, access, rcTimeout)
}

// rcTimeout is the local ACK timeout of rcSteps (4.2 ms).
const rcTimeout = 10

// rcStepsTimeout is rcSteps with the local ACK timeout given.
func rcStepsTimeout(dlid uint16, destQPN uint32, access verbs.AccessFlags, timeout uint8) []connectStep {
	return []connectStep{
		{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: access},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: verbs.AHAttr{DLID: dlid, PortNum: 1}, PathMTU: verbs.MTU1024,
			DestQPN: destQPN, MaxDestRdAtomic: 1, MinRNRTimer: 1},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{QPState: verbs.QPSRTS, Timeout: timeout, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
				verbs.QPAttrMaxQPRdAtomic},
	}
}

// TestMRSpan: a region is mirrored on the backup device only when its
// memory can be handed over as a Go slice: not an implicit on-demand-
// paging region, nothing empty, at 0, wrapping or beyond 2^47 bytes.
func TestMRSpan(t *testing.T) {
	const odp = verbs.AccessOnDemand | verbs.AccessLocalWrite
	for _, c := range []struct {
		addr   uintptr
		length uint64
		access verbs.AccessFlags
		ok     bool
		why    string
	}{
		{0x7f0000001000, 4096, verbs.AccessLocalWrite, true, ""},
		{0x7f0000001000, 1 << 40, odp, true, ""},
		{0, ^uint64(0), odp, false, "implicit on-demand-paging"},
		{0, 4096, verbs.AccessLocalWrite, false, "address 0"},
		{0x1000, 0, verbs.AccessLocalWrite, false, "zero-length"},
		{0x1000, 1<<47 + 1, verbs.AccessLocalWrite, false, "more than a mirror can map"},
		{^uintptr(0) - 10, 4096, verbs.AccessLocalWrite, false, "more than a mirror can map"},
	} {
		ok, why := MRSpan(c.addr, c.length, c.access)
		if ok != c.ok || !strings.Contains(why, c.why) {
			t.Errorf("MRSpan(%#x, %d, %v) = %v %q, want %v %q", c.addr, c.length, c.access, ok, why, c.ok, c.why)
		}
	}
}
