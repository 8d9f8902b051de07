package crossnic_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs/sim"
)

// midSwitchBack runs a world into the window the mailbox is for: after a
// cable pull both ends failed over; node0 (the leader: the lower PSN)
// brought its sends home, node1 took node0's switch-back notification
// (its receives are home, their stale copies at the head of its backup's
// queue) and still sends on the backup, its fence in flight (the backup
// links are slow). Then node0's cable is pulled again.
func midSwitchBack(t *testing.T, p sim.Profile, sendRx, noMbox bool) *world {
	t.Helper()
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 61, Profile: p}, retry: 3, noMailbox: noMbox})
	w.sendRx = [2]bool{sendRx, sendRx}
	for i, psn := range []uint32{100, 200} {
		w.n[i].conn.SetPSNSource(func() uint32 { return psn })
	}
	port := w.n[0].hca.Port(1)
	w.run(300*time.Microsecond, 0, 1)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0, 1)
	must(t, w.f.SetLink(port, true))
	for _, n := range w.n {
		must(t, w.f.SetDelay(n.bak.ctx.(*sim.Context).HCA().Port(1), 40*time.Microsecond))
	}
	inWindow := func() bool {
		s0, r0 := w.n[0].conn.State()
		s1, r1 := w.n[1].conn.State()
		return s0 == fsm.SQDefault && r0 == fsm.RQFallback && r1 == fsm.RQDefault &&
			(s1 == fsm.SQFallback || s1 == fsm.SQWaitSignaled || s1 == fsm.SQWaitDrained)
	}
	for k := 0; k < 20000 && !inWindow(); k++ {
		w.run(5*time.Microsecond, 0, 1)
	}
	if !inWindow() {
		t.Fatalf("the window never came: %s", w.states())
	}
	// node1 polls only every 250 µs from now on, and the cable is
	// pulled 100 µs after one of its polls: node0's last messages on
	// the default QP completed there unpolled when its notification
	// comes through the mailbox, and must be counted before the
	// receives move
	w.lazy[1] = 50
	for w.pumps%50 != 0 {
		w.run(5*time.Microsecond, 0, 1)
	}
	w.run(100*time.Microsecond, 0, 1)
	must(t, w.f.SetLink(port, false))
	w.run(3*time.Millisecond, 0, 1)
	w.lazy[1] = 0
	must(t, w.f.SetLink(port, true))
	w.run(20*time.Millisecond, 0, 1)
	for k := 0; k < 100 && (!w.home() || w.delivered(0, 1) != nil); k++ {
		w.run(10 * time.Millisecond)
	}
	return w
}

// TestSecondFaultMidSwitchBack: a second cable pull while only one
// direction of a switch back is home. The side whose sends came home
// cannot answer through its backup's control receives (its backup holds
// the application's live receives), and the peer's backup holds stale
// copies of receives it moved home. Through the mailbox both fail over
// again: the answer asks for as many fillers as there are stale copies,
// the peer's replay lands in the receives moved after them, and both
// ends come home once the cable is back, every round delivered once, in
// order. Without the mailbox the same schedule surfaces the error.
func TestSecondFaultMidSwitchBack(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		for _, sendRx := range []bool{true, false} {
			t.Run(fmt.Sprintf("sends %v", sendRx), func(t *testing.T) {
				w := midSwitchBack(t, p, sendRx, false)
				for _, n := range w.n {
					if sq, _ := n.conn.State(); sq == fsm.SQSurfaced {
						t.Fatalf("%s surfaced: %s (%s)", n.name, n.conn.Reason(), w.states())
					}
					if m := n.conn.Stats().MailboxHandshakes; m != 1 {
						t.Fatalf("%s: %d handshakes through the mailbox, want 1 (%s)", n.name, m, w.states())
					}
				}
				if f := w.n[0].conn.Stats().Fillers; f == 0 {
					t.Fatalf("node0 sent no fillers: node1's backup held no stale receive, the schedule misses the window (%s)", w.states())
				}
				if err := w.delivered(0, 1); err != nil {
					t.Fatalf("%v (%s)", err, w.states())
				}
				for _, n := range w.n {
					if !n.conn.Home() {
						t.Fatalf("%s not home: %s", n.name, n.conn.AwayReason())
					}
				}
				w2 := midSwitchBack(t, p, sendRx, true)
				if sq, _ := w2.n[0].conn.State(); sq != fsm.SQSurfaced {
					t.Fatalf("without the mailbox node0 did not surface: the schedule misses the window (%s)", w2.states())
				}
				if err := w2.checkSafe(0, 1); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// TestMailboxAnswerThenReplayRefused pins switch-back schedule 1017: the
// side that faulted again got the peer's answer through the mailbox,
// then found its replay unsafe (a READ the peer executed lost its
// response) and surfaced. The peer had moved its receives behind the
// stale copies and waited for fillers that never came: when its backup
// flushed, the stale copies' flushes had the wr_ids of the receives
// moved behind them, and reached the application as a second completion
// of each. They are hidden now (the fillers the peer owed).
func TestMailboxAnswerThenReplayRefused(t *testing.T) {
	var carried, stale atomic.Int64
	desc, err := flapSchedule(t, 1017, &carried, &stale)
	if err != nil && err != errReadSurfaced {
		t.Fatalf("%s: %v", desc, err)
	}
}
