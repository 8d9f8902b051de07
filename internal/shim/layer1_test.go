package shim

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// TestLayer1CableCutAndFailback: QPs connected through Layer1.Modify
// carry the alternate from the application's own modifies; pulling the
// primary cable migrates them with traffic running, they re-arm on the
// other port, and move back home once the cable returns.
func TestLayer1CableCutAndFailback(t *testing.T) {
	w := newL1World(t)
	var pairs [][2]*l1End
	for range 2 {
		a, b := w.pair()
		pairs = append(pairs, [2]*l1End{a, b})
	}
	a := pairs[0][0]
	attr, _, err := a.qp.Query(verbs.QPAttrAltPath | verbs.QPAttrPathMigState)
	l1Must(t, err)
	if attr.AltPortNum != 2 || attr.PathMigState == verbs.MigMigrated {
		t.Fatalf("after the application's connect: alternate port %d, %v; want port 2 loaded in its modifies", attr.AltPortNum, attr.PathMigState)
	}
	tr := &l1Traffic{t: t, pairs: pairs}
	all := func(state, prim string) func() bool {
		return func() bool {
			for _, p := range pairs {
				if !p[0].is(state, prim) || !p[1].is(state, prim) {
					return false
				}
			}
			return true
		}
	}
	tr.run("every QP armed on port 1", all("armed", "port 1"))
	for _, p := range w.procs {
		if st := p.l1.Stats(); st.Loads != 0 || st.ModifyFallbacks != 0 {
			t.Fatalf("%s stats %+v: arming must ride on the application's modifies", p.name, st)
		}
	}
	if s, _ := a.status(); s.Layer != status.LayerAPM || s.Alternate.String() != "port 2" || s.Home.String() != "port 1" {
		t.Fatalf("armed: %+v", s)
	}

	port1 := w.f.Host("node0").HCA(l1Dev).Port(1)
	l1Must(t, w.f.SetLink(port1, false))
	okAtCut := tr.ok
	tr.run("every QP re-armed on port 2", all("armed", "port 2"))
	if s, _ := a.status(); s.Alternate.String() != "port 2+1" {
		t.Fatalf("node0's port 1 is down: %+v, want the LMC path of port 2 as the alternate", s)
	}
	tr.run("traffic after the cut", func() bool { return tr.ok > okAtCut+200 })

	l1Must(t, w.f.SetLink(port1, true))
	tr.run("every QP back home on port 1", all("armed", "port 1"))
	tr.drain()
	if len(tr.errs) != 0 || tr.ok != tr.posted {
		t.Fatalf("the application saw errors while a path was healthy: %d of %d ok, %d errors", tr.ok, tr.posted, len(tr.errs))
	}
	for _, p := range w.procs {
		if ho := p.handedOver(); len(ho) != 0 {
			t.Fatalf("%s handed over %+v", p.name, ho)
		}
	}
	// Each QP to port 2 and back. The fabric's device (strict profile)
	// takes no new alternate while ARMED, so each QP hops to its armed
	// LMC alternate first, which lets home load with REARM.
	got := w.procs[0].migrations()
	want := []string{"port 1 -> port 2", "port 1 -> port 2", "port 2 -> port 2+1", "port 2 -> port 2+1", "port 2+1 -> port 1", "port 2+1 -> port 1"}
	if !slices.Equal(got, want) {
		t.Fatalf("node0 reported migrations %q; want each QP to port 2 and back (%q)", got, want)
	}
	if st := w.procs[0].l1.Stats(); st.Migrations < 4 || st.Failbacks < 2 {
		t.Fatalf("node0 stats %+v: want a proactive migration and a failback per QP", st)
	}
}

// TestLayer1FailbackDamped: node0's port 1 flaps twice within a
// half-life. The QPs come home after the first flap; after the second,
// layer 1 keeps them on port 2 (both ends: node0 by its port, node1 by
// the path it left twice) and their status says until when, in the
// future, until the penalty has decayed; then they come home.
func TestLayer1FailbackDamped(t *testing.T) {
	cfg := l1Config
	cfg.Damping = pathsel.DampingConfig{HalfLife: time.Second, MaxSuppress: 10 * time.Second}
	w := newL1World(t, l1ProcOpts{apm: &cfg}, l1ProcOpts{apm: &cfg})
	a, b := w.pair()
	tr := &l1Traffic{t: t, pairs: [][2]*l1End{{a, b}}}
	both := func(apm, prim string) func() bool {
		return func() bool { return a.is(apm, prim) && b.is(apm, prim) }
	}
	tr.run("armed on port 1", both("armed", "port 1"))
	port1 := w.f.Host("node0").HCA(l1Dev).Port(1)
	for flap := 1; flap <= 2; flap++ {
		l1Must(t, w.f.SetLink(port1, false))
		tr.run("armed on port 2", both("armed", "port 2"))
		l1Must(t, w.f.SetLink(port1, true))
		if flap == 1 {
			tr.run("home after the first flap", both("armed", "port 1"))
		}
	}
	held := func(e *l1End) time.Time {
		s, _ := e.status()
		return s.FailbackHeldUntil
	}
	tr.run("the failbacks held", func() bool { return !held(a).IsZero() && !held(b).IsZero() })
	if until := held(a); !until.After(time.Now()) || until.After(time.Now().Add(3*time.Second)) {
		t.Fatalf("node0's failback held until %v, %v from now; want within the next 3 s", until, time.Until(until))
	}
	// the peer's port 1 came back long before: without damping both ends
	// are home within the hold-down (60 ms) and a probe or two
	end := time.Now().Add(300 * time.Millisecond)
	tr.run("300 ms on port 2", func() bool { return time.Now().After(end) })
	if !a.is("armed", "port 2+1") && !a.is("armed", "port 2") {
		t.Fatalf("node0 failed back while its port was suppressed: %v", a)
	}
	tr.run("home once the penalty decayed", both("armed", "port 1"))
	if !held(a).IsZero() {
		t.Fatalf("home and still held: %v", held(a))
	}
	tr.drain()
	if len(tr.errs) != 0 || tr.ok != tr.posted {
		t.Fatalf("the application saw errors while a path was healthy: %d of %d ok, %d errors", tr.ok, tr.posted, len(tr.errs))
	}
}

// TestLayer1PeerFollowed: after the cable pull, node0's QPs (which
// layer 1 migrated) wait for their peers. With the data path's counts
// (Layer1Options.Progress) they re-arm as soon as a WRITE posted after
// the migration completes, long before PeerWait (2 s here); without them
// they wait it out.
func TestLayer1PeerFollowed(t *testing.T) {
	for _, progress := range []bool{true, false} {
		o := l1ProcOpts{progress: progress, peerWait: 2 * time.Second}
		w := newL1World(t, o, o)
		var pairs [][2]*l1End
		for range 2 {
			a, b := w.pair()
			pairs = append(pairs, [2]*l1End{a, b})
		}
		tr := &l1Traffic{t: t, pairs: pairs}
		armedOn := func(prim string) func() bool {
			return func() bool {
				for _, p := range pairs {
					if !p[0].is("armed", prim) || !p[1].is("armed", prim) {
						return false
					}
				}
				return true
			}
		}
		tr.run("every QP armed on port 1", armedOn("port 1"))
		l1Must(t, w.f.SetLink(w.f.Host("node0").HCA(l1Dev).Port(1), false))
		cut := time.Now()
		tr.run("node0's QPs migrated and waiting for their peers", func() bool {
			return pairs[0][0].is("awaiting-peer", "port 2") || pairs[0][0].is("rearming", "port 2") || pairs[0][0].is("armed", "port 2")
		})
		tr.run("node0's QPs re-armed on port 2", armedOn("port 2"))
		took := time.Since(cut)
		st := w.procs[0].l1.Stats()
		switch {
		case progress && st.PeerFollowed != 2:
			t.Fatalf("with the data path's counts: stats %+v after %v; want both QPs re-armed because their peers followed", st, took)
		case !progress && (st.PeerFollowed != 0 || took < 2*time.Second):
			t.Fatalf("without the counts: stats %+v, re-armed %v after the cut; want PeerWait (2 s) waited out", st, took)
		}
		tr.drain()
		if len(tr.errs) != 0 {
			t.Fatalf("progress %v: the application saw %v", progress, tr.errs)
		}
	}
}

// TestLayer1RefusedAlternate: a device that refuses the alternate path
// still connects the application's QP; the reason is kept.
func TestLayer1RefusedAlternate(t *testing.T) {
	w := newL1World(t)
	a, b := w.open(0), w.open(1)
	a.qp = l1RefusingQP{a.qp}
	w.connect(a, b)
	w.connect(b, a)
	if a.qp.State() != verbs.QPSRTS {
		t.Fatalf("the application's QP is %v, want RTS", a.qp.State())
	}
	s, ok := a.status()
	if !ok || s.APM != "unprotected" || s.Layer != status.LayerNone || !strings.Contains(s.Reason, "this device takes no alternate path") {
		t.Fatalf("%+v, %v: want unprotected with the device's refusal as the reason", s, ok)
	}
	tr := &l1Traffic{t: t, pairs: [][2]*l1End{{a, b}}}
	tr.run("traffic", func() bool { return tr.ok > 50 })
	tr.drain()
	if len(tr.errs) != 0 {
		t.Fatalf("%d errors, first %+v", len(tr.errs), tr.errs[0])
	}
	if st := w.procs[0].l1.Stats(); st.ModifyFallbacks != 2 {
		t.Fatalf("stats %+v: want the RTR and RTS modifies retried without the alternate", st)
	}
}

// TestLayer1WithoutSession: without ibpathd the peer's ports are unknown:
// QPs stay unprotected with that reason, and a relayed migrate says so.
// (The peer cannot arm either: APM needs both ends re-armed.)
func TestLayer1WithoutSession(t *testing.T) {
	w := newL1World(t, l1ProcOpts{noSession: true})
	a, b := w.pair()
	tr := &l1Traffic{t: t, pairs: [][2]*l1End{{a, b}}}
	tr.run("traffic", func() bool { return tr.ok > 20 })
	// The RTS modify's arming attempt may still be on its way (the one at
	// RTR said it waits for RTS): give it a moment under the race detector.
	s, ok := a.status()
	for deadline := time.Now().Add(5 * time.Second); ok && strings.Contains(s.Reason, "waits for RTS") && time.Now().Before(deadline); s, ok = a.status() {
		time.Sleep(time.Millisecond)
	}
	if !ok || s.APM != "unprotected" || !strings.Contains(s.Reason, ErrNoSession.Error()) || !strings.Contains(s.Reason, "LID") {
		t.Fatalf("%+v, %v: want unprotected because no session describes the peer", s, ok)
	}
	r := a.p.l1.Migrate(l1Dev, a.qp.QPN(), false)
	if r.OK || !strings.Contains(r.Error, "not armed") || !strings.Contains(r.Error, "no ibpathd session") || r.Before.String() != "unprotected port 1" {
		t.Fatalf("migrate without a session: %+v", r)
	}
	// A session that comes later is used by the next probe.
	a.p.l1.SetSession(w.dir)
	tr.run("both armed once node0 has a session", func() bool { return a.is("armed", "port 1") && b.is("armed", "port 1") })
	tr.drain()
	if len(tr.errs) != 0 {
		t.Fatalf("%d errors, first %+v", len(tr.errs), tr.errs[0])
	}
}

// TestLayer1RelayedCommands: migrate and arm as ibpathd relays them.
func TestLayer1RelayedCommands(t *testing.T) {
	w := newL1World(t)
	a, b := w.pair()
	tr := &l1Traffic{t: t, pairs: [][2]*l1End{{a, b}}}
	tr.run("armed", func() bool { return a.is("armed", "port 1") && b.is("armed", "port 1") })
	l1 := a.p.l1
	cmd := ownerproto.Command{Op: ownerproto.OpMigrate, Device: l1Dev, QPN: a.qp.QPN(), DryRun: true}
	if r, ok := l1.Command(cmd); !ok || !r.OK || r.After.String() != "port 2" || !a.is("armed", "port 1") {
		t.Fatalf("dry run: %+v %v; %s", r, ok, a)
	}
	cmd.DryRun = false
	r, ok := l1.Command(cmd)
	if !ok || !r.OK || r.Before.String() != "armed port 1" || r.After.String() != "awaiting-peer port 2" {
		t.Fatalf("migrate an armed QP: %+v %v", r, ok)
	}
	// Not armed again yet: refused, with the reason.
	if r := l1.Migrate(l1Dev, a.qp.QPN(), false); r.OK || !strings.Contains(r.Error, "not armed") || !strings.Contains(r.Error, "awaiting-peer") {
		t.Fatalf("migrate a QP that is not armed: %+v", r)
	}
	tr.run("re-armed on port 2", func() bool { return a.is("armed", "port 2") })
	if r := l1.Arm(l1Dev, a.qp.QPN()); !r.OK || r.Before.String() != "armed port 2" {
		t.Fatalf("arm an armed QP: %+v", r)
	}
	if _, ok := l1.Command(ownerproto.Command{Op: ownerproto.OpArm, Device: l1Dev, QPN: 0x999}); ok {
		t.Fatal("layer 1 answered for a QP it does not know")
	}
	if r := l1.Arm("mlx5_9", 1); r.OK || !strings.Contains(r.Error, "layer 1 does not protect it") {
		t.Fatalf("arm of an unknown QP: %+v", r)
	}
	tr.drain()
	if len(tr.errs) != 0 {
		t.Fatalf("%d errors, first %+v", len(tr.errs), tr.errs[0])
	}
	if got := a.p.migrations(); len(got) == 0 || got[0] != "port 1 -> port 2" {
		t.Fatalf("migrations reported %q", got)
	}
}

// TestLayer1WithoutReadingEvents: the application on node0 never reads
// its async events, so layer 1 never sees PATH_MIG. The peer's cable is
// pulled (nothing happens on node0's ports); node0's HCA migrates by
// itself and the migration poll re-arms the QP.
func TestLayer1WithoutReadingEvents(t *testing.T) {
	w := newL1World(t, l1ProcOpts{deaf: true})
	a, b := w.pair()
	tr := &l1Traffic{t: t, pairs: [][2]*l1End{{a, b}}}
	tr.run("armed", func() bool { return a.is("armed", "port 1") && b.is("armed", "port 1") })
	l1Must(t, w.f.SetLink(w.f.Host("node1").HCA(l1Dev).Port(1), false))
	tr.run("node0 re-armed on port 2", func() bool { return a.is("armed", "port 2") })
	tr.drain()
	if len(tr.errs) != 0 {
		t.Fatalf("%d errors, first %+v", len(tr.errs), tr.errs[0])
	}
	if st := a.p.l1.Stats(); st.PolledMigrations != 1 || st.HWMigrations != 1 {
		t.Fatalf("node0 stats %+v: want the HCA's migration found by the poll", st)
	}
	// The PATH_MIG that told nobody is still in the application's queue.
	var unread []verbs.EventType
	for {
		ev, err := a.p.app.GetAsyncEvent()
		if err != nil {
			break
		}
		unread = append(unread, ev.Type)
		a.p.app.AckAsyncEvent(ev)
	}
	if !slices.Contains(unread, verbs.EventPathMig) {
		t.Fatalf("node0's unread events %v: the HCA did not migrate by itself", unread)
	}
}

// TestLayer1HandsOver: with both of node0's ports down APM cannot help;
// the hook hears it.
func TestLayer1HandsOver(t *testing.T) {
	w := newL1World(t)
	a, b := w.pair()
	tr := &l1Traffic{t: t, pairs: [][2]*l1End{{a, b}}}
	tr.run("armed", func() bool { return a.is("armed", "port 1") })
	hca := w.f.Host("node0").HCA(l1Dev)
	l1Must(t, w.f.SetLink(hca.Port(2), false))
	l1Must(t, w.f.SetLink(hca.Port(1), false))
	deadline := time.Now().Add(10 * time.Second)
	for len(a.p.handedOver()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no handover; %s", a)
		}
		time.Sleep(time.Millisecond)
	}
	ho := a.p.handedOver()
	if len(ho) != 1 || ho[0].QPN != a.qp.QPN() || ho[0].Device != l1Dev || ho[0].QP != a.qp || !strings.Contains(ho[0].Reason, "primary port down") {
		t.Fatalf("handovers %+v", ho)
	}
	if s, _ := a.status(); s.APM != "handed-over" || s.Layer != status.LayerNone || a.p.l1.Protects(l1Dev, a.qp.QPN()) {
		t.Fatalf("%+v: want handed over", s)
	}
}

// l1TypedQP is a QP the device reports with another type.
type l1TypedQP struct {
	verbs.QP
	typ verbs.QPType
}

func (q l1TypedQP) Query(mask verbs.QPAttrMask) (verbs.QPAttr, verbs.QPInitAttr, error) {
	a, ia, err := q.QP.Query(mask)
	ia.QPType = q.typ
	return a, ia, err
}

// TestLayer1Lifecycle: non-RC QPs pass through, a reset or destroyed QP
// and the QPs of a closed context are forgotten, and after Close every
// modify passes straight through.
func TestLayer1Lifecycle(t *testing.T) {
	w := newL1World(t)
	a, b := w.pair()
	l1 := a.p.l1
	if !l1.Protects(l1Dev, a.qp.QPN()) {
		t.Fatalf("%s: want protected after connect", a)
	}
	l1Must(t, l1.Modify(a.p.app, a.qp, &verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState))
	if _, ok := a.status(); ok {
		t.Fatal("a QP the application reset is still protected")
	}
	l1.Destroying(l1Dev, b.qp.QPN()) // not node0's: nothing happens
	b.p.l1.Destroying(l1Dev, b.qp.QPN())
	if _, ok := b.status(); ok {
		t.Fatal("a destroyed QP is still protected")
	}
	// A QP the device reports as UC (layer 1 protects RC QPs only).
	uc := w.open(0)
	uc.qp = l1TypedQP{uc.qp, verbs.QPTUC}
	w.connect(uc, w.open(1))
	if _, ok := uc.status(); ok || uc.qp.State() != verbs.QPSRTS {
		t.Fatalf("a UC QP: %s, state %v; want passed through to RTS", uc, uc.qp.State())
	}
	// Closing the application's context forgets its QPs.
	e, _ := w.pair()
	if !l1.Protects(l1Dev, e.qp.QPN()) {
		t.Fatalf("%s: want protected", e)
	}
	l1.ContextClosed(a.p.app)
	if _, ok := e.status(); ok {
		t.Fatal("a QP of a closed context is still protected")
	}
	l1.Close()
	c, d := w.open(0), w.open(1)
	w.connect(c, d)
	if _, ok := c.status(); ok || c.qp.State() != verbs.QPSRTS {
		t.Fatalf("after Close: %s, state %v; want passed through", c, c.qp.State())
	}
	if r, ok := l1.Command(ownerproto.Command{Op: ownerproto.OpArm, Device: l1Dev, QPN: c.qp.QPN()}); ok {
		t.Fatalf("a closed layer 1 answered %+v", r)
	}
}

// TestLayer1PeerCache: descriptions are reused for PeerTTL, failures are
// reported clearly, and a lookup that fails is not asked again at every
// probe.
func TestLayer1PeerCache(t *testing.T) {
	d := &shimtest.Adapters{}
	p := newL1Peers(time.Hour, time.Second, time.Now, nil)
	if _, err := p.Peer(verbs.AHAttr{DLID: 5}); !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "LID 5") {
		t.Fatalf("no session: %v", err)
	}
	p.setSession(d)
	for range 3 {
		if _, err := p.Peer(verbs.AHAttr{DLID: 5}); !errors.Is(err, ownerproto.ErrNotFound) || !strings.Contains(err.Error(), "describe the adapter holding LID 5 through ibpathd") {
			t.Fatalf("unknown LID: %v", err)
		}
	}
	if d.Calls() != 1 {
		t.Fatalf("%d lookups for one route within the TTL", d.Calls())
	}
	// A new session forgets failures.
	p.setSession(d)
	p.Peer(verbs.AHAttr{DLID: 5})
	if d.Calls() != 2 {
		t.Fatalf("%d lookups: a new session must be asked again", d.Calls())
	}
	// A typed nil session is no session.
	p.setSession((*ownerproto.Session)(nil))
	if _, err := p.Peer(verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GID{0xfe, 0x80, 15: 1}}}); !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "GID fe80::1") {
		t.Fatalf("nil session: %v", err)
	}
	p.close()
}
