package crossnic_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
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

// TestPostAfterSurfaceCompletesInOrder: a WR the application posts after
// its error surfaced completes after every older one, as on a plain QP in
// error, although the older ones are on the backup QP and their flushes
// not polled yet. (The switch-back campaign with delay found a receive
// reposted at the moment of surfacing completing before older receives
// the backup still had to flush: a receive seen twice, out of order.)
func TestPostAfterSurfaceCompletesInOrder(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 41, p)
		w.sendRx = [2]bool{true, true}
		a, b := w.n[0], w.n[1]
		w.run(300*time.Microsecond, 0)
		must(t, w.f.SetLink(a.hca.Port(1), false))
		w.run(5*time.Millisecond, 0)
		if sq, _ := a.conn.State(); sq != fsm.SQFallback {
			t.Fatalf("node0 %v after the cut, want fallback", sq)
		}
		if _, rq := b.conn.State(); rq != fsm.RQFallback {
			t.Fatalf("node1's receives %v after the cut, want on the backup", rq)
		}
		// node0: sends on the backup, not acknowledged (the fabric does
		// not run), when its error surfaces; then one more.
		const old, late = 9000, 9100
		for k := uint64(0); k < 3; k++ {
			if _, err := a.conn.PostSend([]verbs.SendWR{{WRID: old + k, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled}}); err != nil {
				t.Fatal(err)
			}
		}
		a.conn.Surface("test: the backup failed")
		if _, err := a.conn.PostSend([]verbs.SendWR{{WRID: late, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled}}); err != nil {
			t.Fatal(err)
		}
		// node1: its receives on the backup when its error surfaces;
		// then one more.
		b.conn.Surface("test: the backup failed")
		if _, err := b.conn.PostRecv([]verbs.RecvWR{{WRID: recvWRID + nrecvs + 1, SGList: []verbs.SGE{b.recvSGE(0)}}}); err != nil {
			t.Fatal(err)
		}
		w.f.RunFor(time.Millisecond)
		for _, c := range []struct {
			n    *node
			last uint64
			recv bool
		}{{a, late, false}, {b, recvWRID + nrecvs + 1, true}} {
			var ids []uint64 // of the queue checked
			wc := make([]verbs.WC, 64)
			for {
				k, err := c.n.conn.Poll(wc)
				must(t, err)
				if k == 0 {
					break
				}
				for _, x := range wc[:k] {
					if recv := isRecvWRID(x.WRID) || x.WRID == recvWRID+nrecvs+1; recv == c.recv {
						ids = append(ids, x.WRID)
					}
				}
			}
			if len(ids) < 2 || ids[len(ids)-1] != c.last {
				t.Fatalf("%s: completions %v: the WR posted after the error surfaced (%d) is not last", c.n.name, ids, c.last)
			}
			if c.n == a && (len(ids) < 4 || !slices.Equal(ids[len(ids)-4:len(ids)-1], []uint64{old, old + 1, old + 2})) {
				t.Fatalf("node0: completions %v, want %d..%d then %d", ids, old, old+2, late)
			}
		}
	})
}
