package sim_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

func migState(t testing.TB, q verbs.QP) verbs.MigState {
	t.Helper()
	a, _, err := q.Query(verbs.QPAttrPathMigState)
	must(t, err)
	return a.PathMigState
}

func portOf(t testing.TB, q verbs.QP) uint8 {
	t.Helper()
	a, _, err := q.Query(verbs.QPAttrPort)
	must(t, err)
	return a.PortNum
}

// armBoth loads the port-2 alternate on both ends and waits for ARMED.
func armBoth(t testing.TB, c *conn) {
	t.Helper()
	armAlt(t, c.a, c.b, 2, 0)
	armAlt(t, c.b, c.a, 2, 0)
	if m := migState(t, c.a.qp); m != verbs.MigRearm {
		t.Fatalf("right after REARM the QP is %v, want REARM", m)
	}
	c.handshake(t)
	if a, b := migState(t, c.a.qp), migState(t, c.b.qp); a != verbs.MigArmed || b != verbs.MigArmed {
		t.Fatalf("after the load delay and a packet each way: %v / %v, want ARMED / ARMED", a, b)
	}
}

// stream posts signaled WRITEs first..first+n-1 of 64 distinct bytes each,
// one every gap.
func stream(t testing.TB, c *conn, first, n int, gap time.Duration) {
	t.Helper()
	for i := first; i < first+n; i++ {
		off := i * 64 % (len(c.a.buf) - 64)
		fill(c.a.buf[off:off+64], byte(i))
		c.a.post(t, write(uint64(i), c.a.sge(off, 64), c.b.mr.Addr()+uint64(off), c.b.mr.RKey()))
		c.run(gap)
	}
}

func TestArmLoadsAfterDelay(t *testing.T) {
	c := newConn(t, connOpts{})
	if m := migState(t, c.a.qp); m != verbs.MigMigrated {
		t.Fatalf("a fresh QP is %v, want MIGRATED", m)
	}
	armBoth(t, c)
	if evs := c.a.events(); len(evs) != 0 {
		t.Fatalf("arming raised events %v; Linux verbs has no ARMED event", evs)
	}
}

func TestArmNeedsThePeer(t *testing.T) {
	c := newConn(t, connOpts{})
	armAlt(t, c.a, c.b, 2, 0)
	c.run(time.Millisecond)
	if m := migState(t, c.a.qp); m != verbs.MigRearm {
		t.Fatalf("no packet from the peer yet: %v, want REARM", m)
	}
	// The peer is still MIGRATED: its packets carry MigReq, so traffic
	// does not arm us either.
	c.handshake(t)
	if m := migState(t, c.a.qp); m != verbs.MigRearm {
		t.Fatalf("peer not re-armed: %v, want REARM", m)
	}
	armAlt(t, c.b, c.a, 2, 0)
	c.handshake(t)
	if a, b := migState(t, c.a.qp), migState(t, c.b.qp); a != verbs.MigArmed || b != verbs.MigArmed {
		t.Fatalf("both re-armed and a packet each way: %v / %v", a, b)
	}
}

func TestArmWaitsForAlternatePort(t *testing.T) {
	c := newConn(t, connOpts{})
	alt := c.a.hca.Port(2)
	must(t, c.f.SetLink(alt, false))
	armAlt(t, c.a, c.b, 2, 0)
	armAlt(t, c.b, c.a, 2, 0)
	c.handshake(t)
	c.run(time.Millisecond)
	if m := migState(t, c.a.qp); m != verbs.MigRearm {
		t.Fatalf("alternate port down: QP is %v, want REARM", m)
	}
	must(t, c.f.SetLink(alt, true))
	c.run(sim.DefaultConfig.PortActivateDelay)
	c.handshake(t)
	if m := migState(t, c.a.qp); m != verbs.MigArmed {
		t.Fatalf("after the alternate port came back: %v, want ARMED", m)
	}
}

func TestPortDownMigratesAndTrafficContinues(t *testing.T) {
	c := newConn(t, connOpts{})
	armBoth(t, c)
	stream(t, c, 0, 20, 10*time.Microsecond)
	must(t, c.f.SetLink(c.a.hca.Port(1), false))
	stream(t, c, 20, 20, 10*time.Microsecond)
	c.run(100 * time.Millisecond)

	wcs := c.a.poll(t)
	if len(wcs) != 40 {
		t.Fatalf("%d completions, want 40", len(wcs))
	}
	for i, w := range wcs {
		if w.Status != verbs.WCSuccess || w.WRID != uint64(i) {
			t.Fatalf("completion %d = %+v: the application saw an error while a path was healthy", i, w)
		}
	}
	for i := 0; i < 40; i++ {
		off := i * 64
		if !bytes.Equal(c.b.buf[off:off+64], c.a.buf[off:off+64]) {
			t.Fatalf("write %d did not land", i)
		}
	}
	if ev := c.a.events(); !slices.Equal(ev, []verbs.EventType{verbs.EventPortErr, verbs.EventPathMig}) {
		t.Fatalf("requester events %v, want [PORT_ERR PATH_MIG]", ev)
	}
	if ev := c.b.events(); !slices.Equal(ev, []verbs.EventType{verbs.EventPathMig}) {
		t.Fatalf("responder events %v, want [PATH_MIG]", ev)
	}
	if p, q := portOf(t, c.a.qp), portOf(t, c.b.qp); p != 2 || q != 2 {
		t.Fatalf("after migration ports are %d / %d, want 2 / 2", p, q)
	}
	if m := migState(t, c.a.qp); m != verbs.MigMigrated {
		t.Fatalf("after migration: %v, want MIGRATED", m)
	}
	// The hardware migrates only after retry_cnt timeouts on the primary.
	if st := c.f.Stats(); st.Migrations != 2 || st.RetryTimeouts < 4 {
		t.Fatalf("stats %+v: want 2 migrations after >= 4 timeouts", st)
	}
}

func TestMigrationTimeIsRetryBudget(t *testing.T) {
	c := newConn(t, connOpts{})
	armBoth(t, c)
	must(t, c.f.SetLink(c.a.hca.Port(1), false))
	t0 := c.f.Now()
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	var done time.Duration
	for i := 0; i < 10000 && done == 0; i++ {
		c.run(100 * time.Microsecond)
		if len(c.a.poll(t)) > 0 {
			done = c.f.Now() - t0
		}
	}
	// 1 + retry_cnt (3) local ACK timeouts of 4.19 ms before migrating.
	budget := 4 * verbs.TimeoutDuration(10)
	if done < budget || done > budget+time.Millisecond {
		t.Fatalf("completed %v after the post; want just after %v (4 timeouts)", done, budget)
	}
}

// TestBothPathsDownGivesPathMigErr: with both local ports down, the mlx5
// profile refuses to migrate onto the dead alternate and raises
// PATH_MIG_ERR; strict and rdmavt (qib_restart_rc) migrate anyway, raise
// PATH_MIG at once and fail on the alternate after its retries. Either
// way the oldest WR fails with RETRY_EXC_ERR.
func TestBothPathsDownGivesPathMigErr(t *testing.T) {
	for _, tc := range []struct {
		prof     sim.Profile
		events   []verbs.EventType
		timeouts uint64
	}{
		{sim.ProfileStrict, []verbs.EventType{verbs.EventPortErr, verbs.EventPortErr, verbs.EventPathMig}, 8},
		{sim.ProfileRdmavt, []verbs.EventType{verbs.EventPortErr, verbs.EventPortErr, verbs.EventPathMig}, 8},
		{sim.ProfileMlx5, []verbs.EventType{verbs.EventPortErr, verbs.EventPortErr, verbs.EventPathMigErr}, 4},
	} {
		t.Run(string(tc.prof), func(t *testing.T) {
			c := newConn(t, connOpts{profile: tc.prof})
			armBoth(t, c)
			must(t, c.f.SetLink(c.a.hca.Port(2), false))
			must(t, c.f.SetLink(c.a.hca.Port(1), false))
			c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()), write(2, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
			c.run(time.Second)
			if st := statuses(c.a.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCRetryExcErr, verbs.WCWRFlushErr}) {
				t.Fatalf("completions %v, want [RETRY_EXC_ERR WR_FLUSH_ERR]", st)
			}
			if ev := c.a.events(); !slices.Equal(ev, tc.events) {
				t.Fatalf("events %v, want %v", ev, tc.events)
			}
			if s := c.a.qp.State(); s != verbs.QPSErr {
				t.Fatalf("QP is %v, want ERR", s)
			}
			if st := c.f.Stats(); st.RetryTimeouts != tc.timeouts {
				t.Fatalf("%d timeouts, want %d", st.RetryTimeouts, tc.timeouts)
			}
		})
	}
}

// TestRemoteAlternateBrokenGivesPathMigErr: the local alternate port is
// fine, the peer's is not. The HCA migrates and gets no answer on the new
// path: mlx5 reports PATH_MIG_ERR; strict and rdmavt reported PATH_MIG at
// the migration and report nothing more. The WR fails after 4 timeouts on
// each path.
func TestRemoteAlternateBrokenGivesPathMigErr(t *testing.T) {
	for _, tc := range []struct {
		prof   sim.Profile
		events []verbs.EventType
	}{
		{sim.ProfileStrict, []verbs.EventType{verbs.EventPortErr, verbs.EventPathMig}},
		{sim.ProfileRdmavt, []verbs.EventType{verbs.EventPortErr, verbs.EventPathMig}},
		{sim.ProfileMlx5, []verbs.EventType{verbs.EventPortErr, verbs.EventPathMigErr}},
	} {
		t.Run(string(tc.prof), func(t *testing.T) {
			c := newConn(t, connOpts{profile: tc.prof})
			armBoth(t, c)
			must(t, c.f.SetLink(c.b.hca.Port(2), false))
			must(t, c.f.SetLink(c.a.hca.Port(1), false))
			c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
			c.run(time.Second)
			if st := statuses(c.a.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCRetryExcErr}) {
				t.Fatalf("completions %v, want [RETRY_EXC_ERR]", st)
			}
			if ev := c.a.events(); !slices.Equal(ev, tc.events) {
				t.Fatalf("events %v, want %v", ev, tc.events)
			}
			if st := c.f.Stats(); st.RetryTimeouts != 8 {
				t.Fatalf("%d timeouts, want 8 (4 on each path)", st.RetryTimeouts)
			}
		})
	}
}

func TestUnarmedPeerDropsMigratedTraffic(t *testing.T) {
	c := newConn(t, connOpts{})
	armAlt(t, c.a, c.b, 2, 0) // only the requester is armed
	c.run(time.Millisecond)
	must(t, c.f.SetLink(c.a.hca.Port(1), false))
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(time.Second)
	if st := statuses(c.a.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCRetryExcErr}) {
		t.Fatalf("completions %v, want [RETRY_EXC_ERR]", st)
	}
	if ev := c.b.events(); len(ev) != 0 {
		t.Fatalf("unarmed responder raised %v; it must drop packets from an unknown path", ev)
	}
}

func TestManualMigration(t *testing.T) {
	c := newConn(t, connOpts{})
	armBoth(t, c)
	must(t, c.a.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState))
	if p := portOf(t, c.a.qp); p != 2 {
		t.Fatalf("after manual migration the QP is on port %d, want 2", p)
	}
	if ev := c.a.events(); !slices.Equal(ev, []verbs.EventType{verbs.EventPathMig}) {
		t.Fatalf("local events %v, want [PATH_MIG]", ev)
	}
	// Migrating again without re-arming is refused.
	err := c.a.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState)
	if err != nil {
		t.Fatalf("MIGRATED on a MIGRATED QP must be a no-op, got %v", err)
	}
	stream(t, c, 0, 5, 10*time.Microsecond)
	c.run(time.Millisecond)
	if st := statuses(c.a.poll(t)); len(st) != 5 || slices.ContainsFunc(st, func(s verbs.WCStatus) bool { return s != verbs.WCSuccess }) {
		t.Fatalf("traffic after manual migration: %v", st)
	}
	if ev := c.b.events(); !slices.Equal(ev, []verbs.EventType{verbs.EventPathMig}) {
		t.Fatalf("peer events %v, want [PATH_MIG] when traffic first arrives on its alternate", ev)
	}
	if p := portOf(t, c.b.qp); p != 2 {
		t.Fatalf("peer on port %d, want 2", p)
	}
}

func TestRearmAndSwitchBack(t *testing.T) {
	c := newConn(t, connOpts{})
	armBoth(t, c)
	p1 := c.a.hca.Port(1)
	must(t, c.f.SetLink(p1, false))
	stream(t, c, 0, 3, 10*time.Microsecond)
	c.run(50 * time.Millisecond)
	if p := portOf(t, c.a.qp); p != 2 {
		t.Fatalf("not migrated: port %d", p)
	}
	if err := c.a.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigRearm}, verbs.QPAttrPathMigState); verbs.ErrnoOf(err) != verbs.EINVAL {
		t.Fatalf("REARM without loading a new alternate after migration: %v, want EINVAL", err)
	}
	must(t, c.f.SetLink(p1, true))
	c.run(sim.DefaultConfig.PortActivateDelay + time.Microsecond)
	armAlt(t, c.a, c.b, 1, 0)
	armAlt(t, c.b, c.a, 1, 0)
	c.handshake(t)
	if m := migState(t, c.a.qp); m != verbs.MigArmed {
		t.Fatalf("re-armed with port 1: %v", m)
	}
	must(t, c.a.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState))
	stream(t, c, 3, 3, 10*time.Microsecond)
	c.run(time.Millisecond)
	if p, q := portOf(t, c.a.qp), portOf(t, c.b.qp); p != 1 || q != 1 {
		t.Fatalf("after switch-back ports %d / %d, want 1 / 1", p, q)
	}
	for _, w := range c.a.poll(t) {
		if w.Status != verbs.WCSuccess {
			t.Fatalf("error completion %+v", w)
		}
	}
}

// lmcFabric: two hosts, one single-port HCA each, on different leaves, so
// traffic crosses a spine chosen by the DLID; LMC 1 gives each port two
// LIDs and therefore two spine paths.
func lmcFabric(t *testing.T) *conn {
	f := sim.New(sim.Config{Seed: 1})
	var ends [2]*end
	o := defaults(connOpts{})
	for i := range ends {
		h, err := f.AddHost([]string{"x", "y"}[i])
		must(t, err)
		a, err := h.AddHCA(sim.HCASpec{Name: "mlx5_0", Ports: 1, LMC: 1})
		must(t, err)
		leaf, err := f.AddLeaf([]string{"leafX", "leafY"}[i])
		must(t, err)
		must(t, f.Cable(a.Port(1), leaf))
		ends[i] = openEnd(t, h, o)
	}
	c := &conn{f: f, a: ends[0], b: ends[1]}
	connectRC(t, c.a, c.b, o)
	connectRC(t, c.b, c.a, o)
	return c
}

func TestLMCAlternateSurvivesSpineFailure(t *testing.T) {
	c := lmcFabric(t)
	armAlt(t, c.a, c.b, 1, 1)
	armAlt(t, c.b, c.a, 1, 1)
	c.handshake(t)
	if m := migState(t, c.a.qp); m != verbs.MigArmed {
		t.Fatalf("LMC alternate: %v", m)
	}
	pa, err := c.b.ctx.QueryPort(1)
	must(t, err)
	primarySpine := c.f.Spine(int(pa.LID) % 2)
	must(t, c.f.FailSwitch(primarySpine))
	stream(t, c, 0, 10, 10*time.Microsecond)
	c.run(100 * time.Millisecond)
	st := statuses(c.a.poll(t))
	if len(st) != 10 || slices.ContainsFunc(st, func(s verbs.WCStatus) bool { return s != verbs.WCSuccess }) {
		t.Fatalf("completions %v, want 10 successes", st)
	}
	if ev := c.a.events(); !slices.Equal(ev, []verbs.EventType{verbs.EventPathMig}) {
		t.Fatalf("events %v: a spine failure raises no port event, only PATH_MIG", ev)
	}
	a, _, err := c.a.qp.Query(verbs.QPAttrAV)
	must(t, err)
	if a.AHAttr.DLID != pa.LID+1 || a.AHAttr.SrcPathBits != 1 {
		t.Fatalf("after migration DLID %d path bits %d, want %d / 1", a.AHAttr.DLID, a.AHAttr.SrcPathBits, pa.LID+1)
	}
}

func TestRoCERefusesAlternatePath(t *testing.T) {
	c := newConn(t, connOpts{spec: sim.RailSpec{Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1, LinkLayer: verbs.LinkLayerEthernet}})
	err := c.a.qp.Modify(&verbs.QPAttr{AltAHAttr: ahTo(t, c.a, c.b, 1, 0), AltPortNum: 1, PathMigState: verbs.MigRearm},
		verbs.QPAttrAltPath|verbs.QPAttrPathMigState)
	if verbs.ErrnoOf(err) != verbs.EINVAL {
		t.Fatalf("ALT_PATH on RoCE: %v, want EINVAL", err)
	}
	// PATH_MIG_STATE alone (MIGRATED) is accepted and changes nothing.
	must(t, c.a.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState))
	stream(t, c, 0, 3, 10*time.Microsecond)
	c.run(time.Millisecond)
	if n := len(c.a.poll(t)); n != 3 {
		t.Fatalf("RoCE traffic: %d completions, want 3", n)
	}
}

// TestEarlyRearmStrandsThePeer: a QP that migrates by hand and re-arms at
// once sends with MigReq clear; its ARMED peer, still on the old path,
// drops those packets instead of following (the MigReq rule), so software
// must wait for the peer before re-arming.
func TestEarlyRearmStrandsThePeer(t *testing.T) {
	c := newConn(t, connOpts{})
	armBoth(t, c)
	must(t, c.b.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState))
	armAlt(t, c.b, c.a, 1, 0) // re-armed before a followed
	c.run(time.Millisecond)
	c.b.post(t, write(1, c.b.sge(0, 8), c.a.mr.Addr(), c.a.mr.RKey()))
	c.run(time.Second)
	if p := portOf(t, c.a.qp); p != 1 {
		t.Fatalf("a moved to port %d on packets without MigReq", p)
	}
	if ev := c.a.events(); len(ev) != 0 {
		t.Fatalf("a raised %v", ev)
	}
	if st := statuses(c.b.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCRetryExcErr}) {
		t.Fatalf("b's WR: %v, want RETRY_EXC_ERR (its packets were dropped)", st)
	}

	// Kept MIGRATED, the same WR carries MigReq and moves the peer.
	c2 := newConn(t, connOpts{})
	armBoth(t, c2)
	must(t, c2.b.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState))
	c2.b.post(t, write(1, c2.b.sge(0, 8), c2.a.mr.Addr(), c2.a.mr.RKey()))
	c2.run(time.Millisecond)
	if p := portOf(t, c2.a.qp); p != 2 {
		t.Fatalf("peer did not follow a MigReq packet: port %d", p)
	}
	if st := statuses(c2.b.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCSuccess}) {
		t.Fatalf("b's WR: %v", st)
	}
}
