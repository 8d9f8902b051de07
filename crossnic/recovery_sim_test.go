package crossnic_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// cutWorld is newWorld with node 0's recovery set to rec (its Clock and
// a 2 ms ProbeInterval filled in) and, after 300 us of traffic from the
// senders in dirs, node 0's cable pulled for 5 ms: both nodes then run on
// their backups. The cable is left down.
func cutWorld(t *testing.T, seed uint64, rec crossnic.Recovery, dirs ...int) (*world, *node, *sim.Port) {
	t.Helper()
	w := newWorld(t, seed)
	a := w.n[0]
	rec.Clock, rec.ProbeInterval = w.f, 2*time.Millisecond
	must(t, a.conn.EnableRecovery(rec))
	port := a.hca.Port(1)
	w.run(300*time.Microsecond, dirs...)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, dirs...)
	return w, a, port
}

// TestHomeAndOutstanding: Home is true while a Conn never moved and once
// it switched back (not while it runs on the backup), and Outstanding
// then gives exactly what the default QP holds: the sends not completed,
// oldest first, the receives posted, and the handshake counters as the
// application's completions counted them.
func TestHomeAndOutstanding(t *testing.T) {
	w := newWorld(t, 9)
	w.sendRx = [2]bool{true, true}
	w.run(300*time.Microsecond, 0, 1)
	for _, n := range w.n {
		if !n.conn.Home() {
			t.Fatalf("%s: not home before any fault", n.name)
		}
	}
	port := w.n[0].hca.Port(1)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0, 1)
	for _, n := range w.n {
		if n.conn.Home() {
			t.Fatalf("%s: home while its link is down", n.name)
		}
	}
	must(t, w.f.SetLink(port, true))
	deadline := w.f.Now() + 200*time.Millisecond
	for !(w.n[0].conn.Home() && w.n[1].conn.Home()) {
		if w.f.Now() > deadline {
			t.Fatalf("not home 200 ms after the repair: %+v / %+v", w.n[0].conn.Stats(), w.n[1].conn.Stats())
		}
		w.run(100*time.Microsecond, 0, 1)
	}
	for i, n := range w.n {
		if st := n.conn.Stats(); st.SwitchBacks != 1 || st.BackupResets != 1 {
			t.Fatalf("%s: %+v, want one switch back and one purge", n.name, st)
		}
		o := n.conn.Outstanding()
		done := len(w.done[i])
		if len(o.Sends) != w.sent[i]-done || o.NotifsDone != uint64(done) {
			t.Fatalf("%s: %d sends outstanding, %d notifications done; the application posted %d and saw %d complete",
				n.name, len(o.Sends), o.NotifsDone, w.sent[i], done)
		}
		for k, s := range o.Sends {
			if s.WRID != uint64(2*(done+k)+1) {
				t.Fatalf("%s: outstanding send %d is wr_id %d, want %d (oldest first)", n.name, k, s.WRID, 2*(done+k)+1)
			}
		}
		if len(o.Recvs) != 64 || o.RecvsDone != uint64(len(w.notifs[i])) {
			t.Fatalf("%s: %d receives outstanding, %d done; want 64 and %d", n.name, len(o.Recvs), o.RecvsDone, len(w.notifs[i]))
		}
		if o.Inline != nil {
			t.Fatalf("%s: inline copies %v for WRs that are not inline", n.name, o.Inline)
		}
	}
	w.run(20*time.Millisecond, 0, 1)
	if err := w.delivered(0, 1); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryNeedsMailboxes: a Conn without a mailbox at both ends (a
// peer of an older version, or with switch back off) takes no recovery
// (ErrNoMailbox): with its own mailbox alone neither. After a cable cut
// and its repair it stays on the backup, every message delivered once,
// in order, without a probe of the default path: none of its resets
// could take fresh PSNs with the peer's.
func TestRecoveryNeedsMailboxes(t *testing.T) {
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 9}, retry: 3, noMailbox: true, noRecovery: true})
	w.sendRx = [2]bool{true, true}
	a := w.n[0]
	rec := crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond}
	if err := a.conn.EnableRecovery(rec); !errors.Is(err, crossnic.ErrNoMailbox) {
		t.Fatalf("recovery without mailboxes: %v, want %v", err, crossnic.ErrNoMailbox)
	}
	_, err := a.conn.OpenMailbox()
	must(t, err)
	if err := a.conn.EnableRecovery(rec); !errors.Is(err, crossnic.ErrNoMailbox) {
		t.Fatalf("recovery without the peer's mailbox: %v, want %v", err, crossnic.ErrNoMailbox)
	}
	w.run(300*time.Microsecond, 0, 1)
	port := a.hca.Port(1)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0, 1)
	must(t, w.f.SetLink(port, true))
	w.run(50*time.Millisecond, 0, 1)
	w.run(10 * time.Millisecond)
	for _, n := range w.n {
		sq, rq := n.conn.State()
		if st := n.conn.Stats(); sq != fsm.SQFallback || rq != fsm.RQFallback || st.Probes != 0 || st.ResetsPaired != 0 {
			t.Fatalf("%s: %v/%v %+v, want on the backup, never probing", n.name, sq, rq, st)
		}
	}
	if err := w.delivered(0, 1); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryAttrGiven: the default QP is reset with the connect
// attributes the caller gave (Recovery.DefAttr), not with what the QP
// reports: a real HCA reports the PSNs it reached.
func TestRecoveryAttrGiven(t *testing.T) {
	w := newWorld(t, 10)
	a := w.n[0]
	def, _, err := a.def.qp.Query(verbs.QPAttrAV)
	must(t, err)
	def.Timeout = def.Timeout + 3 // a value the QP was not connected with
	must(t, a.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond, DefAttr: &def}))
	w.run(300*time.Microsecond, 0)
	must(t, w.f.SetLink(a.hca.Port(1), false))
	w.run(5*time.Millisecond, 0)
	got, _, err := a.def.qp.Query(verbs.QPAttrTimeout)
	must(t, err)
	if got.Timeout != def.Timeout || got.QPState != verbs.QPSRTS {
		t.Fatalf("default QP after the reset: state %v, timeout %d; want RTS and the given %d", got.QPState, got.Timeout, def.Timeout)
	}
}

// TestRecoveryResetFails: a default QP that cannot be reset (its HCA
// died) is tried again every probe interval, the reason kept; the traffic
// stays on the backup, delivered, and the Conn never counts as home.
func TestRecoveryResetFails(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 11, p)
		w.run(300*time.Microsecond, 0)
		must(t, w.f.KillHCA(w.n[0].hca))
		w.run(5*time.Millisecond, 0)
		c := w.n[0].conn
		first := c.Stats().ResetFailures
		if c.ResetErr() == nil || first == 0 {
			t.Fatalf("reset of a dead HCA's QP: err %v, %d failures", c.ResetErr(), first)
		}
		w.run(20*time.Millisecond, 0)
		if st := c.Stats(); st.ResetFailures <= first || c.Home() || c.Settled() {
			t.Fatalf("after 20 ms: %+v, home %v, settled %v; want more reset attempts, neither", st, c.Home(), c.Settled())
		}
		w.run(20 * time.Millisecond)
		if err := w.delivered(0); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSwitchBackLazyReceiver: the receiver polls only every 10 steps
// (50 us), so when the sender's switch-back notification reaches its
// default QP, receive completions the sender's fence proved executed
// still wait on its backup CQ. They are collected as the data they are
// before the receives move home (not taken for a stale control message
// on an unpurged backup, which would surface the error), and every
// message arrives once, in order.
func TestSwitchBackLazyReceiver(t *testing.T) {
	w := newWorld(t, 12)
	w.sendRx[0] = true
	w.lazy[1] = 10
	port := w.n[0].hca.Port(1)
	w.run(300*time.Microsecond, 0)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0)
	must(t, w.f.SetLink(port, true))
	w.run(100*time.Millisecond, 0)
	w.lazy[1] = 0
	w.run(20 * time.Millisecond)
	for _, n := range w.n {
		if sq, rq := n.conn.State(); sq.String() != "default" || rq.String() != "default" {
			t.Fatalf("%s: %v/%v (%s), want home; stats %+v", n.name, sq, rq, n.conn.Reason(), n.conn.Stats())
		}
	}
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryWaitsForPort: while Recovery.PathUp says the default port is
// down, the default QP is neither reset nor probed (on RoCE a reset then
// blocks in route resolution); once it says up, the QP is reset, probed
// and the traffic switches back.
func TestRecoveryWaitsForPort(t *testing.T) {
	up := false // the port is said down from the cut on
	w, a, port := cutWorld(t, 13, crossnic.Recovery{PathUp: func() bool { return up }}, 0)
	must(t, w.f.SetLink(port, true))
	w.run(20*time.Millisecond, 0) // the link works, but the port is not said up yet
	st := a.conn.Stats()
	if st.ResetFailures != 0 || st.Probes != 0 || a.conn.ResetErr() == nil || st.SwitchBacks != 0 {
		t.Fatalf("port said down: %+v, reset err %v; want no reset, no probe", st, a.conn.ResetErr())
	}
	up = true
	w.run(50*time.Millisecond, 0)
	if st := a.conn.Stats(); st.SwitchBacks != 1 || st.Probes == 0 || a.conn.ResetErr() != nil {
		t.Fatalf("port said up: %+v, reset err %v; want a switch back", st, a.conn.ResetErr())
	}
	w.run(20 * time.Millisecond)
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
}

// testRoom is a crossnic.Room of free shares, counting what was taken.
type testRoom struct{ free, takes, gives int }

func (r *testRoom) Take() bool {
	if r.free == 0 {
		return false
	}
	r.free--
	r.takes++
	return true
}

func (r *testRoom) Give() { r.free++; r.gives++ }

// TestRecoveryWaitsForRoom: while no share of the default QP's CQs'
// headroom is free, the default QP is neither reset nor probed (ResetErr
// says why) and the traffic stays on the backup; once a share is free the
// Conn takes it, switches back, and gives it back when home. Close gives
// back a share still held.
func TestRecoveryWaitsForRoom(t *testing.T) {
	room := &testRoom{}
	w, a, port := cutWorld(t, 13, crossnic.Recovery{Room: room}, 0)
	must(t, w.f.SetLink(port, true))
	w.run(20*time.Millisecond, 0)
	st := a.conn.Stats()
	if st.Probes != 0 || st.SwitchBacks != 0 || st.ResetFailures != 0 || a.conn.ResetErr() == nil ||
		!strings.Contains(a.conn.ResetErr().Error(), "no room in the application's CQs") {
		t.Fatalf("no share free: %+v, reset err %v; want no reset, no probe", st, a.conn.ResetErr())
	}
	if sq, _ := a.conn.State(); sq != fsm.SQFallback {
		t.Fatalf("send queue %v, want fallback", sq)
	}
	room.free = 1
	w.run(50*time.Millisecond, 0)
	if st := a.conn.Stats(); st.SwitchBacks != 1 || st.Probes == 0 || a.conn.ResetErr() != nil {
		t.Fatalf("a share free: %+v, reset err %v; want a switch back", st, a.conn.ResetErr())
	}
	w.run(20 * time.Millisecond)
	if !a.conn.Home() || room.takes != 1 || room.gives != 1 || room.free != 1 {
		t.Fatalf("home %v, room %+v: want the share taken once and given back", a.conn.Home(), *room)
	}
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
	// A second cut: the share is taken again, and Close gives it back.
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0)
	must(t, w.f.SetLink(port, true))
	w.run(2*time.Millisecond, 0)
	if room.takes != 2 || room.free != 0 {
		t.Fatalf("after a second cut: room %+v, want the share taken again", *room)
	}
	must(t, a.conn.Close())
	if room.gives != 2 || room.free != 1 {
		t.Fatalf("after Close: room %+v, want the share given back", *room)
	}
}

// TestProbeTimeout: a probe sent while the default path is still down
// gets no answer; past ProbeTimeout (300 us here, shorter than the HCA's
// own retries) it counts as a failure, and once the HCA gives up on it the
// QP is reset and probed again, until the path is back and the traffic
// switches back.
func TestProbeTimeout(t *testing.T) {
	w, a, port := cutWorld(t, 14, crossnic.Recovery{ProbeTimeout: 300 * time.Microsecond}, 0)
	w.run(95*time.Millisecond, 0)
	st := a.conn.Stats()
	if st.ProbeFailures < 2 || a.conn.ProbeErr() == nil || !strings.Contains(a.conn.ProbeErr().Error(), "no answer") {
		t.Fatalf("probes on a dead path: %+v, last error %v; want timed-out probes", st, a.conn.ProbeErr())
	}
	must(t, w.f.SetLink(port, true))
	w.run(200*time.Millisecond, 0)
	if st := a.conn.Stats(); st.SwitchBacks != 1 {
		t.Fatalf("after the repair: %+v, want a switch back", st)
	}
	w.run(20 * time.Millisecond)
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
}

// untilWaitNotify runs node 0's traffic until a's switch-back
// notification is out (at most 200 ms).
func untilWaitNotify(t *testing.T, w *world, a *node) {
	t.Helper()
	deadline := w.f.Now() + 200*time.Millisecond
	for sq, _ := a.conn.State(); sq != fsm.SQWaitNotify; sq, _ = a.conn.State() {
		if w.f.Now() > deadline {
			t.Fatalf("never in wait-notify: %+v", a.conn.Stats())
		}
		w.run(time.Microsecond, 0)
	}
}

// TestSwitchNotifyTimeout: the default path breaks again just after the
// switch-back notification went out on it. It gets no answer within
// HandshakeTimeout (5 ms; the link is down longer). The peer's sends
// are home on that QP (the peer posts nothing, and switches back first:
// node0 announces the highest PSN, so it follows), so the QP is neither
// abandoned nor reset: the notification is waited for, and once the path
// is back it arrives, the held WRs go out, and every message is delivered
// once.
func TestSwitchNotifyTimeout(t *testing.T) {
	w, a, port := cutWorld(t, 15, crossnic.Recovery{HandshakeTimeout: 5 * time.Millisecond,
		PSN: func() uint32 { return 0xffffff }}, 0)
	must(t, w.f.SetLink(port, true))
	untilWaitNotify(t, w, a)
	must(t, w.f.SetLink(port, false))
	w.run(5500*time.Microsecond, 0) // past one timeout; the HCA retransmits every 4 ms
	qa, _, err := a.def.qp.Query(verbs.QPAttrState)
	must(t, err)
	if sq, _ := a.conn.State(); sq != fsm.SQWaitNotify || qa.QPState != verbs.QPSRTS {
		t.Fatalf("switch notification unanswered on a QP the peer's sends use: %v, QP %v (%v), want still waiting for it on the QP as it was",
			sq, qa.QPState, a.conn.ProbeErr())
	}
	must(t, w.f.SetLink(port, true))
	w.run(200*time.Millisecond, 0)
	if st := a.conn.Stats(); st.SwitchBacks != 1 {
		sq, rq := a.conn.State()
		t.Fatalf("after the second repair: %v/%v %q %v %+v, want one switch back", sq, rq, a.conn.Reason(), a.conn.ProbeErr(), st)
	}
	w.run(20 * time.Millisecond)
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
}

// TestProbeTimeoutPeerHome: the peer's sends came home onto the default
// QP (its switch back is done) while this side's probe still has no
// answer (injected: the ACK of the probe is lost once, so the HCA answers
// it only at its retransmission). Past ProbeTimeout the QP is not reset,
// which would take the receive queue and the PSNs from under the peer's
// traffic: the probe stays outstanding, answers at the retransmission,
// and this side switches back too. The peer never faults again, and every
// message arrives once.
func TestProbeTimeoutPeerHome(t *testing.T) {
	const psn = 0x5a5a5a // where A's reset default QP starts sending
	w, a, port := cutWorld(t, 16, crossnic.Recovery{ProbeTimeout: 2 * time.Millisecond, PSN: func() uint32 { return psn }}, 0, 1)
	b := w.n[1]
	must(t, w.f.DropResponse(a.def.qp, psn)) // the first probe after the repair
	must(t, w.f.SetLink(port, true))
	w.run(100*time.Millisecond, 0, 1)
	if err := a.conn.ProbeErr(); err == nil || !strings.Contains(err.Error(), "not reset") {
		t.Fatalf("A's probe error %v; want a timed-out probe with the peer's sends home", err)
	}
	for _, n := range w.n {
		if sq, rq := n.conn.State(); sq != fsm.SQDefault || rq != fsm.RQDefault {
			t.Fatalf("%s: %v/%v, want home; %+v", n.name, sq, rq, n.conn.Stats())
		}
	}
	if st := b.conn.Stats(); st.Faults != 0 || st.SwitchBacks != 1 {
		t.Fatalf("B: %+v, want no fault of its own (it followed A's) and one switch back", st)
	}
	w.run(20 * time.Millisecond)
	if err := w.delivered(0, 1); err != nil {
		t.Fatal(err)
	}
}

// failingModify is a QP whose modifies to RESET fail while *fail is set;
// *tries counts them.
type failingModify struct {
	verbs.QP
	fail  *bool
	tries *int
}

func (q failingModify) Modify(a *verbs.QPAttr, m verbs.QPAttrMask) error {
	if *q.fail && m&verbs.QPAttrState != 0 && a.QPState == verbs.QPSReset {
		*q.tries++
		return verbs.Errorf("ibv_modify_qp", verbs.EIO, "injected")
	}
	return q.QP.Modify(a, m)
}

// TestPurgeRetried: the purge of the backup after a switch back fails
// (injected: its reset); the Conn is not home, says why, and tries again
// every ProbeInterval;
// once a purge works the backup is usable again: a second cable pull
// fails over onto it and every message arrives once.
func TestPurgeRetried(t *testing.T) {
	fail, tries := false, 0
	dir := crossnic.NewMemDirectory()
	w := newWorldWrap(t, 17, [2]crossnic.Directory{dir, dir}, func(q verbs.QP) verbs.QP { return failingModify{q, &fail, &tries} })
	a := w.n[0]
	port := a.hca.Port(1)
	w.run(300*time.Microsecond, 0)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0)
	fail = true // every purge fails until lifted
	must(t, w.f.SetLink(port, true))
	w.run(50*time.Millisecond, 0)
	if sq, rq := a.conn.State(); sq != fsm.SQDefault || rq != fsm.RQDefault || a.conn.Home() ||
		!strings.Contains(a.conn.AwayReason(), "purge the backup QP") {
		t.Fatalf("purge failing: %v/%v, home %v, away %q", sq, rq, a.conn.Home(), a.conn.AwayReason())
	}
	// Tried again every ProbeInterval (2 ms), not at every poll (5 us).
	if tries < 5 || tries > 60 {
		t.Fatalf("%d purges tried in 50 ms", tries)
	}
	fail = false
	w.run(10*time.Millisecond, 0)
	if !a.conn.Home() || a.conn.AwayReason() != "" {
		t.Fatalf("purge working again: home %v, away %q", a.conn.Home(), a.conn.AwayReason())
	}
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0)
	if sq, _ := a.conn.State(); sq == fsm.SQSurfaced || sq == fsm.SQDefault {
		t.Fatalf("second pull: %v (%s), want a failover onto the purged backup", sq, a.conn.Reason())
	}
	must(t, w.f.SetLink(port, true))
	w.run(50*time.Millisecond, 0)
	w.run(20 * time.Millisecond)
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
}

// TestSurfacedKeepsOwnWRs: a Conn whose error surfaces while its own WRs
// are outstanding on the default QP (a probe posted while the path is still
// down, on a provider that retransmits without end) does not hand their
// completions to the application: when the backup HCA dies too, both QPs
// go to ERR and the probe flushes on the default QP, but the application
// sees only its own WRs, each once, in order, then errors, as plain verbs
// would show; whether the dead backup HCA flushes what it held (rdmavt)
// or not (strict, mlx5), every WR and receive completes. (The probe
// timeout is long: a timed-out probe asks the peer for a paired reset,
// which resets the QP under it.)
func TestSurfacedKeepsOwnWRs(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		dir := crossnic.NewMemDirectory()
		w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 16, EndlessRetry7: true, Profile: p}, retry: 7,
			noRecovery: true})
		w.sendRx = [2]bool{true, true}
		a := w.n[0]
		must(t, a.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond, ProbeTimeout: time.Hour}))
		port := a.hca.Port(1)
		w.run(300*time.Microsecond, 0, 1)
		must(t, w.f.SetLink(port, false))
		w.run(20*time.Millisecond, 0, 1)
		if st := a.conn.Stats(); st.Probes != 1 || st.ProbeFailures != 0 || st.SwitchBacks != 0 {
			t.Fatalf("probes on a dead path: %+v, want one outstanding, never answered", st)
		}
		must(t, w.f.KillHCA(w.f.Host("node0").HCA("mlx5_1")))
		must(t, w.f.SetLink(port, true))
		w.run(50*time.Millisecond, 0, 1)
		if sq, _ := a.conn.State(); sq != fsm.SQSurfaced {
			t.Fatalf("node0: %v, want surfaced (its backup HCA died)", sq)
		}
		for i, n := range w.n {
			for _, id := range w.done[i] {
				if id >= ^uint64(0)-4 {
					t.Fatalf("%s: the application got a completion of ibpath's own WR %#x", n.name, id)
				}
			}
			for _, wc := range w.errs[i] {
				if wc.WRID >= ^uint64(0)-4 {
					t.Fatalf("%s: the application got an error completion of ibpath's own WR %#x (%v)", n.name, wc.WRID, wc.Status)
				}
			}
		}
		if err := w.checkSafe(0, 1); err != nil {
			t.Fatal(err)
		}
		if err := w.exactlyOnce(0); err != nil {
			t.Fatal(err)
		}
		if len(w.recvSeq[0]) != len(w.rposted[0]) {
			t.Fatalf("node0: %d receives posted, %d completed", len(w.rposted[0]), len(w.recvSeq[0]))
		}
	})
}

// TestLazyPollerNestedDrain: a node that polls only now and then finds
// whole batches waiting on both legs. Handling one completion of a batch
// (the peer's fallback or switch-back notification) drains the other
// leg's CQ in the middle of it; every completion must still reach the
// application once, in order, with the application's QP number, through
// a cut and a switch back in both directions.
func TestLazyPollerNestedDrain(t *testing.T) {
	for _, lazy := range []int{7, 13, 29} {
		w := newWorld(t, uint64(lazy))
		w.lazy[0] = lazy
		w.run(300*time.Microsecond, 0, 1)
		must(t, w.f.SetLink(w.n[1].hca.Port(1), false))
		w.run(5*time.Millisecond, 0, 1)
		must(t, w.f.SetLink(w.n[1].hca.Port(1), true))
		w.run(40*time.Millisecond, 0, 1)
		for i := 0; i < 50 && w.delivered(0, 1) != nil; i++ {
			w.run(time.Millisecond)
		}
		if err := w.delivered(0, 1); err != nil {
			t.Fatalf("lazy %d: %v", lazy, err)
		}
		for _, n := range w.n {
			if st := n.conn.Stats(); st.SwitchBacks == 0 {
				t.Fatalf("lazy %d: %s never switched back: %+v", lazy, n.name, st)
			}
		}
	}
}

// staleFlushCQ is a default CQ that, once armed, hands out one
// WR_FLUSH_ERR completion of an old WR before what the CQ holds: the
// late flush rdma_rxe can leave in the CQ of a QP it reset.
type staleFlushCQ struct {
	verbs.CQ
	armed *bool
	qpn   uint32
}

func (q staleFlushCQ) Poll(wc []verbs.WC) (int, error) {
	if *q.armed && len(wc) > 0 {
		*q.armed = false
		wc[0] = verbs.WC{WRID: 1, Status: verbs.WCWRFlushErr, QPNum: q.qpn}
		return 1, nil
	}
	return q.CQ.Poll(wc)
}

// TestStaleFlushAfterSwitchBack: a flush completion of the default QP that
// turns up after the QP was reset and the traffic switched back (the QP
// is in RTS, so the flush is from its earlier life) is hidden. It must
// not start a failover: that would surface the error or move the
// traffic back to the backup for nothing.
func TestStaleFlushAfterSwitchBack(t *testing.T) {
	armed := false
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 17}, retry: 3,
		wrapDef: func(cq verbs.CQ) verbs.CQ { return staleFlushCQ{CQ: cq, armed: &armed, qpn: 0x100} }})
	a := w.n[0]
	port := a.hca.Port(1)
	w.run(300*time.Microsecond, 0, 1)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0, 1)
	must(t, w.f.SetLink(port, true))
	w.run(50*time.Millisecond, 0, 1)
	for _, n := range w.n {
		if st := n.conn.Stats(); st.SwitchBacks != 1 || !n.conn.Home() {
			t.Fatalf("%s before the stale flush: %+v home %v, want switched back", n.name, st, n.conn.Home())
		}
	}
	armed = true // both nodes' wrappers share the flag: whichever polls first gets it
	w.run(20*time.Millisecond, 0, 1)
	if armed {
		t.Fatal("the stale flush was never polled")
	}
	for _, n := range w.n {
		if st := n.conn.Stats(); st.Faults > 1 || !n.conn.Home() {
			sq, rq := n.conn.State()
			t.Fatalf("%s after a stale flush: %v/%v %q %+v, want home with no new fault", n.name, sq, rq, n.conn.Reason(), st)
		}
	}
	w.run(10 * time.Millisecond)
	if err := w.delivered(0, 1); err != nil {
		t.Fatal(err)
	}
}

// ackLost runs the world of TestSwitchNotifyAckLost until 100 ms after
// node0's switch-back notification, every ACK of which is lost.
func ackLost(t *testing.T) *world {
	return ackLostWith(t, nil)
}

// ackLostWith is ackLost, calling also (unless nil) once the
// notification's ACKs are set to be lost.
func ackLostWith(t *testing.T, also func(w *world)) *world {
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 23}, retry: 3})
	w.sendRx = [2]bool{true, true}
	a := w.n[0]
	for _, n := range w.n {
		must(t, n.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond, PathUp: portUp(n)}))
	}
	port := a.hca.Port(1)
	w.run(300*time.Microsecond, 0)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0)
	must(t, w.f.SetLink(port, true))
	deadline := w.f.Now() + 200*time.Millisecond
	for sq, _ := a.conn.State(); sq != fsm.SQWaitDrained; sq, _ = a.conn.State() {
		if w.f.Now() > deadline {
			t.Fatalf("never in wait-drained: %v %+v", sq, a.conn.Stats())
		}
		w.run(time.Microsecond, 0)
	}
	// The notification is the next packet of A's default QP.
	qa, _, err := a.def.qp.Query(verbs.QPAttrSQPSN)
	must(t, err)
	for range 4 { // retry_cnt 3: the first send and three retries
		must(t, w.f.DropResponse(a.def.qp, qa.SQPSN))
	}
	if also != nil {
		also(w)
	}
	w.run(100*time.Millisecond, 0)
	return w
}

// neverAnswered builds the world of TestSwitchNotifyNeverAnswered up to
// node0's switch-back notification on the wire and its path down again,
// and returns it with the bound of one wait for the notification's
// answer: the QP's own give-up time, longer than HandshakeTimeout here
// (retry_cnt+1 local ACK timeouts, a quarter more).
func neverAnswered(t *testing.T) (*world, time.Duration) {
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 18, EndlessRetry7: true}, retry: 7})
	a := w.n[0]
	followerOf(w, 0)
	must(t, a.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond, HandshakeTimeout: time.Millisecond}))
	port := a.hca.Port(1)
	w.run(300*time.Microsecond, 0)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0)
	must(t, w.f.SetLink(port, true))
	untilWaitNotify(t, w, a)
	must(t, w.f.SetLink(port, false))
	return w, verbs.TimeoutDuration(10) * 8 * 5 / 4
}

// followerOf makes node i the follower of its next handshake (the end
// that switches back second, follow.go): its PSNs drawn high, the peer's
// low.
func followerOf(w *world, i int) {
	w.n[i].conn.SetPSNSource(func() uint32 { return 0xf00000 })
	w.n[1-i].conn.SetPSNSource(func() uint32 { return 0x100000 })
}

// TestSwitchNotifyNeverAnswered: as TestSwitchNotifyTimeout, on a provider
// that retransmits without end and with the path never back: the
// notification neither completes nor fails. After three handshake
// timeouts the error surfaces, instead of holding the application's sends
// for ever, and every WR still completes exactly once. (Node0 switches
// back second, so the peer's sends are home on the QP when its
// notification goes out.) Node0 cannot ask the peer through the mailbox
// (UnwatchedForTest; when it can, it asks: TestSwitchNotifyLostAsked).
func TestSwitchNotifyNeverAnswered(t *testing.T) {
	w, bound := neverAnswered(t)
	a := w.n[0]
	a.conn.UnwatchedForTest()
	w.run(2*bound+bound/2, 0)
	if sq, _ := a.conn.State(); sq != fsm.SQWaitNotify {
		t.Fatalf("after two timeouts: %v, want still waiting", sq)
	}
	w.run(bound, 0)
	if sq, _ := a.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), "got no answer") {
		t.Fatalf("after three timeouts: %v %q, want surfaced", sq, a.conn.Reason())
	}
	w.run(20*time.Millisecond, 0)
	if err := w.exactlyOnce(0); err != nil {
		t.Fatal(err)
	}
}

// TestSwitchNotifyAckLost: the peer executes this side's switch-back
// notification (and moves its receives home), but every ACK of it is
// lost, so the notification completes with RETRY_EXC_ERR. The error does
// not say whether the peer took it; here it did. Sending the held WRs to
// the backup would land them where the peer no longer reads (lost
// without an error): when node0 cannot ask the peer through the mailbox
// (UnwatchedForTest) the error surfaces instead (ErrSwitchNotifyLost;
// when it can, it asks: TestSwitchNotifyLostAsked), and every message
// either arrives once, in order, or completes with an error.
func TestSwitchNotifyAckLost(t *testing.T) {
	w := ackLostWith(t, func(w *world) { w.n[0].conn.UnwatchedForTest() })
	a := w.n[0]
	if sq, _ := a.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), crossnic.ErrSwitchNotifyLost.Error()) {
		t.Fatalf("A after its notification's ACKs were lost: %v %q, want surfaced with %v", sq, a.conn.Reason(), crossnic.ErrSwitchNotifyLost)
	}
	if _, rq := w.n[1].conn.State(); rq != fsm.RQDefault {
		t.Fatalf("B's receives are %v: the notification was meant to reach it", rq)
	}
	if err := w.check(0); err != nil {
		t.Fatal(err)
	}
	if err := w.exactlyOnce(0); err != nil {
		t.Fatal(err)
	}
}

// TestSwitchNotifyTimeoutPeerTook: the peer executes this side's
// switch-back notification (and moves its receives home), but no ACK of
// it comes back within the notification's bound, on a provider that
// retransmits without end (no error completion ever). The peer's own
// sends are still on the backup (its probe gets no answer). A timeout
// does not say whether the peer took the notification; here it did, and
// sending the held WRs to the backup would land them where the peer no
// longer reads. Node0 cannot ask the peer through the mailbox
// (UnwatchedForTest; when it can, it asks: TestSwitchNotifyLostAsked).
// Every message either arrives once, in order, or completes with an
// error.
func TestSwitchNotifyTimeoutPeerTook(t *testing.T) {
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 31, EndlessRetry7: true}, retry: 7, noRecovery: true})
	w.sendRx = [2]bool{true, true}
	a, b := w.n[0], w.n[1]
	for _, n := range w.n {
		must(t, n.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond,
			HandshakeTimeout: time.Millisecond, ProbeTimeout: time.Hour, PathUp: portUp(n)})) // (B's probe stays unanswered, never reset)
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		deadline := w.f.Now() + 200*time.Millisecond
		for !ok() {
			if w.f.Now() > deadline {
				sa, ra := a.conn.State()
				sb, rb := b.conn.State()
				t.Fatalf("never %s: A %v/%v, B %v/%v", what, sa, ra, sb, rb)
			}
			w.run(time.Microsecond, 0)
		}
	}
	w.run(300*time.Microsecond, 0)
	must(t, w.f.SetLink(a.hca.Port(1), false))
	// B's probes go unanswered for long: its sends stay on the backup.
	muteB := func() {
		t.Helper()
		qb, _, err := b.def.qp.Query(verbs.QPAttrSQPSN)
		must(t, err)
		for range 200 {
			must(t, w.f.DropResponse(b.def.qp, (qb.SQPSN-1)&0xffffff))
		}
	}
	until("B probing", func() bool { return b.conn.Stats().Probes > 0 })
	muteB()
	w.run(5*time.Millisecond, 0)
	must(t, w.f.SetLink(a.hca.Port(1), true))
	// A's connect, put off while its port was down, is paired: B's QP
	// is reset, and its next probe goes out with a fresh PSN.
	probes := b.conn.Stats().Probes
	until("B probing its QP reset for A's late connect", func() bool { return b.conn.Stats().Probes > probes })
	muteB()
	until("A about to notify", func() bool { sa, _ := a.conn.State(); return sa == fsm.SQWaitDrained })
	a.conn.UnwatchedForTest()
	qa, _, err := a.def.qp.Query(verbs.QPAttrSQPSN)
	must(t, err)
	for range 200 {
		must(t, w.f.DropResponse(a.def.qp, qa.SQPSN))
	}
	until("B taking A's notification", func() bool { _, rb := b.conn.State(); return rb == fsm.RQDefault })
	w.run(300*time.Millisecond, 0)
	sa, ra := a.conn.State()
	t.Logf("A %v/%v %q", sa, ra, a.conn.Reason())
	if err := w.check(0); err != nil {
		t.Fatal(err)
	}
	if sa == fsm.SQSurfaced {
		if err := w.exactlyOnce(0); err != nil {
			t.Fatal(err)
		}
	}
}

// stepFailQP fails the default QP's modifies to the states set in fail
// (injected), counting them.
type stepFailQP struct {
	verbs.QP
	fail  map[verbs.QPState]bool
	tries *int
}

func (q stepFailQP) Modify(a *verbs.QPAttr, m verbs.QPAttrMask) error {
	if m&verbs.QPAttrState != 0 && q.fail[a.QPState] {
		*q.tries++
		return verbs.Errorf("ibv_modify_qp", verbs.EINVAL, "injected: to %v", a.QPState)
	}
	return q.QP.Modify(a, m)
}

// stepFailWorld is a world of two-sided traffic run 300 µs, node1's
// default QP failing the modifies to the states set in fail; tries counts
// them. Node0 probes every 500 µs, node1 resets and probes every 5 ms: a
// reset of node1's QP is paired, and resets node0's too, so node0's
// probe and switch-back notification get through between two of them.
func stepFailWorld(t *testing.T, seed uint64) (w *world, fail map[verbs.QPState]bool, tries *int) {
	fail, tries = map[verbs.QPState]bool{}, new(int)
	dir := crossnic.NewMemDirectory()
	w = newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: seed}, retry: 3, noRecovery: true,
		wrapDefQP: func(i int, qp verbs.QP) verbs.QP {
			if i == 1 {
				return stepFailQP{qp, fail, tries}
			}
			return qp
		}})
	for i, d := range []time.Duration{500 * time.Microsecond, 5 * time.Millisecond} {
		must(t, w.n[i].conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: d}))
	}
	w.sendRx = [2]bool{true, true}
	w.run(300*time.Microsecond, 0)
	return w, fail, tries
}

// TestResetHalfDoneKeepsRecvs: node1's default QP takes the peer's sends
// home (it reached RTR; its own RTS failed), then a reset of it discards
// the application's receives there: it fails at INIT (injected), or it
// gets through and the QP waits in INIT for the peer's answer. The
// receives are on no QP: when node1's error surfaces they complete, each
// once and in order, as a plain QP in error completes every receive it
// was given. (They were left on no QP, never to complete, when only a QP
// in error was taken to have lost them.)
func TestResetHalfDoneKeepsRecvs(t *testing.T) {
	for _, atInit := range []bool{true, false} {
		t.Run(fmt.Sprintf("fails at INIT %v", atInit), func(t *testing.T) {
			w, fail, tries := stepFailWorld(t, 43)
			a, b := w.n[0], w.n[1]
			fail[verbs.QPSRTS] = true // node1's default QP connects to RTR only
			must(t, w.f.SetLink(a.hca.Port(1), false))
			w.run(5*time.Millisecond, 0)
			must(t, w.f.SetLink(a.hca.Port(1), true))
			home := false
			for k := 0; k < 2000 && !home; k++ {
				w.run(50*time.Microsecond, 0)
				sq, rq := b.conn.State()
				home = rq == fsm.RQDefault && sq == fsm.SQFallback
			}
			if !home {
				sq, rq := b.conn.State()
				t.Fatalf("node1 %v/%v (%v), want its receives home and its sends on the backup", sq, rq, b.conn.ResetErr())
			}
			if atInit {
				fail[verbs.QPSInit] = true // the next reset gets through RESET only
				before := *tries
				for k := 0; k < 200 && *tries == before; k++ {
					w.run(50*time.Microsecond, 0)
				}
				if *tries == before || b.conn.ResetErr() == nil {
					t.Fatalf("no reset of node1's default QP failed at INIT (%d tries, %v)", *tries, b.conn.ResetErr())
				}
			} else {
				waiting := func() bool {
					_, rq := b.conn.State()
					return rq == fsm.RQDefault && strings.Contains(fmt.Sprint(b.conn.ResetErr()), "waiting for the peer's starting PSN")
				}
				for k := 0; k < 20000 && !waiting(); k++ {
					w.run(time.Microsecond, 0)
				}
				if !waiting() {
					t.Fatalf("node1's QP never waited in INIT with its receives home (%v)", b.conn.ResetErr())
				}
			}
			b.conn.Surface("test: node1's error surfaces")
			w.run(10 * time.Millisecond)
			if len(w.recvSeq[1]) != len(w.rposted[1]) {
				t.Fatalf("node1: %d receives posted, %d completed: the ones the reset discarded never complete", len(w.rposted[1]), len(w.recvSeq[1]))
			}
			if err := w.inOrder(1, true); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRTRWithoutRTSPairsPSNs: node1's default QP reaches RTR after a
// failover but its RTS fails (injected) for a while, so it is reset again
// and again while node0's sends come home into it. Its responder took
// node0's packets from the announced PSN on: each reset is paired, both
// ends taking fresh PSNs, not connected with the announced ones again
// (node0's next packets would be taken for a gap or for duplicates).
// Once RTS works both ends come home with every message delivered once,
// in order.
func TestRTRWithoutRTSPairsPSNs(t *testing.T) {
	w, fail, tries := stepFailWorld(t, 47)
	a, b := w.n[0], w.n[1]
	fail[verbs.QPSRTS] = true
	must(t, w.f.SetLink(a.hca.Port(1), false))
	w.run(5*time.Millisecond, 0)
	must(t, w.f.SetLink(a.hca.Port(1), true))
	w.run(30*time.Millisecond, 0) // node0 home, node1's QP reset every ProbeInterval
	if _, rq := b.conn.State(); rq != fsm.RQDefault || *tries < 5 {
		t.Fatalf("node1's receives %v after %d failed RTS, want home after several", rq, *tries)
	}
	if n := b.conn.Stats().ResetsPaired; n < *tries-1 {
		// (the reset after the last failed RTS may not have come yet)
		t.Fatalf("node1: %d paired resets after %d failed RTS, want each reset of its QP in RTR paired", n, *tries)
	}
	delete(fail, verbs.QPSRTS)
	w.run(50*time.Millisecond, 0)
	w.run(20 * time.Millisecond)
	for _, n := range w.n {
		if !n.conn.Home() {
			sq, rq := n.conn.State()
			t.Fatalf("%s %v/%v not home: %s", n.name, sq, rq, n.conn.AwayReason())
		}
	}
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
}
