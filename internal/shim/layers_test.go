package shim

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibpath/ibpath/asyncev"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/internal/syncbuf"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// The two layers joined in one Runtime (layers.go), driven as
// cmd/libibpath drives it: NewRuntime with the configuration FromEnv
// gives by default (layer 1 on, shadow rings on), the sim host as the
// provider (the runtime follows port events on a context of its own),
// the Go stand-in of the C hot path as its Hotpath, a fake ibpathd session
// (Reporter, Publisher and HCALookup), and every application modify
// through the interposed ibv_modify_qp: layer 1's when Layer1Wants says
// so, then AfterModify (Connected at RTR, as the C side): InterposedModify.
//
// The fabric: two hosts, each with two dual-port InfiniBand HCAs (LMC 1):
// mlx5_0 is the application's, mlx5_1 layer 2's backup. Its clock follows
// real time (layer 1 runs on the wall clock in the runtime).

const lyDev = "mlx5_0"

// lyWorld is the fabric, the directory of its adapters (ibpathd's
// lookup_hca) and what the ibpathds hold for layer 2.
type lyWorld struct {
	t   *testing.T
	f   *sim.Fabric
	dir *shimtest.Adapters
	c   *shimtest.Cluster
}

func newLyWorld(t *testing.T) *lyWorld {
	t.Helper()
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 41}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 2, LMC: 1})
	l1Must(t, err)
	w := &lyWorld{t: t, f: f, dir: &shimtest.Adapters{}, c: shimtest.NewCluster()}
	for _, h := range f.Hosts() {
		for _, a := range h.HCAs() {
			obs, err := h.Open(a.Name())
			l1Must(t, err)
			w.dir.Add(func() (pathsel.HCA, error) { return pathsel.Describe(obs) })
		}
	}
	// The fabric's clock moves with real time (l1World's driver); it
	// stops after every runtime closed (cleanups run last first).
	d := &l1World{t: t, f: f, stop: make(chan struct{}), done: make(chan struct{})}
	go d.drive()
	t.Cleanup(func() {
		close(d.stop)
		<-d.done
	})
	return w
}

// lySession is a fake ibpathd session: the Reporter and Publisher of the
// cluster's node, HCALookup answered from the fabric's adapters, and the
// events this process sent.
type lySession struct {
	*shimtest.Node
	dir *shimtest.Adapters

	mu     sync.Mutex
	events []status.Event
}

func (s *lySession) LookupHCA(ctx context.Context, r ownerproto.Route) (pathsel.HCA, error) {
	return s.dir.LookupHCA(ctx, r)
}

func (s *lySession) Event(e status.Event) error {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
	return s.Node.Event(e)
}

// eventsOf returns the events of one QP, as "kind from -> to".
// tookOf is the Took of qpn's first event of kind.
func (s *lySession) tookOf(qpn uint32, kind string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.events {
		if e.QPN == qpn && e.Kind == kind {
			return e.Took
		}
	}
	return 0
}

func (s *lySession) eventsOf(qpn uint32) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.events {
		if e.QPN == qpn {
			out = append(out, e.Kind+" "+e.From+" -> "+e.To)
		}
	}
	return out
}

type lyOpts struct {
	noSession  bool // no ibpathd session at all
	noLookup   bool // a session that cannot describe adapters (no HCALookup)
	noHotpath  bool // layer 2 builds and connects backups but never fails over
	switchBack bool // IBPATH_SWITCHBACK=on
	noNudge    bool // IBPATH_NUDGE=off
}

// lyHost is one process on a host.
type lyHost struct {
	*l2host
	w    *lyWorld
	sess *lySession
	hca  *sim.HCA // the application's (mlx5_0)
}

func (w *lyWorld) host(name string, side int, o lyOpts) *lyHost {
	t := w.t
	t.Helper()
	e := map[string]string{}
	if o.switchBack {
		e[EnvSwitch] = "on"
	}
	if o.noNudge {
		e[EnvNudge] = "off"
	}
	cfg, err := FromEnv(env(e))
	if err != nil || !cfg.APM || !cfg.Record {
		t.Fatalf("default configuration %+v, %v: want layer 1 and the shadow rings on", cfg, err)
	}
	lb := &syncbuf.Buffer{}
	rt := NewRuntime(cfg, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(rt.Close)
	h := w.f.Host(name)
	rt.SetProvider(h)
	x := &lyHost{w: w, hca: h.HCA(lyDev), sess: &lySession{Node: shimtest.NewNode(w.c), dir: w.dir},
		l2host: &l2host{name: name, side: side, rt: rt, log: lb, id: 1, buf: make([]byte, l2QPs*3*l2Slots*l2Slot+8),
			port: h.HCA(lyDev).Port(1)}}
	switch {
	case o.noSession:
	case o.noLookup:
		rt.SetReporter(x.sess.Node)
	default:
		rt.SetReporter(x.sess)
	}
	x.hp = shimtest.NewHotpath(rt, x.id, x.read)
	rt.SetMemReader(x.read)
	if !o.noHotpath {
		rt.SetHotpath(x.hp)
	}
	x.ctx, err = h.Open(lyDev)
	l1Must(t, err)
	rt.Opened(x.id, lyDev, queryPorts(t, x.ctx), x.ctx)
	// The application reads its async events; the interposed
	// ibv_get_async_event shows each to the runtime.
	sub := asyncev.NewSubscription(64)
	pump := asyncev.Start(x.ctx, asyncev.Options{Subscribers: []*asyncev.Subscription{sub}})
	t.Cleanup(pump.Close)
	go func() {
		for ev := range sub.C {
			var qpn uint32
			if ev.QP != nil {
				qpn = ev.QP.QPN()
			}
			rt.AsyncEvent(x.id, ev.Type, qpn, ev.Port)
		}
	}()
	x.pd, err = x.ctx.AllocPD()
	l1Must(t, err)
	x.mr, err = x.pd.RegMR(x.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic)
	l1Must(t, err)
	rt.MR(x.id, x.pd, x.mr, x.buf)
	return x
}

// queryPorts is what ibpathOpened reads of a context's ports.
func queryPorts(t *testing.T, ctx verbs.Context) []Port {
	t.Helper()
	da, err := ctx.QueryDevice()
	l1Must(t, err)
	var ports []Port
	for n := uint8(1); n <= da.PhysPortCnt; n++ {
		pa, err := ctx.QueryPort(n)
		l1Must(t, err)
		ports = append(ports, Port{Num: n, LinkLayer: pa.LinkLayer, LID: pa.LID})
	}
	return ports
}

// modify is the interposed ibv_modify_qp (InterposedModify): layer 1
// carries it out when it wants it, else the provider; then the runtime
// hears of it (a QP taken to RTR is connected for layer 2). It returns
// whether layer 1 carried it out.
func (x *l2host) modify(t *testing.T, qp verbs.QP, attr verbs.QPAttr, mask verbs.QPAttrMask) bool {
	t.Helper()
	wants, err := x.rt.InterposedModify(x.id, x.ctx, qp, attr, mask)
	if err != nil {
		t.Fatalf("%s: the application's modify of QP %#x to %v failed: %v", x.name, qp.QPN(), attr.QPState, err)
	}
	return wants
}

// lyConnect connects a and b as the applications do, every modify
// through the interposed ibv_modify_qp; it returns, per side, which of
// the three modifies layer 1 carried out.
func lyConnect(t *testing.T, a, b *appQP) [2][3]bool {
	t.Helper()
	return lyConnectTimeout(t, a, b, shimtest.Timeout)
}

// lyConnectTimeout is lyConnect with the QPs' local ACK timeout (the
// IBA's exponent) given.
func lyConnectTimeout(t *testing.T, a, b *appQP, timeout uint8) [2][3]bool {
	t.Helper()
	a.peer, b.peer = b, a
	var wanted [2][3]bool
	for i, p := range [][2]*appQP{{a, b}, {b, a}} {
		x, peer := p[0], p[1]
		pa, err := peer.x.ctx.QueryPort(1)
		l1Must(t, err)
		for j, s := range shimtest.ConnectSteps(verbs.AHAttr{DLID: pa.LID, PortNum: 1}, peer.qp.QPN(), verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic, timeout) {
			wanted[i][j] = x.x.modify(t, x.qp, s.Attr, s.Mask)
		}
	}
	return wanted
}

// lyRun runs the applications in real time (receives kept posted,
// messages sent with at most l2Window unconfirmed, every CQ polled) while
// the world's driver moves the fabric, until done.
func lyRun(t *testing.T, what string, hosts []*l2host, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			var st []string
			for _, x := range hosts {
				for _, q := range x.qps {
					st = append(st, fmt.Sprintf("%s %+v", x.name, q.status()))
				}
			}
			t.Fatalf("timed out waiting for %s: %s; %s", what, progress(hosts), strings.Join(st, "; "))
		}
		trafficStep(t, hosts)
		for _, x := range hosts {
			for _, q := range x.qps {
				if len(q.errs) != 0 {
					t.Fatalf("%s QP %#x: the application saw %+v; %+v", x.name, q.qp.QPN(), q.errs[0], q.status())
				}
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// finishClean stops sending, waits for every message to be delivered,
// and checks that the applications saw every signaled WR complete once
// and no error.
func finishClean(t *testing.T, hosts []*l2host, qs ...*appQP) {
	t.Helper()
	for _, q := range qs {
		q.total = q.sent
	}
	lyRun(t, "every message delivered", hosts, finished(qs...))
	for _, q := range qs {
		eachSignaledOnce(t, q)
		if len(q.errs) != 0 {
			t.Fatalf("%s QP %#x: errors %v", q.x.name, q.qp.QPN(), q.errs)
		}
	}
}

func (q *appQP) l1Is(apm, prim string) bool {
	s := q.status()
	return s.APM == apm && (prim == "" || s.Primary.String() == prim)
}

// bothArmed: layer 1 armed on port 1 (as the status shows) and layer 2
// armed in the hot path, on both ends.
func bothArmed(qs ...*appQP) func() bool {
	return func() bool {
		for _, q := range qs {
			if !q.l1Is("armed", "port 1") || !q.armed() {
				return false
			}
		}
		return true
	}
}

// sentMore: each QP had n more sends complete than when it was made.
func sentMore(n int, qs ...*appQP) func() bool {
	base := make([]int, len(qs))
	for i, q := range qs {
		base[i] = len(q.sendDone)
	}
	return func() bool {
		for i, q := range qs {
			if len(q.sendDone) < base[i]+n {
				return false
			}
		}
		return true
	}
}

func andAlso(fs ...func() bool) func() bool {
	return func() bool {
		for _, f := range fs {
			if !f() {
				return false
			}
		}
		return true
	}
}

const lyForever = 1 << 30

// TestLayersArmInApplicationModify: an RC QP on an InfiniBand port is
// armed by layer 1 in the application's own INIT->RTR and RTR->RTS (no
// extra modify), and its status says so; layer 2 arms its backup too.
// A UD QP is left to the provider.
func TestLayersArmInApplicationModify(t *testing.T) {
	w := newLyWorld(t)
	a, b := w.host("node0", 0, lyOpts{}), w.host("node1", 1, lyOpts{})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	wanted := lyConnect(t, qa, qb)
	for i, side := range wanted {
		if side != [3]bool{false, true, true} {
			t.Fatalf("side %d: layer 1 carried out the INIT, RTR, RTS modifies %v; want the RTR and RTS", i, side)
		}
	}
	attr, _, err := qa.qp.Query(verbs.QPAttrAltPath | verbs.QPAttrPathMigState)
	l1Must(t, err)
	if attr.AltPortNum != 2 || attr.PathMigState == verbs.MigMigrated {
		t.Fatalf("after the application's connect: alternate port %d, %v; want port 2 loaded in its own modifies", attr.AltPortNum, attr.PathMigState)
	}
	hosts := lyTrafficArmed(t, a, b, qa, qb)
	s := qa.status()
	if s.Layer != status.LayerAPM || s.APM != "armed" || s.Primary.String() != "port 1" || s.Alternate.String() != "port 2" || s.Home.String() != "port 1" ||
		s.Port != 1 || s.Reason != "" || s.Remote.String() != fmt.Sprintf("lid %d qpn %#x", b.hca.Port(1).LID(), qb.qp.QPN()) {
		t.Fatalf("node0's armed QP: %+v", s)
	}
	if s.CrossNIC != "default" || s.Backup.Device != "mlx5_1" || !s.Backup.Connected {
		t.Fatalf("node0's QP: %+v; want layer 2 armed on its connected backup as well", s)
	}
	if st := a.rt.l1.Stats(); st.Loads != 0 || st.ModifyFallbacks != 0 {
		t.Fatalf("layer 1 stats %+v: arming must ride on the application's modifies", st)
	}
	if !a.rt.l1Protects(lyDev, qa.qp.QPN()) {
		t.Fatal("layer 1 does not protect the armed QP")
	}
	// What ibpathd was told last is what the runtime shows. The report
	// goes out once the goroutine that changed the status lets go of the
	// runtime's lock (unlockFO), which under load can be a moment after
	// the status reads armed.
	armed := func(r status.QP) bool {
		return r.Layer == status.LayerAPM && r.APM == "armed" && r.Alternate.String() == "port 2"
	}
	r := lastReport(a.sess, qa.qp.QPN())
	for deadline := time.Now().Add(2 * time.Second); !armed(r) && time.Now().Before(deadline); r = lastReport(a.sess, qa.qp.QPN()) {
		time.Sleep(time.Millisecond)
	}
	if !armed(r) {
		t.Fatalf("last report to ibpathd %+v", r)
	}

	// A UD QP: passed to the provider at every step, an RTR with an
	// address vector included. (The simulator models RC QPs only: the
	// QP is one the device reports as UD, and the shim's ibv_create_qp
	// records it as UD.)
	cq, err := a.ctx.CreateCQ(16, nil, 0)
	l1Must(t, err)
	rc, err := a.pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	l1Must(t, err)
	ud := l1TypedQP{rc, verbs.QPTUD}
	if a.rt.Created(a.id, QPInfo{QPN: ud.QPN(), Type: verbs.QPTUD}) {
		t.Fatal("a UD QP is protected")
	}
	for _, s := range shimtest.ConnectSteps(verbs.AHAttr{DLID: b.hca.Port(1).LID(), PortNum: 1}, qb.qp.QPN(), verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic, shimtest.Timeout) {
		if a.modify(t, ud, s.Attr, s.Mask) {
			t.Fatalf("layer 1 carried out the UD QP's modify to %v", s.Attr.QPState)
		}
	}
	if a.rt.Layer1Wants(a.id, ud.QPN(), verbs.QPAttrState|verbs.QPAttrAV, verbs.QPSRTR) {
		t.Fatal("layer 1 wants an RTR with an address vector of a UD QP")
	}
	if _, ok := a.rt.l1.Status(lyDev, ud.QPN()); ok {
		t.Fatal("layer 1 knows the UD QP")
	}
	if s := statusOf(a.rt, lyDev, ud.QPN()); s.Layer != status.LayerNone || s.APM != "-" || !strings.Contains(s.Reason, "only RC QPs are protected") {
		t.Fatalf("UD QP: %+v", s)
	}
	// An application context the runtime does not know, and a QP it does
	// not know.
	if a.rt.Layer1Wants(99, qa.qp.QPN(), verbs.QPAttrState|verbs.QPAttrAV, verbs.QPSRTR) || a.rt.Layer1Wants(a.id, 0x7777, verbs.QPAttrState|verbs.QPAttrAV, verbs.QPSRTR) {
		t.Fatal("layer 1 wants the modify of a QP the runtime does not know")
	}
	finishClean(t, hosts, qa, qb)
}

// TestLayersRoCE: on a RoCE port layer 1 takes nothing; the QP is
// reported as RoCE having no automatic path migration.
func TestLayersRoCE(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 42}, Hosts: 2, HCAsPerHost: 2, LinkLayer: verbs.LinkLayerEthernet})
	l1Must(t, err)
	cfg, _ := FromEnv(env(nil))
	rt := NewRuntime(cfg, nil)
	t.Cleanup(rt.Close)
	if rt.l1 == nil {
		t.Fatal("layer 1 is not running in a runtime with IBPATH_APM on")
	}
	h0, h1 := f.Host("node0"), f.Host("node1")
	rt.SetProvider(h0)
	sess := &lySession{Node: shimtest.NewNode(shimtest.NewCluster()), dir: &shimtest.Adapters{}}
	rt.SetReporter(sess)
	x := &l2host{name: "node0", rt: rt, id: 2}
	x.ctx, err = h0.Open("rxe0")
	l1Must(t, err)
	ports := queryPorts(t, x.ctx)
	if len(ports) != 1 || ports[0].LinkLayer != verbs.LinkLayerEthernet {
		t.Fatalf("rxe0's ports %+v", ports)
	}
	rt.Opened(x.id, "rxe0", ports, x.ctx)
	mk := func(ctx verbs.Context) verbs.QP {
		pd, err := ctx.AllocPD()
		l1Must(t, err)
		cq, err := ctx.CreateCQ(16, nil, 0)
		l1Must(t, err)
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		l1Must(t, err)
		return qp
	}
	qp := mk(x.ctx)
	if !rt.Created(x.id, QPInfo{QPN: qp.QPN(), Type: verbs.QPTRC}) {
		t.Fatal("an RC QP on RoCE is not protected by layer 2")
	}
	peerCtx, err := h1.Open("rxe0")
	l1Must(t, err)
	peer := mk(peerCtx)
	gid, err := peerCtx.QueryGID(1, 1)
	l1Must(t, err)
	steps := shimtest.ConnectSteps(verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}, PortNum: 1},
		peer.QPN(), verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic, shimtest.Timeout)
	for _, s := range steps {
		if x.modify(t, qp, s.Attr, s.Mask) {
			t.Fatalf("layer 1 carried out a RoCE QP's modify to %v", s.Attr.QPState)
		}
	}
	if qp.State() != verbs.QPSRTS {
		t.Fatalf("the application's RoCE QP is %v", qp.State())
	}
	if _, ok := rt.l1.Status("rxe0", qp.QPN()); ok {
		t.Fatal("layer 1 knows the RoCE QP")
	}
	s := statusOf(rt, "rxe0", qp.QPN())
	if s.Layer != status.LayerNone || s.APM != "unsupported" || s.Reason != "RoCE has no automatic path migration" || s.Primary.String() != "port 1" {
		t.Fatalf("RoCE QP: %+v", s)
	}
	if r := rt.Command(ownerproto.Command{Op: ownerproto.OpMigrate, Device: "rxe0", QPN: qp.QPN()}); r.OK || !strings.Contains(r.Error, "layer 1 does not protect it: RoCE has no automatic path migration") {
		t.Fatalf("migrate of the RoCE QP: %+v", r)
	}
}

// TestLayersCableCutLayer1Migrates: the primary port's cable is pulled
// under traffic. Layer 1 moves the QP to its alternate (the status
// follows, ibpathd gets a PathMigrated event) and re-arms it on the other
// port; layer 2 sees the same PORT_ERR on a QP it has armed and leaves it
// to layer 1: nothing is diverted, and the application sees nothing.
func TestLayersCableCutLayer1Migrates(t *testing.T) {
	w, a, qa, qb, hosts := lyArmedPair(t)

	l1Must(t, w.f.SetLink(a.hca.Port(1), false))
	lyRun(t, "node0's QP re-armed on port 2 with traffic going on", hosts,
		andAlso(func() bool { return qa.l1Is("armed", "port 2") }, sentMore(200, qa, qb)))

	// Layer 2 saw the PORT_ERR (the runtime recorded it) and left the QP
	// to layer 1.
	sawErr := false
	for _, p := range a.rt.Ports() {
		sawErr = sawErr || p.Device == lyDev && p.Port == 1 && !p.Up && p.Event == verbs.EventPortErr
	}
	if !sawErr {
		t.Fatalf("node0's runtime saw no PORT_ERR on port 1: %+v", a.rt.Ports())
	}
	for _, q := range []*appQP{qa, qb} {
		if q.diverted() || !q.armed() {
			t.Fatalf("%s: diverted %v, armed %v: layer 2 must leave a QP layer 1 protects to it", q.x.name, q.diverted(), q.armed())
		}
	}
	if _, n, _ := a.hp.Counts(); n != 0 {
		t.Fatalf("node0's hot path intercepted %d error completions", n)
	}
	if l := a.logLine("layer 2 failover"); l != "" {
		t.Fatalf("layer 2 failed over: %s", l)
	}
	if !a.rt.l1Protects(lyDev, qa.qp.QPN()) {
		t.Fatal("layer 1 does not protect the migrated QP")
	}
	s := qa.status()
	if s.Layer != status.LayerAPM || s.Primary.String() != "port 2" || s.Port != 2 || s.Alternate.String() != "port 2+1" || s.Home.String() != "port 1" || s.Migrations < 1 ||
		s.CrossNIC != "default" || s.Failovers != 0 {
		t.Fatalf("node0's QP after the cut: %+v", s)
	}
	if ev := a.sess.eventsOf(qa.qp.QPN()); len(ev) == 0 || ev[0] != status.EvPathMigrated+" port 1 -> port 2" {
		t.Fatalf("node0's events for its QP: %q; want the migration", ev)
	}
	// the time from the port's error to the move (ibpathd's histogram)
	if took := a.sess.tookOf(qa.qp.QPN(), status.EvPathMigrated); took <= 0 || took > 10*time.Second {
		t.Fatalf("the migration event says it took %v", took)
	}
	for _, e := range a.sess.eventsOf(qa.qp.QPN()) {
		if strings.HasPrefix(e, status.EvFailover) {
			t.Fatalf("a layer-2 failover was reported: %q", e)
		}
	}
	finishClean(t, hosts, qa, qb)
	// Layer 1 reads the hot path's send counts of the QP through the
	// runtime (to see the peer follow a migration): those of the rings,
	// nothing from a hot path that does not tell them.
	a.rt.l2mu.Lock()
	def := a.rt.shadows[a.id].def
	a.rt.l2mu.Unlock()
	posted, retired, ok := a.rt.progressL1(def, qa.qp)
	p, r, _ := a.hp.Positions(qa.qp.QPN())
	want := [2]uint64{p, r}
	a.hp.SetNoProgress(true)
	if !ok || posted != want[0] || retired != want[1] || retired != posted || posted < uint64(qa.sent) {
		t.Fatalf("progress of node0's QP: %d posted, %d retired, %v; want the rings' %v, every one of the %d messages' WRs retired", posted, retired, ok, want, qa.sent)
	}
	if _, _, ok := a.rt.progressL1(def, qa.qp); ok {
		t.Fatal("progress from a hot path that gives none")
	}
}

// TestLayersBothPortsDown: both ports of node0's HCA go down under
// traffic, at once, or the primary first and the other once layer 1 has
// moved the QP there. Layer 1 cannot save the QP and hands it over; layer
// 2 diverts it and fails over onto the backup device, the peer follows,
// and the exchange finishes there without the applications seeing an
// error. Layer 1 has let go of the QPs layer 2 took.
func TestLayersBothPortsDown(t *testing.T) {
	t.Run("at once", func(t *testing.T) { bothPortsDown(t, false) })
	t.Run("after a migration", func(t *testing.T) { bothPortsDown(t, true) })
}

func bothPortsDown(t *testing.T, migrateFirst bool) {
	w, a, qa, qb, hosts := lyArmedPair(t)

	if migrateFirst {
		l1Must(t, w.f.SetLink(a.hca.Port(1), false))
		lyRun(t, "node0's QP moved to port 2", hosts, func() bool { return qa.status().Primary.String() == "port 2" })
		if qa.diverted() {
			t.Fatal("layer 2 took a QP layer 1 moved")
		}
		l1Must(t, w.f.SetLink(a.hca.Port(2), false))
	} else {
		l1Must(t, w.f.SetLink(a.hca.Port(2), false))
		l1Must(t, w.f.SetLink(a.hca.Port(1), false))
	}
	lyRun(t, "both QPs diverted, traffic going on", hosts,
		andAlso(qa.diverted, qb.diverted, sentMore(200, qa, qb)))

	qpn := "qpn=" + strconv.FormatUint(uint64(qa.qp.QPN()), 10)
	if l := a.logLine("layer 1 hands the QP over", qpn, "primary port down"); l == "" {
		t.Fatalf("no hand-over in node0's log:\n%s", a.log)
	}
	if l := a.logLine("layer 2 failover", qpn, `reason="layer 1 handed over: `); l == "" {
		t.Fatalf("layer 2 did not fail over on layer 1's hand-over:\n%s", a.log)
	}
	finishClean(t, hosts, qa, qb)
	for _, q := range []*appQP{qa, qb} {
		s := q.status()
		if s.Layer != status.LayerCrossNIC || (s.Home.Port == 0 || s.Home.Device == s.Backup.Device) || s.CrossNIC != "fallback" || s.Failovers != 1 {
			t.Fatalf("%s: %+v; want layer 2 carrying the QP on the backup", q.x.name, s)
		}
		if _, ok := q.x.rt.l1.Status(lyDev, q.qp.QPN()); ok {
			t.Fatalf("%s: layer 1 still holds the QP layer 2 took", q.x.name)
		}
		if q.x.rt.l1Protects(lyDev, q.qp.QPN()) {
			t.Fatalf("%s: layer 1 says it protects the QP layer 2 took", q.x.name)
		}
	}
	a.rt.l2mu.Lock()
	def := a.rt.shadows[a.id].def
	a.rt.l2mu.Unlock()
	if _, _, ok := a.rt.progressL1(def, qa.qp); ok {
		t.Fatal("layer 1 is given the progress of a QP layer 2 took over")
	}
	var failover string
	for _, e := range a.sess.eventsOf(qa.qp.QPN()) {
		if strings.HasPrefix(e, status.EvFailover) {
			failover = e
		}
	}
	if !strings.HasPrefix(failover, status.EvFailover+" mlx5_0 qpn ") || !strings.Contains(failover, "-> mlx5_1 qpn ") {
		t.Fatalf("node0's events %q: want the failover onto mlx5_1", a.sess.eventsOf(qa.qp.QPN()))
	}
	// A relayed migrate of a QP layer 2 took is answered as before.
	if r := a.rt.Command(ownerproto.Command{Op: ownerproto.OpMigrate, Device: lyDev, QPN: qa.qp.QPN()}); r.OK || !strings.Contains(r.Error, "layer 1 does not protect it") {
		t.Fatalf("migrate of a diverted QP: %+v", r)
	}
}

// TestLayersSwitchBackRearmsLayer1: with switching back on, both ports of
// node0's HCA go down: layer 1 hands the QP over and layer 2 fails it over
// onto the backup device. Once the ports are back, layer 2 brings the
// traffic home, and layer 1 protects the QP again: it loads an alternate
// and arms it, so that the next pull of the primary port's cable is a
// path migration, not a second layer-2 failover; a late backup event
// that takes the QP away for an instant leaves it protected too.
func TestLayersSwitchBackRearmsLayer1(t *testing.T) {
	w := newLyWorld(t)
	o := lyOpts{switchBack: true}
	a, b := w.host("node0", 0, o), w.host("node1", 1, o)
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	lyConnect(t, qa, qb)
	hosts := lyTrafficArmed(t, a, b, qa, qb)
	l1Must(t, w.f.SetLink(a.hca.Port(2), false))
	l1Must(t, w.f.SetLink(a.hca.Port(1), false))
	lyRun(t, "both QPs diverted, traffic going on", hosts, andAlso(qa.diverted, qb.diverted, sentMore(100, qa, qb)))
	for _, q := range []*appQP{qa, qb} { // node1's was taken by the peer's notification, not handed over
		if s := q.status(); s.APM != fsm.APMHandedOver.String() {
			t.Fatalf("%s: status %+v while layer 2 carries the QP; want layer 1 shown as having let go", q.x.name, s)
		}
	}
	l1Must(t, w.f.SetLink(a.hca.Port(1), true))
	l1Must(t, w.f.SetLink(a.hca.Port(2), true))
	defer func() {
		if t.Failed() {
			t.Logf("node0 log:\n%s\nnode1 log:\n%s", a.log, b.log)
		}
	}()
	lyRun(t, "both QPs home, layer 1 armed again", hosts, andAlso(sentMore(50, qa, qb), func() bool {
		return !qa.diverted() && !qb.diverted() && qa.l1Is("armed", "port 1") && qb.l1Is("armed", "port 1")
	}))
	qpn := "qpn=" + strconv.FormatUint(uint64(qa.qp.QPN()), 10)
	if a.logLine("layer 1 protects the QP again after layer 2's switch back", qpn) == "" {
		t.Fatalf("no line says layer 1 took the QP back:\n%s", a.log)
	}
	if s := qa.status(); s.Layer != status.LayerAPM || s.Switchbacks != 1 || s.Failovers != 1 {
		t.Fatalf("node0's QP home: %+v; want layer 1's again, after one failover and one switch back", s)
	}
	// A completion event of the backup CQ read late (after the switch
	// back, with nothing on the backup) takes the QP from the hot path for
	// an instant and from layer 1 with it; the runtime gives it back at
	// once, and layer 1 must take it back too.
	a.rt.l2mu.Lock()
	set := a.rt.shadows[a.id]
	a.rt.l2mu.Unlock()
	a.rt.onBackupEvent(set, qa.qp, time.Now())
	if a.logLine("gave back a QP that never left its default", qpn) == "" || qa.diverted() {
		t.Fatalf("the late backup event: diverted %v; want a detour, given back at once:\n%s", qa.diverted(), a.log)
	}
	lyRun(t, "node0's QP armed by layer 1 after the detour", hosts, andAlso(sentMore(50, qa, qb), func() bool {
		return qa.l1Is("armed", "port 1") && qa.x.rt.l1Protects(lyDev, qa.qp.QPN())
	}))
	l1Must(t, w.f.SetLink(a.hca.Port(1), false))
	lyRun(t, "node0's QP migrated to port 2", hosts, andAlso(sentMore(50, qa, qb), func() bool { return qa.status().Primary.String() == "port 2" }))
	if qa.diverted() || qa.status().Failovers != 1 {
		t.Fatalf("the second cut: diverted %v, status %+v; want a path migration only", qa.diverted(), qa.status())
	}
	finishClean(t, hosts, qa, qb)
}

// TestLayersRelayedCommands: a relayed migrate of a QP layer 1 armed is
// carried out by layer 1; of a QP it does not know, the runtime answers
// as before.
func TestLayersRelayedCommands(t *testing.T) {
	w := newLyWorld(t)
	a, b := w.host("node0", 0, lyOpts{}), w.host("node1", 1, lyOpts{})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	idle := a.addQP(t, qpOpts{}) // created, never connected: no traffic
	a.qps = a.qps[:1]
	lyConnect(t, qa, qb)
	hosts := lyTrafficArmed(t, a, b, qa, qb)

	cmd := ownerproto.Command{Op: ownerproto.OpMigrate, Device: lyDev, QPN: qa.qp.QPN(), DryRun: true}
	if r := a.rt.Command(cmd); !r.OK || r.Error != "" || r.After.String() != "port 2" || !qa.l1Is("armed", "port 1") {
		t.Fatalf("dry run: %+v; %+v", r, qa.status())
	}
	cmd.DryRun = false
	r := a.rt.Command(cmd)
	if !r.OK || r.Error != "" || r.Before.String() != "armed port 1" || r.After.String() != "awaiting-peer port 2" {
		t.Fatalf("migrate of an armed QP: %+v", r)
	}
	if s := qa.status(); s.Primary.String() != "port 2" || s.Layer != status.LayerAPM {
		t.Fatalf("after the migrate: %+v; want the primary on port 2", s)
	}
	lyRun(t, "node0's QP re-armed on port 2", hosts, andAlso(func() bool { return qa.l1Is("armed", "port 2") }, sentMore(100, qa, qb)))
	if ev := a.sess.eventsOf(qa.qp.QPN()); len(ev) == 0 || ev[0] != status.EvPathMigrated+" port 1 -> port 2" {
		t.Fatalf("node0's events for its QP: %q; want the migration", ev)
	}
	if r := a.rt.Command(ownerproto.Command{Op: ownerproto.OpArm, Device: lyDev, QPN: qa.qp.QPN()}); !r.OK || r.Before.String() != "armed port 2" {
		t.Fatalf("arm of an armed QP: %+v", r)
	}
	if r := a.rt.Command(ownerproto.Command{Op: ownerproto.OpMigrate, Device: lyDev, QPN: 0x999}); r.OK || r.Error != "mlx5_0 QP 0x999: no such QP in this process" {
		t.Fatalf("migrate of an unknown QP: %+v", r)
	}
	if r := a.rt.Command(ownerproto.Command{Op: ownerproto.OpMigrate, Device: lyDev, QPN: idle.qp.QPN()}); r.OK ||
		!strings.Contains(r.Error, "layer 1 does not protect it: the QP is not connected yet") || r.Before.String() != "-" {
		t.Fatalf("migrate of a QP that is not connected: %+v", r)
	}
	if qa.diverted() || qb.diverted() {
		t.Fatal("a relayed migrate diverted a QP")
	}
	finishClean(t, hosts, qa, qb)
}

// TestLayersWithoutSession: without ibpathd (no session, or one that
// cannot describe adapters) layer 1 cannot choose an alternate: the IB
// QPs connect, carry traffic and are reported unprotected for want of
// ibpathd. A session that publishes but cannot describe adapters lets
// layer 2 arm the QPs, which their status then shows; once the sessions
// describe adapters, the next probe arms layer 1, which comes first.
func TestLayersWithoutSession(t *testing.T) {
	w := newLyWorld(t)
	a, b := w.host("node0", 0, lyOpts{}), w.host("node1", 1, lyOpts{noLookup: true})
	a.rt.SetReporter(nil) // the session ended
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	lyConnect(t, qa, qb)
	hosts := []*l2host{a.l2host, b.l2host}
	qa.total, qb.total = lyForever, lyForever
	// Until its first probe a QP keeps the reason of its RTR ("arming
	// waits for RTS"); the probe finds no session.
	noSession := func(q *appQP) func() bool {
		return func() bool { return strings.Contains(q.status().Reason, "no ibpathd session") }
	}
	lyRun(t, "the probes find no session", hosts, andAlso(sentMore(50, qa, qb), noSession(qa), noSession(qb)))
	for _, q := range []*appQP{qa, qb} {
		s := q.status()
		if s.Layer != status.LayerNone || s.APM != "unprotected" || !strings.Contains(s.Reason, "ibpathd not running or not reachable") {
			t.Fatalf("%s without a session that describes adapters: %+v", q.x.name, s)
		}
		if q.x.rt.l1Protects(lyDev, q.qp.QPN()) || q.armed() {
			t.Fatalf("%s: protected without ibpathd", q.x.name)
		}
	}
	if r := a.rt.Command(ownerproto.Command{Op: ownerproto.OpMigrate, Device: lyDev, QPN: qa.qp.QPN()}); r.OK || !strings.Contains(r.Error, "no ibpathd session") {
		t.Fatalf("migrate without a session: %+v", r)
	}

	// node0's session comes back without lookup_hca: the backups
	// connect, layer 2 arms the QPs and protects them.
	a.rt.SetReporter(a.sess.Node)
	lyRun(t, "layer 2 armed on both ends", hosts, func() bool { return qa.armed() && qb.armed() })
	lyRun(t, "traffic", hosts, sentMore(50, qa, qb))
	for _, q := range []*appQP{qa, qb} {
		s := q.status()
		if s.Layer != status.LayerCrossNIC || s.CrossNIC != "default" || s.APM != "unprotected" || !strings.Contains(s.Reason, "no ibpathd session") {
			t.Fatalf("%s: %+v; want layer 2 protecting the QP layer 1 cannot arm", q.x.name, s)
		}
	}
	// An ibpathd that does not know node1's adapter: layer 1's reason
	// changes, layer 2 still protects the QP.
	a.rt.SetReporter(&lySession{Node: a.sess.Node, dir: &shimtest.Adapters{}})
	lyRun(t, "node0's probe asks ibpathd", hosts, func() bool { return strings.Contains(qa.status().Reason, "through ibpathd") })
	if s := qa.status(); s.Layer != status.LayerCrossNIC || s.APM != "unprotected" || !strings.Contains(s.Reason, "describe the adapter holding LID") {
		t.Fatalf("node0: %+v; want layer 2 protecting the QP layer 1 cannot arm", s)
	}

	// Sessions that describe adapters: layer 1 arms at its next probe.
	a.rt.SetReporter(a.sess)
	b.rt.SetReporter(b.sess)
	lyRun(t, "layer 1 armed on both ends", hosts, func() bool { return qa.l1Is("armed", "port 1") && qb.l1Is("armed", "port 1") })
	for _, q := range []*appQP{qa, qb} {
		if s := q.status(); s.Layer != status.LayerAPM || s.Reason != "" || s.Alternate.String() != "port 2" || s.CrossNIC != "default" || !q.armed() {
			t.Fatalf("%s armed after the session attached: %+v", q.x.name, s)
		}
	}
	finishClean(t, hosts, qa, qb)
}

// statusOf is a QP's status in rt.
func statusOf(rt *Runtime, dev string, qpn uint32) status.QP {
	for _, s := range rt.QPs() {
		if s.Device == dev && s.QPN == qpn {
			return s
		}
	}
	return status.QP{}
}

// lastReport is the last status of qpn reported to ibpathd.
func lastReport(s *lySession, qpn uint32) status.QP {
	qps := s.Reported()
	for i := len(qps) - 1; i >= 0; i-- {
		if qps[i].QPN == qpn {
			return qps[i]
		}
	}
	return status.QP{}
}

// lyTrafficArmed starts endless traffic between qa (on a) and qb (on b)
// and runs it until both layers armed both QPs.
func lyTrafficArmed(t *testing.T, a, b *lyHost, qa, qb *appQP) []*l2host {
	t.Helper()
	hosts := []*l2host{a.l2host, b.l2host}
	qa.total, qb.total = lyForever, lyForever
	lyRun(t, "both layers armed on both ends", hosts, bothArmed(qa, qb))
	return hosts
}

// lyArmedPair: node0's and node1's QPs connected through the runtimes,
// traffic going on, both layers armed on both ends.
func lyArmedPair(t *testing.T) (*lyWorld, *lyHost, *appQP, *appQP, []*l2host) {
	t.Helper()
	w := newLyWorld(t)
	a, b := w.host("node0", 0, lyOpts{}), w.host("node1", 1, lyOpts{})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	lyConnect(t, qa, qb)
	return w, a, qa, qb, lyTrafficArmed(t, a, b, qa, qb)
}
