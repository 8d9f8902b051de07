package crossnic_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// TestHandshakeBound: node0's HCA dies while node1's side of ibpath never
// answers (its Conn is never polled or ticked: a peer process that is
// alive but whose ibpath does not run). node0's wait for the answer to its
// fallback notification is bounded, by BoundHandshake without recovery and
// by Recovery.HandshakeTimeout with it, never shorter than the backup QP's
// own give-up time: past the bound the error surfaces,
// every signaled WR completes once (with success or an error) and the
// reason says why (the receives node0 had posted complete in error, as
// plain verbs would flush them). Without either it waits for ever.
func TestHandshakeBound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		noRecovery bool
		bound      time.Duration
		surfaces   bool
	}{
		{"no recovery, unbounded", true, 0, false},
		{"no recovery, BoundHandshake", true, 3 * time.Millisecond, true},
		{"recovery, HandshakeTimeout", false, 3 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forProfiles(t, func(t *testing.T, p sim.Profile) {
				dir := crossnic.NewMemDirectory()
				w := newWorldWith(t, [2]crossnic.Directory{dir, dir},
					worldOpts{cfg: sim.Config{Seed: 11, Profile: p}, retry: 3, noRecovery: tc.noRecovery, handshake: tc.bound})
				w.lazy[1] = 1 << 30 // never pumped
				a := w.n[0]
				w.run(300*time.Microsecond, 0)
				must(t, w.f.KillHCA(a.hca))
				w.run(time.Millisecond, 0)
				if sq, _ := a.conn.State(); sq != fsm.SQAwaitAck {
					t.Fatalf("node0 %v after the kill, want await-ack (the peer does not answer)", sq)
				}
				// The wait lasts the backup QP's own give-up time, longer
				// than the bound here: 4 tries of 4.2 ms, a quarter more.
				giveUp := verbs.TimeoutDuration(10) * 4 * 5 / 4
				w.run(giveUp-2*time.Millisecond, 0)
				if sq, _ := a.conn.State(); sq != fsm.SQAwaitAck {
					t.Fatalf("node0 %v before the backup QP's give-up time, want still waiting", sq)
				}
				w.run(10*time.Millisecond, 0)
				sq, _ := a.conn.State()
				if !tc.surfaces {
					if sq != fsm.SQAwaitAck || len(w.errs[0]) != 0 {
						t.Fatalf("node0 %v with errors %v, want still waiting", sq, w.errs[0])
					}
					return
				}
				want := "the peer did not answer the fallback notification within " + giveUp.String()
				if sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), want) {
					t.Fatalf("node0 %v, reason %q: want surfaced, %q", sq, a.conn.Reason(), want)
				}
				if len(w.errs[0]) == 0 {
					t.Fatalf("no error reached the application: %d sent, %d done", w.sent[0], len(w.done[0]))
				}
				must(t, w.exactlyOnce(0))
				must(t, w.checkSafe(0))
			})
		})
	}
}

// TestBoundHandshakeRefusesBadInput: a bound needs a clock and a positive
// timeout.
func TestBoundHandshakeRefusesBadInput(t *testing.T) {
	w := newWorldWith(t, [2]crossnic.Directory{crossnic.NewMemDirectory(), crossnic.NewMemDirectory()},
		worldOpts{cfg: sim.Config{Seed: 12}, retry: 3, noRecovery: true})
	c := w.n[0].conn
	if err := c.BoundHandshake(nil, time.Second); err == nil || !strings.Contains(err.Error(), "clock") {
		t.Fatalf("nil clock: %v", err)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if err := c.BoundHandshake(w.f, d); err == nil || !strings.Contains(err.Error(), "not positive") {
			t.Fatalf("timeout %v: %v", d, err)
		}
	}
}

// TestSurfacedKeepsTheFaultStatus: node1's HCA dies and its ibpath never
// runs; node0's default QP reports RETRY_EXC_ERR, node0 falls back and
// its handshake, unanswered, times out before anything was replayed. Its
// application then sees what plain verbs would have shown for the failed
// QP: RETRY_EXC_ERR for the oldest WR still outstanding, WR_FLUSH_ERR for
// every later one, each once, in posting order, on every profile.
func TestSurfacedKeepsTheFaultStatus(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		dir := crossnic.NewMemDirectory()
		w := newWorldWith(t, [2]crossnic.Directory{dir, dir},
			worldOpts{cfg: sim.Config{Seed: 13, Profile: p}, retry: 3, noRecovery: true, handshake: 3 * time.Millisecond})
		a := w.n[0]
		w.run(300*time.Microsecond, 0)
		w.lazy[1] = 1 << 30 // never pumped from now on
		must(t, w.f.KillHCA(w.n[1].hca))
		w.run(40*time.Millisecond, 0)
		if sq, _ := a.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), "did not answer") {
			t.Fatalf("node0 %v %q, want surfaced after the unanswered handshake", sq, a.conn.Reason())
		}
		var sends []verbs.WC
		for _, wc := range w.errs[0] {
			if !isRecvWRID(wc.WRID) {
				sends = append(sends, wc)
			}
		}
		if len(sends) == 0 || sends[0].Status != verbs.WCRetryExcErr {
			t.Fatalf("send errors %v: want RETRY_EXC_ERR first", sends)
		}
		for _, wc := range sends[1:] {
			if wc.Status != verbs.WCWRFlushErr {
				t.Fatalf("send errors %v: want WR_FLUSH_ERR after the first", sends)
			}
		}
		if first, done := sends[0].WRID, len(w.done[0]); first != uint64(2*done) {
			t.Fatalf("RETRY_EXC_ERR for WR %d; the oldest outstanding is %d (%d rounds done)", first, 2*done, done)
		}
		must(t, w.exactlyOnce(0))
		must(t, w.checkSafe(0))
	})
}
