package shim

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/status"
)

// TestSwitchBackFromLane: with the switch back on (the default) and the
// express lane, A's cable is pulled and stays out. A's QP, whose default
// port is down, settles on the lane with its rings (the lane records
// every WR it posts and retires what completes), and the exchange goes
// on there; B's QP, whose port is up, stays with its Conn, probing. The
// cable is put back: A's QP leaves the lane, its Conn takes the rings
// (the WRs and receives the backup holds), and both QPs come home with
// every message once, in order. A second pull fails over again from the
// hot path, and the QP goes on the lane again.
func TestSwitchBackFromLane(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 61, l2opts{express: true, env: map[string]string{EnvSwitch: "on"}})
	a := hosts[0]
	for round := 1; round <= 2; round++ {
		drive(t, f, hosts, 5*time.Microsecond, func() bool {
			for _, q := range []*appQP{qa, qb} {
				q.total = max(q.total, q.sent+l2Window)
			}
			return qa.onLane()
		})
		qa.l2(func(l *l2qp) {
			if !l.recovery || !l.express || !l.laneRecords || !l.conn.Parked() {
				t.Fatalf("round %d: A on the lane with recovery %v, express %v, records %v, parked %v", round, l.recovery, l.express,
					l.laneRecords, l.conn.Parked())
			}
		})
		if x := a.hp.ExpressCounts(); len(x.Ons) != round || x.Ons[round-1].Record == nil {
			t.Fatalf("round %d: A's lane %+v, want the QP put on it with its rings", round, x)
		}
		if qb.onLane() {
			t.Fatalf("round %d: B's QP on the lane, though its port is up (its switch back probes)", round)
		}
		// Traffic on the lane while A's port stays down: recorded there.
		before := a.hp.LaneStats(qa.qp.QPN())
		sent := qa.sent
		drive(t, f, hosts, 5*time.Microsecond, func() bool {
			for _, q := range []*appQP{qa, qb} {
				q.total = max(q.total, q.sent+l2Window)
			}
			return qa.sent >= sent+2*l2Window
		})
		if st := a.hp.LaneStats(qa.qp.QPN()); st.Sends <= before.Sends || st.Completions <= before.Completions || st.Surfaced {
			t.Fatalf("round %d: A's lane stats %+v, before %+v", round, st, before)
		}
		if err := f.SetLink(a.port, true); err != nil {
			t.Fatal(err)
		}
		homeAgain(t, f, hosts, qa, qb)
		switchCounted(t, round, qa, qb)
		if x := a.hp.ExpressCounts(); x.Backs != round {
			t.Fatalf("round %d: A's lane gave the QP back %d times", round, x.Backs)
		}
		line := a.logLine("layer 2 left the express lane", qpnAttr(qa))
		if line == "" || strings.Contains(line, " recvs=0 ") {
			t.Fatalf("round %d: A left the lane with no receive outstanding (the rings' hand-over went untested): %q\n%s", round, line, a.log)
		}
		for _, q := range []*appQP{qa, qb} {
			if s := q.status(); s.Switchbacks != round || s.ExpressLane || s.CrossNIC != "default" {
				t.Fatalf("round %d, %s: status %+v\nlog:\n%s", round, q.x.name, s, q.x.log)
			}
		}
		sendMoreClean(t, f, hosts, qa, qb, 100)
		if round == 1 {
			if err := f.SetLink(a.port, false); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "A diverted again on PORT_ERR", qa.diverted)
		}
	}
}

// TestLaneSurfacedAsItLeaves: a QP waiting on the lane for its port has
// met the backup's error in a lane poll whose report has not reached the
// runtime when the port returns. The QP does not come off the lane into
// a switch back as if nothing happened: its error surfaces, as the
// report would have had it.
func TestLaneSurfacedAsItLeaves(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 62, l2opts{express: true, env: map[string]string{EnvSwitch: "on"}})
	a := hosts[0]
	drive(t, f, hosts, 5*time.Microsecond, func() bool {
		for _, q := range []*appQP{qa, qb} {
			q.total = max(q.total, q.sent+l2Window)
		}
		return qa.onLane()
	})
	a.hp.SurfaceUnreported(qa.qp.QPN())
	if err := f.SetLink(a.port, true); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 5*time.Microsecond, func() bool {
		a.rt.switchTickOnce()
		return !qa.onLane()
	})
	if s := qa.status(); s.Layer != status.LayerNone || s.Switchbacks != 0 || !strings.Contains(s.Reason, "seen on the express lane") {
		t.Fatalf("A's QP after it left the lane surfaced: status %+v\nlog:\n%s", s, a.log)
	}
	if a.logLine("layer 2 left the express lane", qpnAttr(qa)) != "" {
		t.Fatalf("A's QP left the lane for a switch back:\n%s", a.log)
	}
}

// TestLaneRefusedSwitchesBack: with the switch back on, the hot path
// refuses the lane to A's QP, which waits for its port: the QP stays on
// the Go data path with its Conn whole (the rings it would have handed
// the lane are still its own) and switches back with every message once
// when the cable is back.
func TestLaneRefusedSwitchesBack(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 63, l2opts{express: true, env: map[string]string{EnvSwitch: "on"}})
	a := hosts[0]
	a.hp.FailExpressOn(errors.New("injected: no lane"))
	drive(t, f, hosts, 5*time.Microsecond, func() bool {
		for _, q := range []*appQP{qa, qb} {
			q.total = max(q.total, q.sent+l2Window)
		}
		return a.hp.ExpressCounts().Tries > 0
	})
	qa.l2(func(l *l2qp) {
		if l.express || l.laneRecords || !l.noExpress {
			t.Fatalf("A's QP after the lane refused it: express %v, records %v, refused %v", l.express, l.laneRecords, l.noExpress)
		}
	})
	sendMoreClean(t, f, hosts, qa, qb, 50) // on the Go data path, the port still down
	if err := f.SetLink(a.port, true); err != nil {
		t.Fatal(err)
	}
	homeAgain(t, f, hosts, qa, qb)
	sendMoreClean(t, f, hosts, qa, qb, 50)
	if s := qa.status(); s.Switchbacks != 1 || s.CrossNIC != "default" {
		t.Fatalf("A's QP: status %+v\nlog:\n%s", s, a.log)
	}
}
