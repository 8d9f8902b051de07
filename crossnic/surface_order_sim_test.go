package crossnic_test

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs/sim"
)

// TestSurfaceOnBackupCompletesInOrder: node0 switches back; its fence is
// on the backup QP and the WRs after it are held (on no QP) when the
// backup's link goes down. The fence fails with RETRY_EXC_ERR and the
// error surfaces: the WRs the backup held (flushed when its QP goes to
// ERR) complete before the held ones, every send completion in posting
// order, each signaled WR exactly once.
func TestSurfaceOnBackupCompletesInOrder(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 31, p)
		a := w.n[0]
		port := a.hca.Port(1)
		bak := a.bak.ctx.(*sim.Context).HCA().Port(1)
		w.run(300*time.Microsecond, 0)
		must(t, w.f.SetLink(port, false))
		w.run(5*time.Millisecond, 0)
		if sq, _ := a.conn.State(); sq != fsm.SQFallback {
			t.Fatalf("node0 %v after the cut, want fallback", sq)
		}
		// A slow backup path: the fence stays outstanding long enough.
		must(t, w.f.SetDelay(bak, 200*time.Microsecond))
		must(t, w.f.SetLink(port, true))
		drained := false
		for i := 0; i < 20000 && !drained; i++ {
			w.run(5*time.Microsecond, 0)
			sq, _ := a.conn.State()
			drained = sq == fsm.SQWaitDrained
		}
		if !drained {
			t.Fatal("node0 never had its fence outstanding")
		}
		held := w.sent[0]
		must(t, w.f.SetLink(bak, false))
		w.run(100*time.Millisecond, 0)
		if sq, _ := a.conn.State(); sq != fsm.SQSurfaced {
			t.Fatalf("node0 %v (%s), want surfaced", sq, a.conn.Reason())
		}
		if w.sent[0] <= held {
			t.Fatalf("no WR was posted after the fence (%d then %d): nothing held", held, w.sent[0])
		}
		if err := w.checkSafe(0); err != nil {
			t.Fatal(err)
		}
		if err := w.exactlyOnce(0); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFenceHoldsOnSlowBackup: node0 switches back while its backup path
// is slow (up to 200 µs per packet): the fence, its last WR there, must
// complete before the switch-back notification goes out on the default
// QP and the held WRs follow it, or they overtake the fence and the
// peer's notifications arrive out of order. Back-to-back signaled WRs
// (every round's notification is signaled) put the fence right behind
// another signaled WR.
func TestFenceHoldsOnSlowBackup(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		for _, sendRx := range []bool{false, true} {
			w := newWorldProfile(t, 37, p)
			w.sendRx = [2]bool{sendRx, sendRx}
			a := w.n[0]
			port := a.hca.Port(1)
			w.run(300*time.Microsecond, 0)
			must(t, w.f.SetLink(port, false))
			w.run(5*time.Millisecond, 0)
			must(t, w.f.SetDelay(a.bak.ctx.(*sim.Context).HCA().Port(1), 200*time.Microsecond))
			must(t, w.f.SetLink(port, true))
			w.run(60*time.Millisecond, 0)
			w.run(20 * time.Millisecond)
			if st := a.conn.Stats(); st.SwitchBacks != 1 {
				t.Fatalf("sendRx %v: node0 %+v, want one switch back", sendRx, st)
			}
			if err := w.delivered(0); err != nil {
				t.Fatalf("sendRx %v: %v", sendRx, err)
			}
		}
	})
}
