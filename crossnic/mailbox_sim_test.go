package crossnic_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// midSwitchBack runs a world into the window the mailbox is for: after a
// cable pull both ends failed over; node0 (the leader: the lower PSN)
// brought its sends home, node1 took node0's switch-back notification
// (its receives are home, their stale copies at the head of its backup's
// queue) and still sends on the backup, its fence in flight (the backup
// links are slow). Then node0's cable is pulled again. With peer
// "held" or "taken", node1 is one step further: its fence completed and
// its own switch-back notification is on the wire (wait-notify) when the
// cable is pulled: held in the fabric (node0 never takes it), or taken
// by node0, which polls only now and then and has not seen it yet, and
// whose ACKs of it are lost.
func midSwitchBack(t *testing.T, p sim.Profile, sendRx bool, peer string) *world {
	t.Helper()
	dir := crossnic.NewMemDirectory()
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 61, Profile: p}, retry: 3})
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
	if peer != "" {
		for k := 0; k < 20000; k++ {
			if s1, _ := w.n[1].conn.State(); s1 == fsm.SQWaitDrained {
				break
			}
			w.run(5*time.Microsecond, 0, 1)
		}
		// node1's next request on its default QP is its notification
		if peer == "held" {
			must(t, w.f.HoldNext(w.n[1].def.qp, w.f.Now()+50*time.Millisecond))
		} else {
			q, _, err := w.n[1].def.qp.Query(verbs.QPAttrSQPSN)
			must(t, err)
			for range 4 {
				must(t, w.f.DropResponse(w.n[1].def.qp, q.SQPSN))
			}
			w.lazy[0] = 50
		}
		for k := 0; k < 20000; k++ {
			if s1, _ := w.n[1].conn.State(); s1 == fsm.SQWaitNotify {
				break
			}
			w.run(5*time.Microsecond, 0, 1)
		}
		s0, r0 := w.n[0].conn.State()
		s1, r1 := w.n[1].conn.State()
		if s0 != fsm.SQDefault || r0 != fsm.RQFallback || s1 != fsm.SQWaitNotify || r1 != fsm.RQDefault {
			t.Fatalf("node1's notification is not on the wire in the window: %s", w.states())
		}
	}
	// node1 polls only every 250 µs from now on, and the cable is
	// pulled 100 µs after one of its polls: node0's last messages on
	// the default QP completed there unpolled when its notification
	// comes through the mailbox, and must be counted before the
	// receives move
	if peer == "taken" {
		w.run(20*time.Microsecond, 0, 1) // node0's HCA takes it; node0 does not poll
	} else {
		w.lazy[1] = 50
		for w.pumps%50 != 0 {
			w.run(5*time.Microsecond, 0, 1)
		}
		w.run(100*time.Microsecond, 0, 1)
	}
	must(t, w.f.SetLink(port, false))
	w.run(3*time.Millisecond, 0, 1)
	w.lazy = [2]int{}
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
// order. (Through the control receives, the same schedule surfaced the
// error: mutant crossnic-mailbox-unused.)
func TestSecondFaultMidSwitchBack(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		for _, sendRx := range []bool{true, false} {
			t.Run(fmt.Sprintf("sends %v", sendRx), func(t *testing.T) {
				w := midSwitchBack(t, p, sendRx, "")
				for _, n := range w.n {
					if sq, _ := n.conn.State(); sq == fsm.SQSurfaced {
						t.Fatalf("%s surfaced: %s (%s)", n.name, n.conn.Reason(), w.states())
					}
					if m := n.conn.Stats().MailboxHandshakes; m != 1 {
						t.Fatalf("%s: %d handshakes through the mailbox, want 1: the second fault's (the first's went through the control receives) (%s)", n.name, m, w.states())
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
	var stale atomic.Int64
	desc, err := flapSchedule(t, 1017, 2, &campaignCounts{stale: &stale})
	if err != nil && err != errReadSurfaced {
		t.Fatalf("%s: %v", desc, err)
	}
}

// TestSecondFaultPeerNotifying: as TestSecondFaultMidSwitchBack, with
// node1 further on: its own switch-back notification is on the wire
// (wait-notify) when node0's cable is pulled again.
//   - held: held in the fabric. Node0 never took it (its receives are
//     still on the backup), so its notification through the mailbox
//     asks for no filler; node1 sends its held WRs to the backup
//     instead and moves its receives behind the stale copies.
//   - taken: node0's HCA took it (its ACKs are lost) and node0, polling
//     lazily, finds it only in the flush that starts its own failover:
//     its receives came home onto a QP now in ERR, and go to the backup
//     behind the stale copies their move home left. Its notification
//     asks node1 for that many fillers, which node1 sends before its
//     held WRs, once.
//
// Both come home with every round delivered once, in order.
func TestSecondFaultPeerNotifying(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		for _, peer := range []string{"held", "taken"} {
			t.Run(peer, func(t *testing.T) {
				w := midSwitchBack(t, p, true, peer)
				for _, n := range w.n {
					if sq, _ := n.conn.State(); sq == fsm.SQSurfaced || n.conn.Stats().MailboxHandshakes != 1 {
						t.Fatalf("%s: %s, want the second fault's handshake through the mailbox", n.name, w.states())
					}
				}
				if f := w.n[1].conn.Stats().Fillers; peer == "taken" && f == 0 {
					t.Fatalf("node1 sent no fillers: node0 never took its notification (%s)", w.states())
				}
				if err := w.delivered(0, 1); err != nil {
					t.Fatalf("%v (%s)", err, w.states())
				}
				if !w.home() {
					t.Fatalf("not home: %s", w.states())
				}
			})
		}
	})
}

// TestSwitchNotifyLostAsked: a switch-back notification fails, and its
// sender asks the peer through the mailbox instead of surfacing
// (TestSwitchNotifyAckLost and TestSwitchNotifyNeverAnswered without
// mailboxes).
//   - ack lost: the peer took it (its receives came home, and, both its
//     queues home, it purged its backup), every ACK of it was lost. The
//     peer's answer asks for fillers for its control receives and it
//     fails its own sends over, with fillers for the stale copies this
//     side's receives left on the way home; both come home again.
//   - never answered: the path stays down on a provider that
//     retransmits without end; the peer never took it. Both fail over
//     again and stay on the backup.
//
// Every round is delivered once, in order.
func TestSwitchNotifyLostAsked(t *testing.T) {
	t.Run("ack lost", func(t *testing.T) {
		w := ackLost(t)
		for _, n := range w.n {
			if st := n.conn.Stats(); st.MailboxHandshakes != 1 || st.Fillers == 0 {
				t.Fatalf("%s: %+v, want the second handshake through the mailbox with fillers both ways (%s)", n.name, st, w.states())
			}
		}
		if st := w.n[1].conn.Stats(); st.BackupResets == 0 {
			t.Fatalf("node1 never purged its backup: the schedule misses its case (%s)", w.states())
		}
		w.run(20 * time.Millisecond)
		if err := w.delivered(0); err != nil {
			t.Fatalf("%v (%s)", err, w.states())
		}
		if !w.home() {
			t.Fatalf("not home: %s", w.states())
		}
	})
	t.Run("never answered", func(t *testing.T) {
		w, bound := neverAnswered(t)
		w.run(3*bound+20*time.Millisecond, 0)
		w.run(20 * time.Millisecond)
		for _, n := range w.n {
			if sq, _ := n.conn.State(); sq == fsm.SQSurfaced || n.conn.Stats().MailboxHandshakes != 1 {
				t.Fatalf("%s: %s, want failed over again through the mailbox", n.name, w.states())
			}
		}
		if err := w.delivered(0); err != nil {
			t.Fatalf("%v (%s)", err, w.states())
		}
	})
}

// TestMailboxNotifyUnfollowableRefused: a notification through the
// mailbox whose counter no rewind can follow is refused before anything
// moves, as through the control receives: beyond what this side ever
// sent, or behind what completed here (the peer's HCA acknowledged
// messages whose receives' completions it lost: the counter-behind
// case). The error surfaces here from the default QP, which still holds
// every WR, and the refusal goes back through the mailbox, answering
// that record. The peer, whose sends then fail, is refused in turn, and
// both end as plain verbs would.
func TestMailboxNotifyUnfollowableRefused(t *testing.T) {
	for _, c := range []struct {
		name    string
		counter uint64
	}{{"beyond", 1 << 40}, {"behind", 0}} {
		t.Run(c.name, func(t *testing.T) {
			dir := crossnic.NewMemDirectory()
			w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 62}, retry: 3})
			a, b := w.n[0], w.n[1]
			w.run(300*time.Microsecond, 0, 1)
			if len(w.done[0]) == 0 {
				t.Fatal("node0 completed no send: no counter can be behind")
			}
			a.conn.MailboxNotifyForTest(7, c.counter)
			w.run(200*time.Microsecond, 0, 1)
			if sq, _ := a.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), "cannot be followed") {
				t.Fatalf("node0 took a notification no rewind can follow: %s", w.states())
			}
			if st := a.conn.Stats(); st.RecvsMoved != 0 || st.Replayed != 0 || st.MailboxHandshakes != 0 {
				t.Fatalf("node0 moved something before refusing: %+v", st)
			}
			if kind, seen, ok := b.conn.InboxForTest(); !ok || kind != "refuse" || seen != 7 {
				t.Fatalf("node1's inbox: %q answering %d (whole %v), want the refusal of record 7", kind, seen, ok)
			}
			w.run(50*time.Millisecond, 0, 1)
			if err := w.checkSafe(0, 1); err != nil {
				t.Fatalf("%v (%s)", err, w.states())
			}
		})
	}
}
