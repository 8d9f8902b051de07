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

// forgeCtrl is a backup QP whose control messages of one kind (the
// immediate's top two bits: 1 notification, 2 acknowledgement) carry the
// receive counter forge() instead of their own: the counter of a side
// whose HCA ACKed a message and died before the receive's completion
// reached its memory.
type forgeCtrl struct {
	verbs.QP
	kind  uint32
	forge func() uint64
}

func (q forgeCtrl) PostSend(wrs []verbs.SendWR) (int, error) {
	for i := range wrs {
		if w := &wrs[i]; w.WRID == ^uint64(0)-1 && w.Opcode == verbs.WRRDMAWriteWithImm && w.ImmData>>30 == q.kind {
			w.ImmData = q.kind<<30 | uint32(q.forge())&(1<<30-1)
		}
	}
	return q.QP.PostSend(wrs)
}

// TestCounterBehindSurfaces: node0 sends rounds to node1; the receive
// counter node1 gives in the handshake is one behind the notifications
// node0 saw complete. No rewind can be right: replaying from it would
// deliver a notification twice, skipping ahead would lose one. The error
// surfaces cleanly, on every profile: nothing is replayed, every signaled
// WR of node0 completes exactly once, every notification arrives at most
// once and in order, every receive completes once. When node1 fell back
// first (its notification carries the counter), node0 refuses it before
// moving anything, so node1 surfaces at once too; when node0 did (node1's
// acknowledgement carries it), node0's rewind refuses it.
func TestCounterBehindSurfaces(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kind   uint32 // the control message of node1 that carries the counter
		victim int    // whose HCA dies
	}{
		{"node1 falls back first, its notification behind", 1, 1},
		{"node0 falls back first, node1's acknowledgement behind", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forProfiles(t, func(t *testing.T, p sim.Profile) {
				var w *world
				k := 0
				wrap := func(qp verbs.QP) verbs.QP {
					k++
					if k == 1 { // node0's backup
						return qp
					}
					// one behind what node0's application saw complete
					return forgeCtrl{QP: qp, kind: tc.kind, forge: func() uint64 { return uint64(len(w.done[0])) - 1 }}
				}
				dir := crossnic.NewMemDirectory()
				w = newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: 41, Profile: p}, retry: 3, wrapBak: wrap, noMailbox: true, noRecovery: true})
				w.run(300*time.Microsecond, 0)
				if len(w.done[0]) < 2 {
					t.Fatalf("%d rounds completed before the fault", len(w.done[0]))
				}
				must(t, w.f.KillHCA(w.n[tc.victim].hca))
				w.run(time.Millisecond, 0)
				a, b := w.n[0], w.n[1]
				if sq, _ := a.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), "behind") {
					t.Fatalf("node0 %v %q, want surfaced on the counter behind", sq, a.conn.Reason())
				}
				if tc.kind == 1 {
					if sq, _ := b.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(b.conn.Reason(), "the peer cannot fail over") {
						t.Fatalf("node1 %v %q, want surfaced at once on node0's refusal", sq, b.conn.Reason())
					}
				}
				w.run(50 * time.Millisecond) // node0's default QP times out on a dead peer
				for _, n := range w.n {
					if st := n.conn.Stats(); st.Replayed != 0 || st.Delivered != 0 {
						t.Fatalf("%s %+v: something was rewound", n.name, st)
					}
				}
				must(t, w.exactlyOnce(0))
				must(t, w.checkSafe(0))
				if len(w.errs[0]) == 0 {
					t.Fatalf("no error reached node0's application: %d sent, %d done", w.sent[0], len(w.done[0]))
				}
			})
		})
	}
}
