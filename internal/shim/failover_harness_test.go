package shim

import (
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/internal/syncbuf"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// The failover harness: applications on two simulated hosts, each under
// its own Runtime with the Go stand-in of the C hot path
// (shimtest.Hotpath), exchanging shimtest's checked messages (an
// unsignaled WRITE of a slot, then a signaled SEND_WITH_IMM of the same
// bytes) and checking what they see: every signaled WR completes exactly
// once, in order, on the CQ it belongs to; every message arrives once, in
// order, with its data.

const (
	l2Slot   = shimtest.MsgSize // bytes per message
	l2Slots  = shimtest.Slots   // slots per region
	l2Window = 8                // messages in flight per sender
	l2Recvs  = 16               // receives kept posted
	l2QPs    = 4                // QPs per host at most
)

// refusingProvider opens every device but one: the runtime gets no
// context of its own on it, so none of its port events reach it.
type refusingProvider struct {
	verbs.Provider
	refuse string
}

func (p refusingProvider) Open(name string) (verbs.Context, error) {
	if name == p.refuse {
		return nil, verbs.Errorf("ibv_open_device", verbs.EPERM, "refused by the test")
	}
	return p.Provider.Open(name)
}

type l2opts struct {
	noWatch   bool              // no port event of the default device reaches the runtime
	noPublish bool              // no ibpathd session: backups never connect
	noHotpath bool              // layer 2 failover off (plain verbs)
	express   bool              // the hot path has the express lane (Hotpath.WithExpress)
	env       map[string]string // the shim's environment (IBPATH_*), read by FromEnv
	// wrapProv, when set, wraps the provider the runtime opens its own
	// contexts with (the default device's watch, the backup device)
	wrapProv func(verbs.Provider) verbs.Provider
	// session, when set, makes the host's ibpathd session of its node
	// in the cluster (shimtest.NewNode's by default)
	session func(*shimtest.Node) Reporter
}

type l2host struct {
	name string
	side int
	rt   *Runtime
	hp   *shimtest.Hotpath
	log  *syncbuf.Buffer
	ctx  verbs.Context
	pd   verbs.PD
	mr   verbs.MR
	buf  []byte
	port *sim.Port
	id   uintptr
	qps  []*appQP
	// the application's SRQ (withSRQ), its receives posted (by wr_id)
	// and the pool buffers free for new ones
	srq       verbs.SRQ
	fsrq      *shimtest.HotSRQ
	srqPosted map[uint64]bool
	srqFree   []int
}

type qpOpts struct {
	split    bool     // separate send and receive CQs
	cq       verbs.CQ // both queues complete into this CQ (shared)
	noShadow bool     // not mirrored by layer 2: never armed
	sge      int      // max send SGEs (1 by default)
	srq      bool     // receives through the host's SRQ (withSRQ)
}

// appQP is one QP of the application and what it has seen.
type appQP struct {
	x        *l2host
	idx      int
	srq      bool // receives through its host's SRQ
	qp       verbs.QP
	fq       *shimtest.HotQP
	scq, rcq verbs.CQ
	peer     *appQP
	inline   bool // every third SEND is inline
	// unsig > 0: message k's SEND is signaled only when k%unsig ==
	// unsig-1 or it is the last of total when posted (as libfabric's
	// verbs provider and UCX signal one send in many); sig records
	// which were
	unsig    int
	sig      []bool
	total    int // messages to send
	sent     int
	posted   int
	sendDone []uint64
	recvd    []uint32
	errs     []verbs.WC
	all      []verbs.WC // every completion, in the order the application saw them
	idle     bool       // the application posts nothing more on it (it reset the QP)
}

func railFabric(t *testing.T, seed uint64) *sim.Fabric {
	t.Helper()
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: seed}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func newL2Host(t *testing.T, f *sim.Fabric, name string, side int, c *shimtest.Cluster, o l2opts) *l2host {
	t.Helper()
	if !o.express && o.env[EnvSwitch] == "" {
		// The Go data path's tests switch back (the lane's follow a QP
		// that stays on the backup, the default; those of a QP that
		// leaves the lane for its switch back say so).
		o.env = maps.Clone(o.env)
		if o.env == nil {
			o.env = map[string]string{}
		}
		o.env[EnvSwitch] = "on"
	}
	if o.env[EnvDamping] == "" {
		// These tests pull and put back cables to check what each
		// step of a failover and a switch back does, a few virtual
		// milliseconds apart: flap damping would hold every switch
		// back after the first. Its own tests turn it on.
		o.env = maps.Clone(o.env)
		if o.env == nil {
			o.env = map[string]string{}
		}
		o.env[EnvDamping] = "off"
	}
	cfg, err := FromEnv(env(o.env))
	if err != nil {
		t.Fatal(err)
	}
	lb := &syncbuf.Buffer{}
	rt := NewRuntime(cfg, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})))
	rt.fo.clock = f // recovery's probes and timeouts run on the fabric's time
	t.Cleanup(rt.Close)
	h := f.Host(name)
	var prov verbs.Provider = h
	if o.noWatch {
		prov = refusingProvider{Provider: h, refuse: "mlx5_0"}
	}
	if o.wrapProv != nil {
		prov = o.wrapProv(prov)
	}
	rt.SetProvider(prov)
	if !o.noPublish {
		var rep Reporter = shimtest.NewNode(c)
		if o.session != nil {
			rep = o.session(shimtest.NewNode(c))
		}
		rt.SetReporter(rep)
	}
	x := &l2host{name: name, side: side, rt: rt, log: lb, id: 1, buf: make([]byte, srqPoolOff+l2SRQBufs*l2Slot+8),
		port: h.HCA("mlx5_0").Port(1)}
	x.hp = shimtest.NewHotpath(rt, x.id, x.read)
	switch {
	case o.noHotpath:
	case o.express:
		rt.SetHotpath(x.hp.WithExpress())
	default:
		rt.SetHotpath(x.hp)
	}
	rt.SetMemReader(x.read)
	if x.ctx, err = h.Open("mlx5_0"); err != nil {
		t.Fatal(err)
	}
	rt.Opened(x.id, "mlx5_0", []Port{{Num: 1, LinkLayer: verbs.LinkLayerInfiniBand}}, x.ctx)
	if x.pd, err = x.ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if x.mr, err = x.pd.RegMR(x.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	rt.MR(x.id, x.pd, x.mr, x.buf)
	return x
}

// createCQ creates an application CQ of n entries as the C side does
// under the shim: with the configured headroom added, reported to the
// runtime.
func (x *l2host) createCQ(t *testing.T, n int) verbs.CQ {
	t.Helper()
	h := x.rt.cfg.CQHeadroom
	cq, err := x.ctx.CreateCQ(n+h, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	x.rt.CQCreated(cq, h)
	return cq
}

// read is the process's memory as the shim's MemReader sees it.
func (x *l2host) read(addr uint64, n uint32) []byte {
	if x.mr == nil || addr < x.mr.Addr() || addr-x.mr.Addr()+uint64(n) > uint64(len(x.buf)) {
		return nil
	}
	o := addr - x.mr.Addr()
	return x.buf[o : o+uint64(n)]
}

// counter is an 8-byte word at the end of the buffer, for atomics.
func (x *l2host) counter() (uint64, []byte) {
	o := len(x.buf) - 8
	return x.mr.Addr() + uint64(o), x.buf[o:]
}

func (x *l2host) addQP(t *testing.T, o qpOpts) *appQP {
	t.Helper()
	mk := func() verbs.CQ { return x.createCQ(t, 256) }
	scq := o.cq
	if scq == nil {
		scq = mk()
	}
	rcq := scq
	if o.split {
		rcq = mk()
	}
	init := verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: max(o.sge, 1), MaxRecvSGE: 1, MaxInlineData: l2Slot}}
	if o.srq {
		init.SRQ = x.srq
	}
	qp, err := x.pd.CreateQP(init)
	if err != nil {
		t.Fatal(err)
	}
	if !x.rt.Created(x.id, QPInfo{QPN: qp.QPN(), Type: verbs.QPTRC, SRQ: o.srq, SRQFollowed: o.srq}) {
		t.Fatal("an RC QP is not protected")
	}
	q := &appQP{x: x, idx: len(x.qps), qp: qp, scq: scq, rcq: rcq, srq: o.srq}
	q.fq = x.hp.Add(qp, scq, rcq, false)
	if o.srq {
		x.hp.UseSRQ(q.fq, x.fsrq)
	}
	if !o.noShadow {
		x.rt.ShadowQP(x.id, x.pd, qp, scq, rcq, init)
	}
	x.qps = append(x.qps, q)
	return q
}

// connectPair connects a and b as the applications do, reported as the
// shim does (a first: its backup connects later, by the scan).
func connectPair(t *testing.T, a, b *appQP) {
	t.Helper()
	a.peer, b.peer = b, a
	for _, p := range [][2]*appQP{{a, b}, {b, a}} {
		x, peer := p[0], p[1]
		pa, err := peer.x.ctx.QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		steps := shimtest.ConnectSteps(verbs.AHAttr{DLID: pa.LID, PortNum: 1}, peer.qp.QPN(), verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic, shimtest.Timeout)
		for _, s := range steps {
			if err := x.qp.Modify(&s.Attr, s.Mask); err != nil {
				t.Fatal(err)
			}
			x.x.rt.Modified(x.x.id, Modify{QPN: x.qp.QPN(), Mask: s.Mask, State: s.Attr.QPState, Port: s.Attr.PortNum,
				DLID: s.Attr.AHAttr.DLID, DestQPN: s.Attr.DestQPN, Attr: s.Attr})
		}
		x.x.rt.Connected(x.x.id, x.qp.QPN())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (q *appQP) armed() bool {
	a, _, _, _ := q.x.hp.State(q.fq)
	return a
}

func (q *appQP) diverted() bool {
	_, d, _, _ := q.x.hp.State(q.fq)
	return d
}

// slot is message k's place in region r of this QP
// (shimtest.RegionOut, RegionRecv, RegionWrite).
func (q *appQP) slot(r, k int) (uint64, []byte) {
	o := shimtest.SlotOffset(q.idx, r, k)
	return q.x.mr.Addr() + uint64(o), q.x.buf[o : o+l2Slot]
}

// fillRecvs keeps l2Recvs receives posted.
func (q *appQP) fillRecvs(t *testing.T) {
	t.Helper()
	if q.idle {
		return
	}
	if q.srq {
		q.x.fillSRQ(t)
		return
	}
	for len(q.errs) == 0 && q.posted-len(q.recvd) < l2Recvs {
		k := q.posted
		addr, _ := q.slot(shimtest.RegionRecv, k)
		if _, err := q.x.hp.PostRecv(q.fq, []verbs.RecvWR{shimtest.RecvWR(k, addr, q.x.mr.LKey())}); err != nil {
			t.Fatalf("%s QP %d: post receive %d: %v", q.x.name, q.idx, k, err)
		}
		q.posted++
	}
}

// round is message k's WRs (shimtest.Round): a WRITE of the slot to the
// peer's WRITE region, then the SEND_WITH_IMM of the same bytes.
func (q *appQP) round(k int) []verbs.SendWR {
	addr, b := q.slot(shimtest.RegionOut, k)
	copy(b, shimtest.Pattern(q.x.side, q.idx, k))
	paddr, _ := q.peer.slot(shimtest.RegionWrite, k)
	wrs := shimtest.Round(k, addr, q.x.mr.LKey(), paddr, q.peer.x.mr.RKey(), q.inline && k%3 == 1)
	for len(q.sig) <= k {
		n := len(q.sig)
		q.sig = append(q.sig, q.unsig == 0 || n%q.unsig == q.unsig-1 || n == q.total-1)
	}
	if !q.sig[k] {
		wrs[1].SendFlags &^= verbs.SendSignaled
	}
	return wrs
}

// signaled is how many SENDs were posted signaled.
func (q *appQP) signaled() int {
	n := 0
	for _, s := range q.sig {
		if s {
			n++
		}
	}
	return n
}

// nextSignaled is the first message from k on whose SEND was signaled
// (-1: none posted yet).
func (q *appQP) nextSignaled(k int) int {
	for ; k < len(q.sig); k++ {
		if q.sig[k] {
			return k
		}
	}
	return -1
}

// failNext posts q's next message and makes its QP fail on it with the
// link up, as a transport fault: the message's first request (PSN 2k for
// message k, the QPs start at PSN 0) is lost on each of its tries, and the
// QP reports RETRY_EXC_ERR. (A QP moved to ERR, flushing, is not a fault
// to layer 2: nothing failed but the QP, which any path would report.)
func (q *appQP) failNext(t *testing.T, f *sim.Fabric) {
	t.Helper()
	for i := 0; i < 5; i++ { // the first try, its resend at the peer's sequence NAK, three retries
		if err := f.DropRequest(q.qp, uint32(2*q.sent)); err != nil {
			t.Fatal(err)
		}
	}
	q.sendNext(t)
}

func (q *appQP) sendNext(t *testing.T) {
	t.Helper()
	if _, err := q.x.hp.PostSend(q.fq, q.round(q.sent)); err != nil {
		t.Fatalf("%s QP %d: post message %d: %v", q.x.name, q.idx, q.sent, err)
	}
	q.sent++
}

// poll polls every CQ of the host as the application does.
func (x *l2host) poll(t *testing.T) {
	t.Helper()
	var cqs []verbs.CQ
	seen := map[verbs.CQ]bool{}
	for _, q := range x.qps {
		for _, cq := range []verbs.CQ{q.scq, q.rcq} {
			if !seen[cq] {
				seen[cq] = true
				cqs = append(cqs, cq)
			}
		}
	}
	for _, cq := range cqs {
		x.drain(t, cq)
	}
}

// drain polls cq until it is empty, handling each completion.
func (x *l2host) drain(t *testing.T, cq verbs.CQ) {
	t.Helper()
	wc := make([]verbs.WC, 8)
	for {
		n, err := x.hp.PollCQ(cq, wc)
		if err != nil {
			t.Fatalf("%s: poll: %v", x.name, err)
		}
		if n == 0 {
			return
		}
		for _, c := range wc[:n] {
			x.onWC(t, cq, c)
		}
	}
}

func (x *l2host) onWC(t *testing.T, cq verbs.CQ, wc verbs.WC) {
	t.Helper()
	var q *appQP
	for _, c := range x.qps {
		if c.qp.QPN() == wc.QPNum {
			q = c
		}
	}
	if q == nil {
		t.Fatalf("%s: completion of an unknown QP: %+v", x.name, wc)
	}
	q.all = append(q.all, wc)
	if wc.Status != verbs.WCSuccess {
		q.errs = append(q.errs, wc)
		return
	}
	recv := wc.Opcode&verbs.WCRecv != 0
	if (recv && cq != q.rcq) || (!recv && cq != q.scq) {
		t.Fatalf("%s QP %d: %+v on the wrong CQ", x.name, q.idx, wc)
	}
	if !recv {
		// a signaled SEND's completion completes the unsignaled
		// messages before it too
		j := q.nextSignaled(len(q.sendDone))
		if err := shimtest.CheckSend(max(j, len(q.sendDone)), wc); err != nil {
			t.Fatalf("%s QP %d: %v: %+v", x.name, q.idx, err, wc)
		}
		for k := len(q.sendDone); k <= j; k++ {
			q.sendDone = append(q.sendDone, uint64(2*k+1))
		}
		return
	}
	k := len(q.recvd)
	if q.srq {
		x.onSRQRecv(t, q, wc)
		return
	}
	_, got := q.slot(shimtest.RegionRecv, k)
	_, wrote := q.slot(shimtest.RegionWrite, k)
	if err := shimtest.CheckRecv(k, wc, got, wrote, shimtest.Pattern(q.peer.x.side, q.peer.idx, k)); err != nil {
		t.Fatalf("%s QP %d: receive %d: %v: %+v", x.name, q.idx, k, err, wc)
	}
	q.recvd = append(q.recvd, wc.ImmData)
}

// drive runs the applications: each QP keeps its receives posted and
// sends its messages (at most l2Window unconfirmed, none after an error),
// every CQ is polled, the fabric advances by step, and the runtime's
// goroutines get some real time, until done.
func drive(t *testing.T, f *sim.Fabric, hosts []*l2host, step time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; !done(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out at virtual %v: %s", f.Now(), progress(hosts))
		}
		trafficStep(t, hosts)
		f.RunFor(step)
		if i%8 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// trafficStep keeps every application QP's receives posted and its sends
// going (a window of l2Window), then polls every host once.
func trafficStep(t *testing.T, hosts []*l2host) {
	t.Helper()
	postStep(t, hosts)
	for _, x := range hosts {
		x.poll(t)
	}
}

// postStep keeps every application QP's receives posted and its sends
// going (a window of l2Window, none after an error).
func postStep(t *testing.T, hosts []*l2host) {
	t.Helper()
	for _, x := range hosts {
		for _, q := range x.qps {
			q.fillRecvs(t)
			if !q.idle && q.sent < q.total && q.sent-len(q.sendDone) < l2Window && len(q.errs) == 0 {
				q.sendNext(t)
			}
		}
	}
}

func progress(hosts []*l2host) string {
	var b strings.Builder
	for _, x := range hosts {
		for _, q := range x.qps {
			fmt.Fprintf(&b, "[%s QP %d: sent %d, done %d, received %d, errors %d] ", x.name, q.idx, q.sent, len(q.sendDone), len(q.recvd), len(q.errs))
		}
	}
	return b.String()
}

// finished: every message of the QPs sent, completed and received.
func finished(qps ...*appQP) func() bool {
	return func() bool {
		for _, q := range qps {
			if len(q.sendDone) < q.total || len(q.peer.recvd) < q.total {
				return false
			}
		}
		return true
	}
}

// statusOf is the QP's status in the runtime.
func (q *appQP) status() status.QP {
	for _, s := range q.x.rt.QPs() {
		if s.QPN == q.qp.QPN() {
			return s
		}
	}
	return status.QP{}
}

// destroy destroys the QP as the interposed ibv_destroy_qp does.
func (q *appQP) destroy(t *testing.T) {
	t.Helper()
	q.x.rt.Destroying(q.x.id, q.qp.QPN())
	q.x.hp.Remove(q.fq)
	if err := q.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	q.x.hp.Destroyed(q.fq)
	q.x.rt.Destroyed(q.x.id, q.qp.QPN())
	for i, c := range q.x.qps {
		if c == q {
			q.x.qps = append(q.x.qps[:i], q.x.qps[i+1:]...)
			break
		}
	}
}

// refuseDestroy plays an ibv_destroy_qp the provider refuses with EBUSY,
// as the interposed ibv_destroy_qp sees it: the hot path takes the QP
// out of its tables before the provider's call and back after it.
// during runs in between.
func (q *appQP) refuseDestroy(during func()) {
	q.x.rt.Destroying(q.x.id, q.qp.QPN())
	q.x.hp.Remove(q.fq)
	if during != nil {
		during()
	}
	q.x.hp.Restore(q.fq)
	q.x.rt.DestroyFailed(q.x.id, q.qp.QPN(), syscall.EBUSY, true)
}

// settled runs the fabric a little longer and polls, so that whatever
// completes after the last expected completion is seen too.
func settled(t *testing.T, f *sim.Fabric, hosts ...*l2host) {
	t.Helper()
	for i := 0; i < 20; i++ {
		f.RunFor(100 * time.Microsecond)
		time.Sleep(time.Millisecond)
		for _, x := range hosts {
			x.poll(t)
		}
	}
}

// eachSignaledOnce checks that every signaled WR of the q.sent messages
// completed exactly once (with success or an error).
func eachSignaledOnce(t *testing.T, q *appQP) {
	t.Helper()
	seen := map[uint64]int{}
	for _, wc := range q.all {
		if wc.Opcode&verbs.WCRecv == 0 && wc.WRID%2 == 1 {
			seen[wc.WRID]++
		}
	}
	for k := 0; k < q.sent; k++ {
		want := 1
		if k < len(q.sig) && !q.sig[k] {
			want = 0 // unsignaled
		}
		if n := seen[uint64(2*k+1)]; n != want {
			t.Fatalf("%s QP %d: message %d's SEND completed %d times, want %d", q.x.name, q.idx, k, n, want)
		}
	}
}

// logLine returns the first line of x's log containing every part.
func (x *l2host) logLine(parts ...string) string {
	if ls := x.logLines(parts...); len(ls) > 0 {
		return ls[0]
	}
	return ""
}

// logLines is every line of the host's log that holds all of parts.
func (x *l2host) logLines(parts ...string) []string {
	var out []string
	for _, l := range strings.Split(x.log.String(), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// logAttr is the value of key=value in a log line ("" when absent).
func logAttr(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// exchangeWorld: A and B, their QPs connected and armed, exchange ten
// messages each; with cut, A's link is then cut, both fail over and
// exchange thirty more on the backup (on the express lane with o.express).
// It returns how many completions each application had seen.
func exchangeWorld(t *testing.T, seed uint64, o l2opts, cut bool) (*sim.Fabric, []*l2host, *appQP, *appQP, [2]int) {
	t.Helper()
	f := railFabric(t, seed)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, o), newL2Host(t, f, "node1", 1, c, o)
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{split: true})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total, qb.total = 10, 10
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	if cut {
		if err := f.SetLink(a.port, false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "A diverted on PORT_ERR", qa.diverted)
		qa.total, qb.total = 40, 40
		drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
		if o.express {
			drive(t, f, hosts, 5*time.Microsecond, func() bool { return qa.onLane() && qb.onLane() })
		}
	}
	return f, hosts, qa, qb, [2]int{len(qa.all), len(qb.all)}
}

// portErrFailover cuts a's default link and drives both QPs to the end
// of their traffic: A fails over on PORT_ERR (no virtual time passes
// until its runtime has acted on it), B follows on A's notification.
func portErrFailover(t *testing.T, f *sim.Fabric, a, b *l2host, qa, qb *appQP) {
	t.Helper()
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A diverted on PORT_ERR", qa.diverted)
	drive(t, f, []*l2host{a, b}, 5*time.Microsecond, finished(qa, qb))
	checkFailedOver(t, qa, `reason="PORT_ERR on mlx5_0 port 1"`)
	checkFailedOver(t, qb, `reason="the peer's fallback notification on the backup QP"`)
}
