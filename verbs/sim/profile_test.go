package sim_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

func TestParseProfile(t *testing.T) {
	for _, s := range []string{"", "strict", "rdmavt", "mlx5"} {
		p, err := sim.ParseProfile(s)
		if err != nil {
			t.Fatalf("ParseProfile(%q): %v", s, err)
		}
		if s == "" && p != sim.ProfileStrict {
			t.Fatalf("the default profile is %q, want strict", p)
		}
	}
	if _, err := sim.ParseProfile("cx7"); err == nil {
		t.Fatal("an unknown profile was accepted")
	}
	if f := sim.New(sim.Config{}); f.Profile() != sim.ProfileStrict {
		t.Fatalf("a fabric without a profile is %q, want strict", f.Profile())
	}
}

// TestRearmOnlyAfterMigration pins rvt_modify_qp's rule, the same on every
// profile: REARM is refused on an ARMED QP (EINVAL) and leaves it ARMED on
// its alternate; after a migration REARM is accepted again.
func TestRearmOnlyAfterMigration(t *testing.T) {
	for _, prof := range sim.Profiles {
		t.Run(string(prof), func(t *testing.T) {
			c := newConn(t, connOpts{profile: prof})
			armBoth(t, c)
			q := c.a.qp
			err := q.Modify(&verbs.QPAttr{PathMigState: verbs.MigRearm}, verbs.QPAttrPathMigState)
			if !errors.Is(err, verbs.EINVAL) {
				t.Fatalf("REARM on an ARMED QP: %v, want EINVAL", err)
			}
			if a := mvQuery(t, q); a.PathMigState != verbs.MigArmed || a.AltPortNum != 2 {
				t.Fatalf("after the refused REARM: %v, alternate port %d; want ARMED on port 2", a.PathMigState, a.AltPortNum)
			}
			must(t, q.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState))
			armAlt(t, c.a, c.b, 1, 0)
			if m := migState(t, q); m != verbs.MigRearm {
				t.Fatalf("REARM after a migration: %v, want REARM", m)
			}
		})
	}
}

// TestRearmOnRearm: rdmavt accepts REARM on a QP already in REARM; strict
// and mlx5 take REARM only from MIGRATED. A new alternate alone is loaded
// in REARM on every profile.
func TestRearmOnRearm(t *testing.T) {
	for _, tc := range []struct {
		prof sim.Profile
		ok   bool
	}{{sim.ProfileStrict, false}, {sim.ProfileRdmavt, true}, {sim.ProfileMlx5, false}} {
		t.Run(string(tc.prof), func(t *testing.T) {
			c := newConn(t, connOpts{profile: tc.prof})
			armAlt(t, c.a, c.b, 2, 0)
			q := c.a.qp
			err := q.Modify(&verbs.QPAttr{PathMigState: verbs.MigRearm}, verbs.QPAttrPathMigState)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, verbs.EINVAL)) {
				t.Fatalf("REARM on REARM: %v, want accepted=%v (EINVAL otherwise)", err, tc.ok)
			}
			alt := verbs.QPAttr{AltPortNum: 1, AltAHAttr: ahTo(t, c.a, c.b, 1, 1), AltTimeout: 10}
			must(t, q.Modify(&alt, verbs.QPAttrAltPath))
			if a := mvQuery(t, q); a.PathMigState != verbs.MigRearm || a.AltPortNum != 1 {
				t.Fatalf("a new alternate in REARM: %v on port %d, want REARM on port 1", a.PathMigState, a.AltPortNum)
			}
		})
	}
}

// TestAlternateWhileArmed: rdmavt replaces the alternate of an ARMED QP
// and keeps it ARMED; strict and mlx5 refuse it (EINVAL) and keep the old
// alternate armed.
func TestAlternateWhileArmed(t *testing.T) {
	for _, tc := range []struct {
		prof sim.Profile
		ok   bool
	}{{sim.ProfileStrict, false}, {sim.ProfileRdmavt, true}, {sim.ProfileMlx5, false}} {
		t.Run(string(tc.prof), func(t *testing.T) {
			c := newConn(t, connOpts{profile: tc.prof})
			armBoth(t, c)
			q := c.a.qp
			alt := verbs.QPAttr{AltPortNum: 1, AltAHAttr: ahTo(t, c.a, c.b, 1, 1), AltTimeout: 10}
			err := q.Modify(&alt, verbs.QPAttrAltPath)
			a := mvQuery(t, q)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("a new alternate on an ARMED QP: %v, want accepted", err)
			case tc.ok && (a.PathMigState != verbs.MigArmed || a.AltPortNum != 1):
				t.Fatalf("after loading: %v on port %d, want ARMED on port 1", a.PathMigState, a.AltPortNum)
			case !tc.ok && !errors.Is(err, verbs.EINVAL):
				t.Fatalf("a new alternate on an ARMED QP: %v, want EINVAL", err)
			case !tc.ok && (a.PathMigState != verbs.MigArmed || a.AltPortNum != 2):
				t.Fatalf("after the refusal: %v on port %d, want ARMED on port 2", a.PathMigState, a.AltPortNum)
			}
		})
	}
}

// TestPathMigTiming: after the HCA migrated by itself (the primary's
// retries exhausted), strict and rdmavt raise the requester's PATH_MIG at
// the migration (qib_migrate_qp), before any packet came back on the new
// path; mlx5 raises it when the peer first answers there.
func TestPathMigTiming(t *testing.T) {
	for _, tc := range []struct {
		prof     sim.Profile
		atAnswer bool
	}{{sim.ProfileStrict, false}, {sim.ProfileRdmavt, false}, {sim.ProfileMlx5, true}} {
		t.Run(string(tc.prof), func(t *testing.T) {
			c := newConn(t, connOpts{profile: tc.prof})
			armBoth(t, c)
			// The peer's primary port dies: no local event, the requester
			// times out on the primary and migrates. Losing the first
			// response on the new path separates the two timings.
			must(t, c.f.SetLink(c.b.hca.Port(1), false))
			c.b.events()
			var migAt, ansAt time.Duration
			c.f.SetTracer(func(r sim.TraceRecord) {
				if migAt == 0 && r.Kind == "apm" && r.Device == "mlx5_0" && r.Host == "node0" && strings.Contains(r.Detail, "retries exhausted") {
					migAt = r.At
				}
			})
			c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
			var evAt time.Duration
			// The answers on the new path are lost until 1 ms after the
			// migration.
			must(t, c.f.SetLoss(c.a.hca.Port(2), 0, 1))
			healed := false
			for i := 0; i < 20000 && (evAt == 0 || ansAt == 0); i++ {
				if migAt != 0 && !healed {
					healed = true
					c.f.At(migAt+time.Millisecond, func() { _ = c.f.SetLoss(c.a.hca.Port(2), 0, 0) })
				}
				c.run(10 * time.Microsecond)
				if evAt == 0 && slices.Contains(c.a.events(), verbs.EventPathMig) {
					evAt = c.f.Now()
				}
				if ansAt == 0 && len(c.a.poll(t)) > 0 {
					ansAt = c.f.Now()
				}
			}
			if migAt == 0 || evAt == 0 || ansAt == 0 {
				t.Fatalf("migration at %v, PATH_MIG at %v, completion at %v: one never happened", migAt, evAt, ansAt)
			}
			if tc.atAnswer && evAt < ansAt-10*time.Microsecond {
				t.Fatalf("PATH_MIG at %v, before the first answer (%v); this profile raises it at the answer", evAt, ansAt)
			}
			if !tc.atAnswer && (evAt > migAt+10*time.Microsecond || evAt > ansAt-time.Millisecond) {
				t.Fatalf("PATH_MIG at %v, migration at %v, first answer at %v; this profile raises it at the migration", evAt, migAt, ansAt)
			}
		})
	}
}

// TestTimerLate: with Config.TimerLate the local ACK timer fires late by
// at most that much, never early, and the draws differ.
func TestTimerLate(t *testing.T) {
	to := verbs.TimeoutDuration(10)
	late := 3 * time.Millisecond
	var fired []time.Duration
	for seed := uint64(1); seed <= 8; seed++ {
		c := newConn(t, connOpts{spec: sim.RailSpec{Config: sim.Config{Seed: seed, TimerLate: late}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 2, LMC: 1}})
		must(t, c.f.SetLink(c.b.hca.Port(1), false))
		t0 := c.f.Now()
		var at time.Duration
		c.f.SetTracer(func(r sim.TraceRecord) {
			if at == 0 && r.Kind == "retry" {
				at = r.At
			}
		})
		c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
		c.run(to + late + time.Millisecond)
		if at == 0 {
			t.Fatalf("seed %d: no local ACK timeout within %v", seed, to+late+time.Millisecond)
		}
		d := at - t0
		if d < to || d > to+late+time.Microsecond {
			t.Fatalf("seed %d: the timer fired after %v, want within [%v, %v]", seed, d, to, to+late)
		}
		fired = append(fired, d)
	}
	slices.Sort(fired)
	if fired[len(fired)-1]-fired[0] < late/4 {
		t.Fatalf("timer delays %v: the lateness does not vary", fired)
	}
}
