package shim

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/asyncev"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// l1World is a simulated InfiniBand fabric of two hosts with one
// dual-port HCA each (LMC 1), run in real time by a driver goroutine, and
// one process per host with its own Layer1, as the shim runs it: the
// application's modifies go through Layer1.Modify, port events come from
// a context of the shim's own (pumped as Runtime.watch does), and QP
// events reach layer 1 only if the application reads them.
type l1World struct {
	t     testing.TB
	f     *sim.Fabric
	dir   *shimtest.Adapters // ibpathd's lookup_hca
	procs []*l1Proc
	stop  chan struct{}
	done  chan struct{}
}

// l1Config is layer 1 tuned for short tests: every period a few ms. The
// failback hold covers the peer's time to see a port come back: PeerTTL
// (5 ms), one stale answer, and two probes (10 ms each), then arming.
var l1Config = apm.Config{PollMax: 2 * time.Millisecond, ProbeInterval: 10 * time.Millisecond,
	FailbackHold: 60 * time.Millisecond, MigrationPoll: 5 * time.Millisecond}

const l1Dev = "mlx5_0"

type l1ProcOpts struct {
	noSession bool          // no ibpathd: peers cannot be described
	deaf      bool          // the application never reads its async events
	progress  bool          // the data path's send counts reach layer 1 (Layer1Options.Progress)
	peerWait  time.Duration // apm.Config.PeerWait (0: 1.5 local ACK timeouts)
	apm       *apm.Config   // layer 1's configuration (nil: l1Config, short periods)
}

// l1Proc is one process: its Layer1, the application's context, and the
// shim's own context on the same device.
type l1Proc struct {
	w     *l1World
	name  string
	host  *sim.Host
	l1    *Layer1
	app   verbs.Context
	watch verbs.Context

	mu        sync.Mutex
	handovers []Layer1HandOver
	changes   []Layer1Change
	ends      []*l1End
}

// l1End is one end of a connection: an RC QP with its CQ and a buffer.
type l1End struct {
	p   *l1Proc
	qp  verbs.QP
	cq  verbs.CQ
	mr  verbs.MR
	buf []byte
	// what the shadow rings would count: WRITEs posted, and completed
	// (every WRITE is signaled: each success retires one)
	posted, done atomic.Uint64
}

func l1Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newL1World(t testing.TB, opts ...l1ProcOpts) *l1World {
	t.Helper()
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 7}, Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2, LMC: 1})
	l1Must(t, err)
	w := &l1World{t: t, f: f, dir: &shimtest.Adapters{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, h := range f.Hosts() {
		obs, err := h.Open(l1Dev)
		l1Must(t, err)
		w.dir.Add(func() (pathsel.HCA, error) { return pathsel.Describe(obs) })
	}
	go w.drive()
	t.Cleanup(func() {
		for _, p := range w.procs {
			p.l1.Close()
		}
		close(w.stop)
		<-w.done
	})
	for i, h := range f.Hosts() {
		var o l1ProcOpts
		if i < len(opts) {
			o = opts[i]
		}
		w.procs = append(w.procs, w.newProc(h, o))
	}
	return w
}

// drive advances the fabric's clock with real time (layer 1 takes its
// time from the fabric, and its goroutine sleeps in real time).
func (w *l1World) drive() {
	defer close(w.done)
	last := time.Now()
	for {
		select {
		case <-w.stop:
			return
		case <-time.After(50 * time.Microsecond):
		}
		now := time.Now()
		w.f.RunFor(min(now.Sub(last), time.Millisecond))
		last = now
	}
}

func (w *l1World) newProc(h *sim.Host, o l1ProcOpts) *l1Proc {
	t := w.t
	p := &l1Proc{w: w, name: h.Name(), host: h}
	var err error
	cfg := l1Config
	if o.apm != nil {
		cfg = *o.apm
	}
	cfg.PeerWait = o.peerWait
	opts := Layer1Options{APM: cfg, Clock: w.f, PeerTTL: 5 * time.Millisecond,
		HandOver: func(ho Layer1HandOver) { p.mu.Lock(); p.handovers = append(p.handovers, ho); p.mu.Unlock() },
		Changed:  func(c Layer1Change) { p.mu.Lock(); p.changes = append(p.changes, c); p.mu.Unlock() }}
	if o.progress {
		opts.Progress = p.progress
	}
	p.l1, err = NewLayer1(opts)
	l1Must(t, err)
	if !o.noSession {
		p.l1.SetSession(w.dir)
	}
	p.app, err = h.Open(l1Dev)
	l1Must(t, err)
	p.watch, err = h.Open(l1Dev)
	l1Must(t, err)
	// The shim's own context: port and device events, whatever the
	// application does.
	sub := asyncev.NewSubscription(64)
	pump := asyncev.Start(p.watch, asyncev.Options{Subscribers: []*asyncev.Subscription{sub}})
	t.Cleanup(pump.Close)
	go func() {
		for ev := range sub.C {
			p.l1.PortEvent(l1Dev, ev.AsyncEvent)
		}
	}()
	if !o.deaf {
		// The application reads its events; the interposed
		// ibv_get_async_event shows layer 1 the QP events.
		sub := asyncev.NewSubscription(64)
		pump := asyncev.Start(p.app, asyncev.Options{Subscribers: []*asyncev.Subscription{sub}})
		t.Cleanup(pump.Close)
		go func() {
			for ev := range sub.C {
				if ev.QP != nil {
					p.l1.QPEvent(l1Dev, ev.QP.QPN(), ev.Type)
				}
			}
		}()
	}
	return p
}

func (w *l1World) open(i int) *l1End {
	t := w.t
	p := w.procs[i]
	pd, err := p.app.AllocPD()
	l1Must(t, err)
	cq, err := p.app.CreateCQ(1024, nil, 0)
	l1Must(t, err)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	l1Must(t, err)
	buf := make([]byte, 64*64)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	l1Must(t, err)
	e := &l1End{p: p, qp: qp, cq: cq, mr: mr, buf: buf}
	p.mu.Lock()
	p.ends = append(p.ends, e)
	p.mu.Unlock()
	return e
}

// progress is the process's Layer1Options.Progress: its ends' counts.
func (p *l1Proc) progress(ctx verbs.Context, qp verbs.QP) (posted, retired uint64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.ends {
		if e.qp == qp && ctx == p.app {
			return e.posted.Load(), e.done.Load(), true
		}
	}
	return 0, 0, false
}

// connect takes a from RESET to RTS towards b on port 1, every modify
// through a's Layer1, as the interposed ibv_modify_qp does.
func (w *l1World) connect(a, b *l1End) {
	t := w.t
	pa, err := b.p.app.QueryPort(1)
	l1Must(t, err)
	c := verbs.RCConnect{AH: verbs.AHAttr{DLID: pa.LID, PortNum: 1}, Access: verbs.AccessRemoteWrite,
		PathMTU: verbs.MTU2048, DestQPN: b.qp.QPN(), RQPSN: 1, SQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 1,
		Timeout: 10, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1}
	mod := func(attr *verbs.QPAttr, mask verbs.QPAttrMask) error { return a.p.l1.Modify(a.p.app, a.qp, attr, mask) }
	if err := c.Apply(mod); err != nil {
		t.Fatalf("%s: the application's connect failed: %v", a.p.name, err)
	}
}

// pair connects a QP of process 0 with one of process 1.
func (w *l1World) pair() (*l1End, *l1End) {
	a, b := w.open(0), w.open(1)
	w.connect(a, b)
	w.connect(b, a)
	return a, b
}

func (e *l1End) status() (Layer1Status, bool) { return e.p.l1.Status(l1Dev, e.qp.QPN()) }

func (e *l1End) String() string {
	s, ok := e.status()
	if !ok {
		return fmt.Sprintf("%s QP %#x: not protected", e.p.name, e.qp.QPN())
	}
	return fmt.Sprintf("%s QP %#x: %+v", e.p.name, e.qp.QPN(), s)
}

// is reports whether e is in layer-1 state apm on primary path prim
// ("" for any).
func (e *l1End) is(apm, prim string) bool {
	s, ok := e.status()
	return ok && s.APM == apm && (prim == "" || s.Primary.String() == prim)
}

func (p *l1Proc) migrations() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.changes {
		if c.Migrated != nil {
			out = append(out, c.Migrated.From+" -> "+c.Migrated.To)
		}
	}
	return out
}

func (p *l1Proc) handedOver() []Layer1HandOver {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Layer1HandOver(nil), p.handovers...)
}

// l1Traffic posts signaled 64-byte WRITEs on its pairs and checks every
// completion.
type l1Traffic struct {
	t      testing.TB
	pairs  [][2]*l1End
	posted int
	ok     int
	errs   []verbs.WC
	next   int // the pair post starts with
}

// run keeps traffic going until cond holds (or fails the test after
// 10 s), then waits for what is outstanding.
func (tr *l1Traffic) run(what string, cond func() bool) {
	tr.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tr.t.Fatalf("timed out waiting for %s; %d of %d WRITEs ok, %d errors %v; %s", what, tr.ok, tr.posted, len(tr.errs), tr.errs[:min(3, len(tr.errs))], tr.describe())
		}
		tr.post()
		time.Sleep(200 * time.Microsecond)
		tr.poll()
	}
}

func (tr *l1Traffic) describe() string {
	var s []string
	for _, p := range tr.pairs {
		s = append(s, p[0].String(), p[1].String())
	}
	return strings.Join(s, "; ")
}

func (tr *l1Traffic) post() {
	if len(tr.errs) > 0 {
		return // the QPs are in error: nothing more would complete
	}
	// at most 128 outstanding: the pairs take turns from where the last
	// call stopped, so that every pair sends however many there are
	for i := range tr.pairs {
		p := tr.pairs[(tr.next+i)%len(tr.pairs)]
		a, b := p[0], p[1]
		if tr.posted-tr.ok-len(tr.errs) > 128 {
			tr.next = (tr.next + i) % len(tr.pairs)
			return
		}
		off := tr.posted % 64 * 64
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(tr.posted), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList:     []verbs.SGE{{Addr: a.mr.Addr() + uint64(off), Length: 64, LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}})
		l1Must(tr.t, err)
		tr.posted++
		a.posted.Add(1)
	}
}

func (tr *l1Traffic) poll() {
	wc := make([]verbs.WC, 64)
	for _, p := range tr.pairs {
		for {
			n, err := p[0].cq.Poll(wc)
			l1Must(tr.t, err)
			if n == 0 {
				break
			}
			for _, c := range wc[:n] {
				if c.Status == verbs.WCSuccess {
					tr.ok++
					p[0].done.Add(1)
				} else {
					tr.errs = append(tr.errs, c)
				}
			}
		}
	}
}

// drain waits for every posted WRITE to complete.
func (tr *l1Traffic) drain() {
	tr.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tr.ok+len(tr.errs) < tr.posted {
		if time.Now().After(deadline) {
			tr.t.Fatalf("%d of %d WRITEs never completed", tr.posted-tr.ok-len(tr.errs), tr.posted)
		}
		time.Sleep(time.Millisecond)
		tr.poll()
	}
}

// l1RefusingQP is a QP on a device that refuses alternate paths.
type l1RefusingQP struct{ verbs.QP }

func (q l1RefusingQP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if mask&verbs.QPAttrAltPath != 0 {
		return &verbs.Error{Op: "ibv_modify_qp", Errno: verbs.EINVAL, Detail: "this device takes no alternate path"}
	}
	return q.QP.Modify(attr, mask)
}
