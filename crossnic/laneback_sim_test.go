package crossnic_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/verbs"
)

// TestParkedLaneBack: a Conn with recovery whose default port is said
// down settles on the backup (Parked, Settled) and can be handed to
// another data path (Lane). LaneBack refuses a Conn that handed nothing
// over and a state that does not fit its rings, and takes back what the
// data path holds; once the port is said up the Conn is no longer
// Parked, and it switches back with every message once.
func TestParkedLaneBack(t *testing.T) {
	up := false
	w, a, port := cutWorld(t, 17, crossnic.Recovery{PathUp: func() bool { return up }}, 0)
	w.run(5 * time.Millisecond) // nothing new posted: the failover settles
	if !a.conn.Parked() || !a.conn.Settled() {
		t.Fatalf("port said down after the failover: parked %v, settled %v", a.conn.Parked(), a.conn.Settled())
	}
	if err := a.conn.LaneBack(a.conn.Outstanding()); err == nil {
		t.Fatal("LaneBack of a Conn that handed nothing over: no error")
	}
	a.conn.Lane()
	st := a.conn.Outstanding()
	if len(st.Recvs) == 0 {
		t.Fatal("no receive outstanding on the backup: the hand-back goes untested")
	}
	tooMany := st
	tooMany.Sends = make([]verbs.SendWR, 1<<16)
	if err := a.conn.LaneBack(tooMany); !errors.Is(err, crossnic.ErrResume) {
		t.Fatalf("LaneBack of more sends than the ring holds: %v, want ErrResume", err)
	}
	if err := a.conn.LaneBack(st); err != nil {
		t.Fatalf("LaneBack of what the backup holds: %v", err)
	}
	if got := a.conn.Outstanding(); len(got.Recvs) != len(st.Recvs) || len(got.Sends) != len(st.Sends) ||
		got.RecvsDone != st.RecvsDone || got.NotifsDone != st.NotifsDone {
		t.Fatalf("after LaneBack the rings hold %d sends, %d receives (%d, %d done); want %d, %d (%d, %d)", len(got.Sends),
			len(got.Recvs), got.NotifsDone, got.RecvsDone, len(st.Sends), len(st.Recvs), st.NotifsDone, st.RecvsDone)
	}
	must(t, w.f.SetLink(port, true))
	up = true
	if a.conn.Parked() || a.conn.Settled() {
		t.Fatal("port said up: still parked")
	}
	w.run(50*time.Millisecond, 0)
	if s := a.conn.Stats(); s.SwitchBacks != 1 {
		t.Fatalf("port said up: %+v; want a switch back", s)
	}
	w.run(20 * time.Millisecond)
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
}
