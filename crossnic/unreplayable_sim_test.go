package crossnic_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// TestReplayableOpcodes: a backup QP carries SEND and RDMA WRITE (with
// immediate or not), RDMA READ and the atomics; not the WRs that name the
// default device's keys or state.
func TestReplayableOpcodes(t *testing.T) {
	for op, want := range map[verbs.WROpcode]bool{
		verbs.WRSend: true, verbs.WRSendWithImm: true, verbs.WRRDMAWrite: true, verbs.WRRDMAWriteWithImm: true,
		verbs.WRRDMARead: true, verbs.WRAtomicCmpAndSwp: true, verbs.WRAtomicFetchAdd: true,
		verbs.WRLocalInv: false, verbs.WRBindMW: false, verbs.WRSendWithInv: false, verbs.WRTSO: false, 200: false,
	} {
		if got := crossnic.Replayable(op); got != want {
			t.Errorf("Replayable(%v) = %v, want %v", op, got, want)
		}
	}
}

// TestUnreplayableOpcodeSurfaces: a Conn adopts A's QP with a LOCAL_INV
// among the outstanding WRs (the hot path recorded it); at the fault the
// error surfaces, naming it, and nothing is replayed. A Conn whose
// traffic is on the backup surfaces at a post of a WR the backup cannot
// carry.
func TestUnreplayableOpcodeSurfaces(t *testing.T) {
	f, a, b := adoptPair(t, 31)
	a.postDirect(t, a.round(b, 0, false))
	a.direct.sends = append(a.direct.sends, verbs.SendWR{WRID: 77, Opcode: verbs.WRLocalInv, SendFlags: verbs.SendSignaled})
	a.direct.inline = append(a.direct.inline, nil)
	conn, err := a.shadow.Adopt(a.qp, a.cq, a.direct.resume())
	must(t, err)
	must(t, f.KillHCA(a.h.HCA("mlx5_0")))
	conn.HandleEvent(a.ctx, verbs.AsyncEvent{Type: verbs.EventDeviceFatal}, 1)
	f.RunFor(time.Millisecond)
	if sq, _ := conn.State(); sq != fsm.SQSurfaced || !strings.Contains(conn.Reason(), "WR 77 is a LOCAL_INV") {
		t.Fatalf("state %v reason %q, want surfaced naming the LOCAL_INV", sq, conn.Reason())
	}
	if st := conn.Stats(); st.Replayed != 0 {
		t.Fatalf("stats %+v: something was replayed", st)
	}
}

// TestUnreplayablePostAfterFailoverSurfaces: A's traffic runs on the
// backup after its link went down; a LOCAL_INV A's application posts then
// cannot go there (it would invalidate a key of the backup's, or none):
// the error surfaces, naming it.
func TestUnreplayablePostAfterFailoverSurfaces(t *testing.T) {
	w := newWorld(t, 32)
	w.run(200*time.Microsecond, 0)
	a := w.n[0]
	must(t, w.f.SetLink(a.hca.Port(1), false))
	w.run(5*time.Millisecond, 0)
	if sq, _ := a.conn.State(); sq != fsm.SQFallback {
		t.Fatalf("A is %v after its link went down, want fallback", sq)
	}
	_, _ = a.conn.PostSend([]verbs.SendWR{{WRID: 88, Opcode: verbs.WRLocalInv, SendFlags: verbs.SendSignaled}})
	if sq, _ := a.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), "WR 88 is a LOCAL_INV") {
		t.Fatalf("state %v reason %q, want surfaced naming the LOCAL_INV", sq, a.conn.Reason())
	}
}
