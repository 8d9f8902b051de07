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
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/syncbuf"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// host is one application on a simulated host, under the runtime, doing
// what the interposed verbs report.
type host struct {
	rt  *Runtime
	ctx verbs.Context
	pd  verbs.PD
	qp  verbs.QP
	id  uintptr
}

func newHost(t testing.TB, h *sim.Host, c *shimtest.Cluster) *host {
	t.Helper()
	return newHostWith(t, h, shimtest.NewNode(c))
}

// newHostWith is newHost with the session rep (its ibpathd).
func newHostWith(t testing.TB, h *sim.Host, rep Reporter) *host {
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
	steps := shimtest.ConnectSteps(verbs.AHAttr{DLID: pa.LID, PortNum: 1}, peer.qp.QPN(), verbs.AccessRemoteWrite, shimtest.Timeout)
	for _, s := range steps {
		if err := x.qp.Modify(&s.Attr, s.Mask); err != nil {
			t.Fatal(err)
		}
		x.rt.Modified(x.id, Modify{QPN: x.qp.QPN(), Mask: s.Mask, State: s.Attr.QPState, Port: s.Attr.PortNum,
			DLID: s.Attr.AHAttr.DLID, DestQPN: s.Attr.DestQPN})
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
	c := shimtest.NewCluster()
	a, b := newHost(t, f.Host("node0"), c), newHost(t, f.Host("node1"), c)
	if mrs := c.State().MRs; len(mrs) != 2 {
		t.Fatalf("published MRs %v, want one per host", mrs)
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
	st := c.State()
	if len(st.QPs) != 2 || len(st.Push) != 2 {
		t.Fatalf("published QPs %v, push targets %v", st.QPs, st.Push)
	}
	pb, _ := b.ctx.QueryPort(1)
	if st.Push[0] != (ownerproto.Route{LID: pb.LID}) {
		t.Fatalf("a's mapping was pushed towards %+v, want b's port (LID %d)", st.Push[0], pb.LID)
	}
	// The MRs were registered before any QP was connected (no peer known
	// then); publishing a QP pushes them to its peer's node, once.
	pa, _ := a.ctx.QueryPort(1)
	for k, routes := range st.MRPush {
		want := ownerproto.Route{LID: pb.LID} // a's MR goes to b's node
		if k.LID == pb.LID {
			want = ownerproto.Route{LID: pa.LID}
		}
		if len(routes) != 1 || routes[0] != want {
			t.Fatalf("MR %+v pushed to %v, want once to %+v", k, routes, want)
		}
	}
	if len(st.MRPush) != 2 {
		t.Fatalf("MR pushes %v, want both hosts' MRs", st.MRPush)
	}
}

// TestLayer2WithoutBackupDevice: a host with one HCA has no backup; QPs
// are still tracked, without a backup.
func TestLayer2WithoutBackupDevice(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := shimtest.NewCluster()
	a := newHost(t, f.Host("node0"), c)
	if mrs := c.State().MRs; a.backup() != "" || len(mrs) != 0 {
		t.Fatalf("backup %q, MRs %v without a second HCA", a.backup(), mrs)
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
	c := shimtest.NewCluster()
	a, b := newHost(t, f.Host("node0"), c), newHost(t, f.Host("node1"), c)
	a.rt.SetReporter(nil) // a's session is not up yet
	b.rt.SetReporter(nil)
	a.connect(t, b)
	b.connect(t, a)
	if n := len(c.State().QPs); n != 0 {
		t.Fatalf("%d QP mappings reached ibpathd without a session", n)
	}
	a.rt.SetReporter(shimtest.NewNode(c))
	b.rt.SetReporter(shimtest.NewNode(c))
	deadline := time.Now().Add(5 * time.Second)
	for strings.Contains(a.backup(), "connecting") || strings.Contains(b.backup(), "connecting") {
		if time.Now().After(deadline) {
			t.Fatalf("backups never connected after the sessions came: %q %q", a.backup(), b.backup())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := c.State(); len(st.QPs) != 2 || len(st.MRs) != 2 {
		t.Fatalf("after attach: QPs %v MRs %v", st.QPs, st.MRs)
	}
}

// slowNode is a node whose first failQPs QP publications and first
// failMRs MR publications time out (an ibpathd slow to answer, as under
// TCG in the lab).
type slowNode struct {
	*shimtest.Node
	mu      sync.Mutex
	failQPs int
	failMRs int
}

func (n *slowNode) PublishMR(ctx context.Context, p ownerproto.PublishMR) error {
	if err := n.late(&n.failMRs, "publish_mr"); err != nil {
		return err
	}
	return n.Node.PublishMR(ctx, p)
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
	return n.Node.PublishQP(ctx, p)
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
	c := shimtest.NewCluster()
	a, b := newHost(t, f.Host("node0"), c), newHost(t, f.Host("node1"), c)
	lb := &syncbuf.Buffer{}
	a.rt.log = slog.New(slog.NewTextHandler(lb, nil))
	a.rt.SetReporter(nil)
	c.Forget()
	a.connect(t, b)
	b.connect(t, a)
	a.rt.SetReporter(&slowNode{Node: shimtest.NewNode(c), failQPs: 2})
	pb, _ := b.ctx.QueryPort(1)
	st := c.State()
	var pushed []ownerproto.Route
	aMR := false
	for k := range st.MRs {
		if k.LID != pb.LID {
			aMR, pushed = true, st.MRPush[k]
		}
	}
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
	c := shimtest.NewCluster()
	lb := &syncbuf.Buffer{}
	slow := &slowNode{Node: shimtest.NewNode(c), failQPs: 1, failMRs: 2}
	a := newHostWith(t, f.Host("node0"), slow)
	a.rt.log = slog.New(slog.NewTextHandler(lb, nil))
	b := newHost(t, f.Host("node1"), c)
	pa, _ := a.ctx.QueryPort(1)
	aMR := func() bool {
		for k := range c.State().MRs {
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
type refusingNode struct{ *shimtest.Node }

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
	c := shimtest.NewCluster()
	a := newHostWith(t, f.Host("node0"), nil)
	lb := &syncbuf.Buffer{}
	a.rt.log = slog.New(slog.NewTextHandler(lb, nil))
	a.rt.SetReporter(&refusingNode{shimtest.NewNode(c)}) // republishes the MR: refused
	if !strings.Contains(lb.String(), "ibpathd refused backup attributes") {
		t.Fatalf("no line says the MR was refused:\n%s", lb)
	}
	if at := a.rt.republishAt.Load(); at != 0 {
		t.Fatalf("a refused publication is retried at %d", at)
	}
}

// TestMRSpan: a region is mirrored on the backup device as a slice only
// when its memory can be handed over as a Go slice: not an on-demand-
// paging region at 0 (an implicit one is mirrored without a slice:
// IsImplicitODP), nothing empty, at 0, wrapping or beyond 2^47 bytes.
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
		{0, ^uint64(0), odp, false, "on-demand-paging region at address 0"},
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
	for _, c := range []struct {
		addr   uintptr
		length uint64
		access verbs.AccessFlags
		want   bool
	}{
		{0, ^uint64(0), odp, true},
		{0, ^uint64(0), verbs.AccessLocalWrite, false}, // no ON_DEMAND: the provider refuses it
		{0, 1 << 40, odp, false},
		{0x1000, ^uint64(0), odp, false},
	} {
		if got := IsImplicitODP(c.addr, c.length, c.access); got != c.want {
			t.Errorf("IsImplicitODP(%#x, %d, %v) = %v", c.addr, c.length, c.access, got)
		}
	}
}
