package apm_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

var dualPort = sim.RailSpec{Config: sim.Config{Seed: 1}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 2, LMC: 1}

func TestModifyQPArmsAtConnect(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{})
	a, b := w.open(0, "mlx5_0"), w.open(1, "mlx5_0")
	w.connect(a, b, rcOpts{})
	w.connect(b, a, rcOpts{})
	// The alternate went into the application's own INIT->RTR and RTR->RTS.
	attr, _, err := a.qp.Query(verbs.QPAttrAltPath | verbs.QPAttrPathMigState)
	must(t, err)
	if attr.AltPortNum != 2 || attr.PathMigState != verbs.MigRearm {
		t.Fatalf("after connect: alt port %d, %v; want port 2 loaded with REARM", attr.AltPortNum, attr.PathMigState)
	}
	w.run(time.Millisecond)
	if s := a.state(t); s.State != fsm.APMRearming {
		t.Fatalf("no traffic yet: %+v, want rearming (ARMED needs a packet from the re-armed peer)", s)
	}
	w.ping(a, b)
	w.run(11 * time.Millisecond) // the ARMED poll has backed off to at most 10 ms
	for _, e := range []*end{a, b} {
		s := e.state(t)
		if s.State != fsm.APMArmed || s.Alternate != (fsm.PathRef{Port: 2}) || s.Primary != (fsm.PathRef{Port: 1}) {
			t.Fatalf("status %+v, want armed on port 1 with port 2 as alternate", s)
		}
	}
	if st := a.n.mgr.Stats(); st.Armed != 1 || st.Loads != 0 || st.ModifyFallbacks != 0 {
		t.Fatalf("stats %+v: arming must ride on the application's modifies", st)
	}
}

func TestRegisterArmsAConnectedQP(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{})
	a, b := w.pair("mlx5_0", rcOpts{plain: true})
	must(t, a.n.mgr.Register(a.ctx, a.qp))
	must(t, b.n.mgr.Register(b.ctx, b.qp))
	if err := a.n.mgr.Register(a.ctx, a.qp); err == nil {
		t.Fatal("registering twice was accepted")
	}
	w.run(time.Millisecond)
	if s := a.state(t); s.State != fsm.APMRearming {
		t.Fatalf("idle QP: %+v, want rearming until the peer's first packet", s)
	}
	w.ping(a, b)
	w.run(11 * time.Millisecond)
	if s := a.state(t); s.State != fsm.APMArmed || s.Alternate.Port != 2 {
		t.Fatalf("status %+v", s)
	}
	if st := a.n.mgr.Stats(); st.Loads != 1 {
		t.Fatalf("stats %+v: want one RTS->RTS load", st)
	}
}

// TestRegisterSeesPortsAsTheyAreNow: the manager saw port 2 go down, then
// heard no port event for a while (it protected no QP of the context, as
// when the next layer holds the QP); port 2 came back meanwhile. A QP
// registered then is armed on port 2: Register reads the ports as they
// are, not as the last event left them.
func TestRegisterSeesPortsAsTheyAreNow(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{})
	a, b := w.pair("mlx5_0", rcOpts{plain: true})
	must(t, a.n.mgr.Register(a.ctx, a.qp))
	must(t, b.n.mgr.Register(b.ctx, b.qp))
	w.ping(a, b)
	w.run(11 * time.Millisecond)
	a.n.mgr.Unregister(a.qp)
	port2 := w.nodes[0].host.HCA("mlx5_0").Port(2)
	must(t, w.f.SetLink(port2, false))
	w.run(5 * time.Millisecond) // PORT_ERR reaches the manager
	a.n.portDeaf = true
	must(t, w.f.SetLink(port2, true))
	w.run(200 * time.Millisecond) // PORT_ACTIVE does not
	if pa, err := a.ctx.QueryPort(2); err != nil || pa.State != verbs.PortActive {
		t.Fatalf("port 2 after the repair: %+v, %v", pa, err)
	}
	must(t, a.n.mgr.Register(a.ctx, a.qp))
	w.ping(a, b)
	w.run(11 * time.Millisecond)
	if s := a.state(t); s.State != fsm.APMArmed || s.Alternate.Port != 2 {
		t.Fatalf("registered after port 2 came back unheard: %+v, want armed on port 2", s)
	}
}

// nudgeWRID marks the zero-length WRITEs the tests' Config.Nudge posts.
const nudgeWRID = 1 << 62

// nudge is a Config.Nudge posting on the QP itself, as an embedder's
// data path would (unsignaled: no completion to hide on success).
func nudge(qp verbs.QP) error {
	_, err := qp.PostSend([]verbs.SendWR{{WRID: nudgeWRID, Opcode: verbs.WRRDMAWrite}})
	return err
}

// recovery measures the virtual time from pulling node0's port-1 cable to
// the completion of a WRITE posted just before: with proactive migration
// (and a nudge when nudged), or waiting for the HCA's own.
func recovery(t *testing.T, proactive, nudged bool) time.Duration {
	cfg := apm.Config{}
	if nudged {
		cfg.Nudge = nudge
	}
	w := newWorld(t, dualPort, cfg)
	var a, b *end
	if proactive {
		a, b = w.pair("mlx5_0", rcOpts{timeout: 14})
		w.run(time.Millisecond)
	} else {
		// Armed by hand, no manager: the HCA migrates after RC timeouts.
		a, b = w.pair("mlx5_0", rcOpts{timeout: 14, plain: true})
		for _, x := range [][2]*end{{a, b}, {b, a}} {
			pa, _ := x[1].ctx.QueryPort(2)
			must(t, x[0].qp.Modify(&verbs.QPAttr{AltAHAttr: verbs.AHAttr{DLID: pa.LID, PortNum: 2}, AltPortNum: 2,
				AltTimeout: 14, PathMigState: verbs.MigRearm}, verbs.QPAttrAltPath|verbs.QPAttrPathMigState))
		}
		w.ping(a, b)
	}
	tr := &traffic{a: a, b: b}
	tr.post(t, 1)
	t0 := w.f.Now()
	must(t, w.f.SetLink(w.nodes[0].host.HCA("mlx5_0").Port(1), false))
	for tr.ok+len(tr.errs) == 0 && w.f.Now()-t0 < 2*time.Second {
		w.run(w.step)
		tr.poll(t)
	}
	if tr.ok != 1 {
		t.Fatalf("proactive=%v nudged=%v: WRITE did not succeed: %+v", proactive, nudged, tr.errs)
	}
	if st := w.nodes[0].mgr.Stats(); nudged && (st.Nudges != 1 || st.NudgeFailures != 0) {
		t.Fatalf("stats %+v: want one nudge after the proactive migration", st)
	}
	return w.f.Now() - t0
}

func TestProactiveMigrationBeatsRCTimeouts(t *testing.T) {
	to := verbs.TimeoutDuration(14)
	pro, rc, nudged := recovery(t, true, false), recovery(t, false, false), recovery(t, true, true)
	t.Logf("recovery after a cable pull (timeout 14 = %v, retry_cnt 3): proactive %v, proactive with a nudge %v, waiting for RC timeouts %v",
		to, pro, nudged, rc)
	// With a nudge the peer's sequence NAK resends the lost WRITE at once:
	// the goal is 10 ms from PORT_ERR to the first good completion.
	if nudged > 10*time.Millisecond {
		t.Fatalf("proactive recovery with a nudge took %v, want at most 10 ms", nudged)
	}
	if rc < 4*to {
		t.Fatalf("the HCA migrated after %v, before retry_cnt+1 timeouts (%v)", rc, 4*to)
	}
	// Proactive: migrated at PORT_ERR; the WR in flight on the dead path is
	// resent at its first local ACK timeout.
	if pro > to+time.Millisecond {
		t.Fatalf("proactive recovery took %v, want about one timeout (%v)", pro, to)
	}
}

// withProfile is spec on a fabric of profile p.
func withProfile(spec sim.RailSpec, p sim.Profile) sim.RailSpec {
	spec.Config.Profile = p
	return spec
}

// keepsArmedAlternate reports whether a device of profile p refuses a new
// alternate while ARMED (it keeps the armed one, even with its port down).
func keepsArmedAlternate(p sim.Profile) bool { return p != sim.ProfileRdmavt }

func TestFlapCyclesKeepTrafficAlive(t *testing.T) {
	for _, prof := range sim.Profiles {
		t.Run(string(prof), func(t *testing.T) { flapCycles(t, prof) })
	}
}

func flapCycles(t *testing.T, prof sim.Profile) {
	// Without flap damping, which would keep the QPs off port 1 after
	// its second flap (TestFailbackDampedAfterFlaps).
	w := newWorld(t, withProfile(dualPort, prof), apm.Config{FailbackHold: 20 * time.Millisecond, ProbeInterval: 10 * time.Millisecond,
		Damping: pathsel.DampingConfig{Off: true}})
	a, b := w.pair("mlx5_0", rcOpts{})
	w.run(time.Millisecond)
	tr := &traffic{a: a, b: b}
	p1 := w.nodes[0].host.HCA("mlx5_0").Port(1)
	p2 := w.nodes[0].host.HCA("mlx5_0").Port(2)
	for cycle := 0; cycle < 6; cycle++ {
		p := p1
		if cycle%3 == 2 {
			p = p2 // the alternate's port flaps too
		}
		must(t, w.f.SetLink(p, false))
		// The peer's HCA followed with PATH_MIG and waits PeerWait (one
		// timeout and 20 ms) before it re-arms: then both sides arm.
		w.runTraffic(tr, 50*time.Millisecond, 50*time.Microsecond)
		// One port is healthy: both sides must be armed again (LMC on it),
		// except where the alternate's port died under an ARMED QP on a
		// device that takes no new alternate while ARMED: unprotected,
		// with the reason, until that port returns.
		for _, e := range []*end{a, b} {
			s := e.state(t)
			switch {
			case p == p2 && keepsArmedAlternate(prof) && e == a:
				if s.State != fsm.APMUnprotected || !strings.Contains(s.Reason, "no new alternate while ARMED") {
					t.Fatalf("cycle %d, alternate port down: %+v, want unprotected on the kept alternate", cycle, s)
				}
			case s.State != fsm.APMArmed:
				t.Fatalf("cycle %d, port %d down: %v side %+v, want armed on the healthy port", cycle, p.Num(), e.n.host.Name(), s)
			}
		}
		must(t, w.f.SetLink(p, true))
		w.runTraffic(tr, 100*time.Millisecond, 50*time.Microsecond)
		for _, e := range []*end{a, b} {
			s := e.state(t)
			if s.State != fsm.APMArmed || s.Primary != s.Home {
				t.Fatalf("cycle %d, all up again: %s %+v, want armed back home", cycle, e.n.host.Name(), s)
			}
		}
	}
	w.runTraffic(tr, 10*time.Millisecond, 50*time.Microsecond)
	w.run(50 * time.Millisecond)
	tr.poll(t)
	if len(tr.errs) != 0 {
		t.Fatalf("the application saw %d errors while a path was healthy, first %+v", len(tr.errs), tr.errs[0])
	}
	if tr.ok != tr.posted || tr.posted < 2000 {
		t.Fatalf("%d of %d WRITEs completed", tr.ok, tr.posted)
	}
	// Every slot holds the last WRITE posted to it, on both sides.
	for i := max(0, tr.posted-(len(a.buf)-64)/64); i < tr.posted; i++ {
		off := i * 64 % (len(a.buf) - 64)
		if !slices.Equal(a.buf[off:off+64], b.buf[off:off+64]) {
			t.Fatalf("WRITE %d did not land", i)
		}
	}
	st := w.nodes[0].mgr.Stats()
	if st.Migrations < 8 || st.Failbacks < 4 {
		t.Fatalf("node0 stats %+v: want a proactive migration and a failback per port-1 flap", st)
	}
}

func TestBothPortsDownHandsOver(t *testing.T) {
	for _, prof := range sim.Profiles {
		t.Run(string(prof), func(t *testing.T) {
			w := newWorld(t, withProfile(dualPort, prof), apm.Config{})
			a, b := w.pair("mlx5_0", rcOpts{})
			w.run(time.Millisecond)
			hca := w.nodes[0].host.HCA("mlx5_0")
			must(t, w.f.SetLink(hca.Port(2), false))
			w.runTraffic(&traffic{a: a, b: b}, 15*time.Millisecond, 100*time.Microsecond)
			s := a.state(t)
			if keepsArmedAlternate(prof) {
				if s.State != fsm.APMUnprotected || !strings.Contains(s.Reason, "no new alternate while ARMED") {
					t.Fatalf("alternate port down: %+v, want unprotected, ARMED on the dead alternate", s)
				}
			} else if s.State != fsm.APMArmed || s.Alternate != (fsm.PathRef{Port: 1, Bits: 1}) {
				t.Fatalf("alternate port down: %+v, want re-armed on the LMC path of port 1", s)
			}
			must(t, w.f.SetLink(hca.Port(1), false))
			w.run(time.Millisecond)
			s = a.state(t)
			if s.State != fsm.APMHandedOver || len(a.n.ho.got) != 1 || !strings.Contains(a.n.ho.got[0], "primary port down") {
				t.Fatalf("both ports down: %+v, handovers %q", s, a.n.ho.got)
			}
		})
	}
}

// TestPathMigErrHandsOver: the HCA migrates into a dead path. mlx5 says
// so with PATH_MIG_ERR; strict and rdmavt never raise it, and the QP is
// handed over when it fails there.
func TestPathMigErrHandsOver(t *testing.T) {
	for _, prof := range sim.Profiles {
		t.Run(string(prof), func(t *testing.T) { pathMigErrHandsOver(t, prof) })
	}
}

func pathMigErrHandsOver(t *testing.T, prof sim.Profile) {
	w := newWorld(t, sim.RailSpec{Config: sim.Config{Seed: 2, Profile: prof}, Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2}, apm.Config{})
	a, b := w.pair("mlx5_0", rcOpts{})
	w.run(time.Millisecond)
	// The peer's alternate port dies (nothing tells node0), then the
	// primary cable on the peer side: node0's HCA migrates into a dead path.
	peer := w.nodes[1].host.HCA("mlx5_0")
	must(t, w.f.SetLink(peer.Port(2), false))
	tr := &traffic{a: a, b: b}
	tr.post(t, 1)
	must(t, w.f.SetLink(peer.Port(1), false))
	w.run(time.Second)
	tr.poll(t)
	if len(tr.errs) != 1 || tr.errs[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("completions ok=%d errs=%+v, want RETRY_EXC_ERR surfacing", tr.ok, tr.errs)
	}
	s := a.state(t)
	if prof == sim.ProfileMlx5 {
		if s.State != fsm.APMHandedOver || !strings.Contains(s.Reason, "PATH_MIG_ERR") {
			t.Fatalf("status %+v, want handed over on PATH_MIG_ERR", s)
		}
		if !slices.Contains(a.n.events, verbs.EventPathMigErr) {
			t.Fatalf("events %v lack PATH_MIG_ERR", a.n.events)
		}
		return
	}
	if slices.Contains(a.n.events, verbs.EventPathMigErr) {
		t.Fatalf("events %v: profile %s never raises PATH_MIG_ERR", a.n.events, prof)
	}
	if s.State != fsm.APMHandedOver || len(a.n.ho.got) != 1 {
		t.Fatalf("status %+v, handovers %q: want handed over without PATH_MIG_ERR", s, a.n.ho.got)
	}
}

func TestLMCOnlyFabric(t *testing.T) {
	w := newWorld(t, sim.RailSpec{Config: sim.Config{Seed: 3}, Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 1, LMC: 2}, apm.Config{})
	a, b := w.pair("mlx5_0", rcOpts{})
	w.run(11 * time.Millisecond)
	if s := a.state(t); s.State != fsm.APMArmed || s.Alternate != (fsm.PathRef{Port: 1, Bits: 1}) {
		t.Fatalf("single-port LMC fabric: %+v, want armed on path bits 1", s)
	}
	must(t, a.n.mgr.Migrate(a.qp))
	if s := a.state(t); s.State != fsm.APMAwaitPeer {
		t.Fatalf("right after its own migration: %+v, want awaiting-peer", s)
	}
	tr := &traffic{a: a, b: b}
	w.runTraffic(tr, 40*time.Millisecond, 50*time.Microsecond) // the peer re-arms after PeerWait
	if len(tr.errs) != 0 || tr.ok == 0 {
		t.Fatalf("traffic on the LMC path: ok %d errs %v", tr.ok, tr.errs)
	}
	if s := a.state(t); s.Primary != (fsm.PathRef{Port: 1, Bits: 1}) || s.State != fsm.APMArmed {
		t.Fatalf("after migrating: %+v, want primary bits 1 and re-armed", s)
	}
}

func TestManualMigrateAndMaintenance(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{Failback: fsm.FailbackManual})
	var ends [][2]*end
	for i := 0; i < 3; i++ {
		a, b := w.pair("mlx5_0", rcOpts{})
		ends = append(ends, [2]*end{a, b})
	}
	a0 := ends[0][0]
	w.run(time.Millisecond)
	dry, err := a0.n.mgr.MigratePort(a0.ctx, 1, true)
	must(t, err)
	if len(dry) != 3 || a0.port(t) != 1 {
		t.Fatalf("dry run listed %d QPs and moved to port %d", len(dry), a0.port(t))
	}
	moved, err := a0.n.mgr.MigratePort(a0.ctx, 1, false)
	must(t, err)
	if len(moved) != 3 {
		t.Fatalf("moved %d", len(moved))
	}
	for _, e := range ends {
		if e[0].port(t) != 2 {
			t.Fatalf("QP %#x still on port %d", e[0].qp.QPN(), e[0].port(t))
		}
	}
	tr := &traffic{a: ends[1][0], b: ends[1][1]}
	w.runTraffic(tr, 5*time.Millisecond, 50*time.Microsecond)
	if len(tr.errs) != 0 || ends[1][1].port(t) != 2 {
		t.Fatalf("peer did not follow: errs %v, peer port %d", tr.errs, ends[1][1].port(t))
	}
	w.runTraffic(&traffic{a: a0, b: ends[0][1]}, 300*time.Millisecond, 100*time.Microsecond)
	// Manual failback: home is armed as the alternate but nobody moves.
	if s := a0.state(t); s.State != fsm.APMArmed || s.Primary.Port != 2 || s.Alternate != s.Home {
		t.Fatalf("manual failback: %+v, want on port 2 with home armed", s)
	}
	must(t, a0.n.mgr.Migrate(a0.qp))
	if a0.port(t) != 1 {
		t.Fatal("operator migrate did not bring the QP home")
	}
	if err := a0.n.mgr.Migrate(a0.qp); err == nil {
		t.Fatal("migrating a QP that is not armed again must fail")
	}
}

func TestAutoFailbackWaitsForHold(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{FailbackHold: 100 * time.Millisecond})
	a, b := w.pair("mlx5_0", rcOpts{})
	w.run(11 * time.Millisecond)
	tr := &traffic{a: a, b: b}
	p1 := w.nodes[0].host.HCA("mlx5_0").Port(1)
	must(t, w.f.SetLink(p1, false))
	w.run(time.Millisecond)
	if a.port(t) != 2 {
		t.Fatal("no proactive migration")
	}
	must(t, w.f.SetLink(p1, true))
	w.runTraffic(tr, 50*time.Millisecond, 100*time.Microsecond)
	if a.port(t) != 2 {
		t.Fatal("failed back before the hold-down")
	}
	// PeerWait (one timeout plus 20 ms) and the hold-down later: home.
	w.runTraffic(tr, 120*time.Millisecond, 100*time.Microsecond)
	if a.port(t) != 1 {
		t.Fatalf("not back home after the hold-down: %+v", a.state(t))
	}
	if len(tr.errs) != 0 {
		t.Fatalf("errors %+v", tr.errs)
	}
}

func TestUnsupportedIsSkippedWithReason(t *testing.T) {
	w := newWorld(t, sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 1, LinkLayer: verbs.LinkLayerEthernet}, apm.Config{})
	a, b := w.pair("rxe0", rcOpts{})
	w.run(time.Millisecond)
	s := a.state(t)
	if s.State != fsm.APMUnsupported || !strings.Contains(s.Reason, "InfiniBand") {
		t.Fatalf("RoCE: %+v, want unsupported with the reason", s)
	}
	tr := &traffic{a: a, b: b}
	w.runTraffic(tr, time.Millisecond, 50*time.Microsecond)
	if tr.ok == 0 || len(tr.errs) != 0 {
		t.Fatal("RoCE traffic broken by APM")
	}
	if err := a.n.mgr.Arm(a.qp); err == nil || !strings.Contains(err.Error(), "unsupported") {
		t.Fatalf("arm on RoCE: %v", err)
	}

	w2 := newWorld(t, sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2, NoAPM: true}, apm.Config{})
	c, _ := w2.pair("mlx5_0", rcOpts{})
	if s := c.state(t); s.State != fsm.APMUnsupported || !strings.Contains(s.Reason, "AUTO_PATH_MIG") {
		t.Fatalf("no APM capability: %+v", s)
	}
}

func TestConfigValidation(t *testing.T) {
	bad := []apm.Config{{PollMin: time.Millisecond, PollMax: time.Microsecond}, {Failback: 7}, {ProbeInterval: -1}, {MigrationPoll: -1}}
	for _, c := range bad {
		if _, err := apm.New(sim.New(sim.Config{}), c, &nopPeers{}, nil); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	if _, err := apm.New(nil, apm.Config{}, &nopPeers{}, nil); err == nil {
		t.Error("nil clock accepted")
	}
}

func TestOwnMigrationWaitsForThePeer(t *testing.T) {
	for _, followed := range []bool{true, false} {
		w := newWorld(t, dualPort, apm.Config{PeerWait: 30 * time.Millisecond})
		a, _ := w.pair("mlx5_0", rcOpts{})
		w.run(11 * time.Millisecond)
		must(t, a.n.mgr.Migrate(a.qp))
		w.run(10 * time.Millisecond)
		if s := a.state(t); s.State != fsm.APMAwaitPeer {
			t.Fatalf("followed=%v: 10 ms after its own migration: %+v, want awaiting-peer (still MIGRATED)", followed, s)
		}
		attr, _, err := a.qp.Query(verbs.QPAttrPathMigState)
		must(t, err)
		if attr.PathMigState != verbs.MigMigrated {
			t.Fatalf("while awaiting the peer the QP is %v, want MIGRATED (its packets carry MigReq)", attr.PathMigState)
		}
		if followed {
			a.n.mgr.PeerFollowed(a.qp)
		} else {
			w.run(25 * time.Millisecond) // past PeerWait
		}
		if s := a.state(t); s.State != fsm.APMRearming || s.Alternate != (fsm.PathRef{Port: 1}) {
			t.Fatalf("followed=%v: %+v, want rearming with home as the alternate", followed, s)
		}
	}
}

func TestApplicationTeardownIsNotHandedOver(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{})
	a, _ := w.pair("mlx5_0", rcOpts{})
	w.run(11 * time.Millisecond)
	must(t, a.n.mgr.ModifyQP(a.ctx, a.qp, &verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState))
	w.run(100 * time.Millisecond)
	if len(a.n.ho.got) != 0 {
		t.Fatalf("the application's own ERR was handed over: %q", a.n.ho.got)
	}
	if _, ok := a.n.mgr.QPStatus(a.qp); ok {
		t.Fatal("a QP the application tore down is still managed")
	}
}

func TestAlternateLoadedAtRTRHasATimeout(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{})
	a, b := w.open(0, "mlx5_0"), w.open(1, "mlx5_0")
	mod := func(attr *verbs.QPAttr, mask verbs.QPAttrMask) {
		must(t, a.n.mgr.ModifyQP(a.ctx, a.qp, attr, mask))
	}
	mod(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	pa, _ := b.ctx.QueryPort(1)
	mod(&verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: verbs.AHAttr{DLID: pa.LID, PortNum: 1}, PathMTU: verbs.MTU1024,
		DestQPN: b.qp.QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 1},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	attr, _, err := a.qp.Query(verbs.QPAttrAltPath)
	must(t, err)
	if attr.AltPortNum != 2 || attr.AltTimeout == 0 {
		t.Fatalf("alternate at RTR: port %d timeout %d; a zero timeout would wait forever after a migration", attr.AltPortNum, attr.AltTimeout)
	}
	// An application that sets PATH_MIG_STATE itself at RTR->RTS keeps it.
	mod(&verbs.QPAttr{QPState: verbs.QPSRTS, Timeout: 12, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1, PathMigState: verbs.MigMigrated},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
			verbs.QPAttrMaxQPRdAtomic|verbs.QPAttrPathMigState)
	attr, _, err = a.qp.Query(verbs.QPAttrPathMigState)
	must(t, err)
	if attr.PathMigState != verbs.MigMigrated || attr.AltTimeout != 14 {
		t.Fatalf("after the application's own PATH_MIG_STATE: %v, alt timeout %d", attr.PathMigState, attr.AltTimeout)
	}
	// Layer 1 still arms it, with its own RTS->RTS load at the next probe.
	w.connect(b, a, rcOpts{})
	w.run(apm.DefaultConfig.ProbeInterval + time.Millisecond)
	w.ping(a, b)
	w.run(11 * time.Millisecond)
	if s := a.state(t); s.State != fsm.APMArmed {
		t.Fatalf("%+v, want armed after the probe", s)
	}
}

func TestNoMigrationOntoAPortWhosePortErrIsQueued(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{})
	a, _ := w.pair("mlx5_0", rcOpts{})
	w.run(11 * time.Millisecond)
	hca := w.nodes[0].host.HCA("mlx5_0")
	// Both cables at once: two PORT_ERRs are queued before the manager
	// reads the first.
	must(t, w.f.SetLink(hca.Port(1), false))
	must(t, w.f.SetLink(hca.Port(2), false))
	w.run(time.Millisecond)
	s := a.state(t)
	if s.State != fsm.APMHandedOver || s.Migrations != 0 {
		t.Fatalf("%+v: want handed over without migrating onto port 2, which is down too", s)
	}
	if a.port(t) != 1 {
		t.Fatalf("the QP moved to port %d", a.port(t))
	}
}

// refusingQP is a QP whose device refuses any alternate path.
type refusingQP struct{ verbs.QP }

func (q refusingQP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if mask&verbs.QPAttrAltPath != 0 {
		return &verbs.Error{Op: "ibv_modify_qp", Errno: verbs.EINVAL, Detail: "alternate path not supported"}
	}
	return q.QP.Modify(attr, mask)
}

func TestRefusedAlternateKeepsTheModifyAndTheReason(t *testing.T) {
	w := newWorld(t, dualPort, apm.Config{})
	a, b := w.open(0, "mlx5_0"), w.open(1, "mlx5_0")
	a.qp = refusingQP{a.qp}
	w.connect(a, b, rcOpts{})
	w.connect(b, a, rcOpts{})
	if st := a.qp.State(); st != verbs.QPSRTS {
		t.Fatalf("the application's QP is %v, want RTS: a refused alternate must not fail its modifies", st)
	}
	s := a.state(t)
	if s.State != fsm.APMUnprotected || !strings.Contains(s.Reason, "refused the other-port alternate on port 2 in the application's RTR->RTS") ||
		!strings.Contains(s.Reason, "alternate path not supported") {
		t.Fatalf("%+v: want unprotected with the device's refusal", s)
	}
	if st := a.n.mgr.Stats(); st.ModifyFallbacks != 2 {
		t.Fatalf("stats %+v: want both modifies retried without the alternate", st)
	}
	tr := &traffic{a: a, b: b}
	w.runTraffic(tr, time.Millisecond, 50*time.Microsecond)
	w.run(time.Millisecond)
	tr.poll(t)
	if tr.ok == 0 || len(tr.errs) != 0 {
		t.Fatalf("traffic on the unprotected QP: ok %d errs %v", tr.ok, tr.errs)
	}
	if s := a.state(t); s.State != fsm.APMUnprotected || !strings.Contains(s.Reason, "alternate path not supported") {
		t.Fatalf("after probes: %+v, want the refusal still as the reason", s)
	}
}

// TestHWMigrationWaitsForPeer: the peer's primary cable is cut, nothing
// tells node0, and its HCA migrates after retry_cnt timeouts. On strict
// and rdmavt the requester's PATH_MIG comes at that moment, before the
// peer has followed; the first resend on the new path is lost. Re-arming
// on PATH_MIG would clear MigReq on the next resend, which the peer, still
// ARMED on the old path, would drop: the WRITE would fail with
// RETRY_EXC_ERR. Layer 1 waits for the peer instead, and re-arms after.
func TestHWMigrationWaitsForPeer(t *testing.T) {
	for _, prof := range sim.Profiles {
		t.Run(string(prof), func(t *testing.T) {
			w := newWorld(t, withProfile(dualPort, prof), apm.Config{})
			a, b := w.pair("mlx5_0", rcOpts{})
			w.run(time.Millisecond)
			if s := a.state(t); s.State != fsm.APMArmed {
				t.Fatalf("before the fault: %+v, want armed", s)
			}
			// The new path loses requests until 1 ms after the migration.
			alt := w.nodes[0].host.HCA("mlx5_0").Port(2)
			must(t, w.f.SetLoss(alt, 1, 0))
			// node1 does not hear its own PORT_ERR (its layer 1 would
			// migrate first): it stays ARMED on the dead path.
			w.nodes[1].portDeaf = true
			must(t, w.f.SetLink(w.nodes[1].host.HCA("mlx5_0").Port(1), false))
			tr := &traffic{a: a, b: b}
			tr.post(t, 1)
			var migAt time.Duration
			w.f.SetTracer(func(r sim.TraceRecord) {
				if migAt == 0 && r.Kind == "apm" && strings.Contains(r.Detail, "retries exhausted") {
					migAt = r.At
				}
			})
			healed := false
			for i := 0; i < 4000 && tr.ok+len(tr.errs) == 0; i++ {
				w.run(100 * time.Microsecond)
				tr.poll(t)
				if !healed && migAt != 0 {
					healed = true
					w.f.At(migAt+time.Millisecond, func() { _ = w.f.SetLoss(alt, 0, 0) })
				}
			}
			if tr.ok != 1 || len(tr.errs) != 0 {
				t.Fatalf("ok=%d errs=%+v: the WRITE must complete on the new path", tr.ok, tr.errs)
			}
			w.run(50 * time.Millisecond)
			if s := a.state(t); s.Primary.Port != 2 || (s.State != fsm.APMArmed && s.State != fsm.APMRearming && s.State != fsm.APMUnprotected) {
				t.Fatalf("after the migration: %+v, want on port 2 and re-armed as far as the fabric allows", s)
			}
			if st := w.nodes[0].mgr.Stats(); st.HWMigrations != 1 {
				t.Fatalf("stats %+v: want one migration by the HCA", st)
			}
		})
	}
}

// TestPeerWaitCoversLateTimers: after a proactive migration the WR that
// was in flight is resent, with MigReq, at the QP's next local ACK timer,
// and only that moves the peer. A timer fires late (a software
// transport's by kernel ticks); if layer 1 re-armed before the resend,
// the resend would lose MigReq and the peer, still on the old path, would
// drop it until the WR failed. The default PeerWait covers the lateness.
func TestPeerWaitCoversLateTimers(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		spec := dualPort
		spec.Config = sim.Config{Seed: seed, TimerLate: 10 * time.Millisecond}
		w := newWorld(t, spec, apm.Config{})
		a, b := w.pair("mlx5_0", rcOpts{}) // timeout 10: 4.2 ms
		w.run(time.Millisecond)
		tr := &traffic{a: a, b: b}
		tr.post(t, 1)
		must(t, w.f.SetLink(w.nodes[0].host.HCA("mlx5_0").Port(1), false))
		for i := 0; i < 5000 && tr.ok+len(tr.errs) == 0; i++ {
			w.run(100 * time.Microsecond)
			tr.poll(t)
		}
		if tr.ok != 1 || len(tr.errs) != 0 {
			t.Fatalf("seed %d: ok=%d errs=%+v; the in-flight WRITE must complete on the new path", seed, tr.ok, tr.errs)
		}
	}
}
