package crossnic

import (
	"errors"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

var cap8 = verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 16}

func wr(id uint64, op verbs.WROpcode, signaled bool) verbs.SendWR {
	w := verbs.SendWR{WRID: id, Opcode: op, RKey: 0x500, RemoteAddr: 0x1000,
		SGList: []verbs.SGE{{Addr: 0x2000, Length: 64, LKey: 0x100}}}
	if signaled {
		w.SendFlags = verbs.SendSignaled
	}
	return w
}

func mustRecord(t *testing.T, r *SendRing, ws ...verbs.SendWR) {
	t.Helper()
	for i := range ws {
		if err := r.Record(&ws[i], nil); err != nil {
			t.Fatal(err)
		}
	}
}

func ids(r *SendRing) []uint64 {
	var out []uint64
	r.Outstanding(func(w *verbs.SendWR, _ []byte) bool { out = append(out, w.WRID); return true })
	return out
}

func TestSendRingRetiresInOrder(t *testing.T) {
	r, err := NewSendRing(cap8, false)
	if err != nil {
		t.Fatal(err)
	}
	mustRecord(t, r, wr(1, verbs.WRRDMAWrite, false), wr(2, verbs.WRRDMAWriteWithImm, true),
		wr(3, verbs.WRRDMAWrite, false), wr(4, verbs.WRSend, false))
	if n := r.CompleteSignaled(); n != 2 || r.NotifsDone() != 1 {
		t.Fatalf("retired %d, notifs %d; want 2 and 1", n, r.NotifsDone())
	}
	if got := ids(r); len(got) != 2 || got[0] != 3 {
		t.Fatalf("outstanding %v", got)
	}
	if n := r.CompleteSignaled(); n != 0 {
		t.Fatalf("no signaled WR outstanding, retired %d", n)
	}
	// sq_sig_all: every WR is signaled.
	r2, _ := NewSendRing(cap8, true)
	mustRecord(t, r2, wr(1, verbs.WRRDMAWrite, false), wr(2, verbs.WRRDMAWrite, false))
	if n := r2.CompleteSignaled(); n != 1 {
		t.Fatalf("sq_sig_all: retired %d, want 1", n)
	}
}

func TestSendRingCopiesAtPostTime(t *testing.T) {
	r, _ := NewSendRing(cap8, false)
	w := wr(1, verbs.WRRDMAWrite, true)
	mustRecord(t, r, w)
	w.SGList[0].LKey = 0xdead // the application reuses its SGE array
	r.Outstanding(func(got *verbs.SendWR, _ []byte) bool {
		if got.SGList[0].LKey != 0x100 {
			t.Fatal("the ring kept the caller's SGE array instead of a copy")
		}
		return false
	})
	mem := []byte("0123456789abcdef")
	in := verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendInline,
		SGList: []verbs.SGE{{Addr: 100, Length: 4}, {Addr: 108, Length: 4}}}
	read := func(addr uint64, n uint32) []byte { return mem[addr-100 : addr-100+uint64(n)] }
	if err := r.Record(&in, read); err != nil {
		t.Fatal(err)
	}
	copy(mem, "XXXXXXXXXXXXXXXX")
	var got []byte
	r.Outstanding(func(w *verbs.SendWR, inl []byte) bool { got = inl; return w.WRID != 2 })
	if string(got) != "012389ab" {
		t.Fatalf("inline copy %q", got)
	}
	if err := r.Record(&in, nil); err == nil {
		t.Fatal("inline WR without a memory reader was accepted")
	}
}

func TestSendRingFull(t *testing.T) {
	r, _ := NewSendRing(verbs.QPCap{MaxSendWR: 2, MaxSendSGE: 1}, false)
	mustRecord(t, r, wr(1, verbs.WRRDMAWrite, false), wr(2, verbs.WRRDMAWrite, true))
	w := wr(3, verbs.WRRDMAWrite, true)
	if err := r.Record(&w, nil); !errors.Is(err, ErrRingFull) {
		t.Fatalf("third WR in a 2-deep ring: %v", err)
	}
	big := verbs.SendWR{SGList: make([]verbs.SGE, 3)}
	r.CompleteSignaled()
	if err := r.Record(&big, nil); err == nil {
		t.Fatal("more SGEs than max_send_sge accepted")
	}
}

func TestPlanRewind(t *testing.T) {
	// Completed before the fault: one WRITE_WITH_IMM (send counter 1).
	// Outstanding: W W N W N W (N consumes a receive at the peer).
	build := func() *SendRing {
		r, _ := NewSendRing(cap8, false)
		mustRecord(t, r, wr(0, verbs.WRRDMAWriteWithImm, true))
		r.CompleteSignaled()
		mustRecord(t, r, wr(1, verbs.WRRDMAWrite, false), wr(2, verbs.WRRDMAWrite, false),
			wr(3, verbs.WRRDMAWriteWithImm, true), wr(4, verbs.WRRDMAWrite, false),
			wr(5, verbs.WRSendWithImm, false), wr(6, verbs.WRRDMAWrite, true))
		return r
	}
	cases := []struct {
		peerRecv          uint64
		delivered, replay int
		err               error
	}{
		{1, 0, 6, nil}, // nothing outstanding consumed: replay all
		{2, 3, 3, nil}, // the peer got notification 3: WRs 1-3 executed
		{3, 5, 1, nil}, // and notification 5
		{0, 0, 0, ErrCounterMismatch},
		{4, 0, 0, ErrCounterMismatch},
	}
	for _, c := range cases {
		p, err := build().PlanRewind(c.peerRecv)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("peerRecv %d: err %v, want %v", c.peerRecv, err, c.err)
			}
			continue
		}
		if err != nil || p.Delivered != c.delivered || p.Replay != c.replay {
			t.Errorf("peerRecv %d: plan %+v, %v; want delivered %d replay %d", c.peerRecv, p, err, c.delivered, c.replay)
		}
	}
	// Delivered WRs retire with a synthesized completion for the signaled ones.
	r := build()
	p, _ := r.PlanRewind(2)
	var synth []uint64
	r.TakeDelivered(p.Delivered, func(w *verbs.SendWR) { synth = append(synth, w.WRID) })
	if len(synth) != 1 || synth[0] != 3 || r.NotifsDone() != 2 || r.Len() != 3 {
		t.Fatalf("synthesized %v, notifs %d, left %d", synth, r.NotifsDone(), r.Len())
	}
}

// TestPlanRefusesUnansweredRead: a READ before a notification the peer
// consumed was executed there, but its response never arrived here (its
// data may be missing); reading again could read what the peer changed
// after that notification. The rewind refuses. A READ after the last
// consumed notification is replayed like a WRITE.
func TestPlanRefusesUnansweredRead(t *testing.T) {
	build := func() *SendRing {
		r, _ := NewSendRing(cap8, false)
		mustRecord(t, r, wr(1, verbs.WRRDMAWrite, false), wr(2, verbs.WRRDMARead, false),
			wr(3, verbs.WRRDMAWriteWithImm, true), wr(4, verbs.WRRDMARead, false), wr(5, verbs.WRRDMAWriteWithImm, true))
		return r
	}
	if _, err := build().PlanRewind(1); !errors.Is(err, ErrReadUnanswered) || !strings.Contains(err.Error(), "WR 2") {
		t.Fatalf("READ 2 before consumed notification 3: %v, want ErrReadUnanswered naming WR 2", err)
	}
	if p, err := build().PlanRewind(0); err != nil || p.Delivered != 0 || p.Replay != 5 {
		t.Fatalf("nothing consumed: plan %+v, %v; want all 5 replayed", p, err)
	}
	r := build()
	r.CompleteSignaled() // WRs 1-3 completed here: READ 2 answered
	if p, err := r.PlanRewind(1); err != nil || p.Delivered != 0 || p.Replay != 2 {
		t.Fatalf("READ 4 after the last consumed notification: plan %+v, %v; want 2 replayed", p, err)
	}
}

func TestPlanRefusesWithAtomicOutstanding(t *testing.T) {
	r, _ := NewSendRing(cap8, false)
	a := wr(1, verbs.WRAtomicFetchAdd, true)
	a.SGList[0].Length = 8
	mustRecord(t, r, wr(0, verbs.WRRDMAWrite, false), a)
	if _, err := r.PlanRewind(0); !errors.Is(err, ErrAtomicOutstanding) || !r.AtomicOutstanding() {
		t.Fatalf("atomic outstanding: %v", err)
	}
	r.CompleteSignaled()
	if _, err := r.PlanRewind(0); err != nil || r.AtomicOutstanding() {
		t.Fatalf("after the atomic completed: %v", err)
	}
}

func TestTranslate(t *testing.T) {
	k := &KeyMap{LKeys: map[uint32]uint32{0x100: 0x900},
		RKey: func(rk uint32) (uint32, bool) { return rk + 0x1000, rk == 0x500 }}
	sges := make([]verbs.SGE, 0, 2)
	var dst verbs.SendWR
	src := wr(1, verbs.WRRDMAWriteWithImm, true)
	if err := k.Translate(&dst, sges, &src); err != nil {
		t.Fatal(err)
	}
	if dst.SGList[0].LKey != 0x900 || dst.RKey != 0x1500 || dst.WRID != 1 || dst.RemoteAddr != 0x1000 || src.SGList[0].LKey != 0x100 {
		t.Fatalf("translated %+v (source %+v)", dst, src)
	}
	bad := wr(2, verbs.WRRDMARead, true)
	bad.RKey = 0x501
	if err := k.Translate(&dst, sges, &bad); err == nil {
		t.Fatal("unknown remote rkey accepted")
	}
	bad = wr(3, verbs.WRSend, true)
	bad.SGList[0].LKey = 0x101
	if err := k.Translate(&dst, sges, &bad); err == nil {
		t.Fatal("unknown lkey accepted")
	}
	probe := verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, RKey: 0xbad}
	if err := k.Translate(&dst, sges, &probe); err != nil {
		t.Fatalf("a zero-length WRITE needs no rkey: %v", err)
	}
	send := wr(5, verbs.WRSend, true)
	send.RKey = 0xbad
	if err := k.Translate(&dst, sges, &send); err != nil || dst.RKey != 0xbad {
		t.Fatalf("a SEND has no rkey to translate: %v", err)
	}
}

func TestRecvRing(t *testing.T) {
	r, err := NewRecvRing(cap8)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		w := verbs.RecvWR{WRID: i, SGList: []verbs.SGE{{Addr: i, Length: 8, LKey: 7}}}
		if err := r.Record(&w); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Complete(true); err != nil || r.Completed() != 1 || r.Len() != 2 {
		t.Fatalf("after one completion: %v, counter %d, outstanding %d", err, r.Completed(), r.Len())
	}
	var got []uint64
	r.Outstanding(func(w *verbs.RecvWR) bool { got = append(got, w.WRID); return true })
	if len(got) != 2 || got[0] != 2 {
		t.Fatalf("outstanding %v", got)
	}
	r.Complete(false)
	r.Complete(true)
	if r.Completed() != 2 {
		t.Fatalf("counter %d: a flushed receive is not a delivery", r.Completed())
	}
	if err := r.Complete(true); err == nil {
		t.Fatal("completion with nothing outstanding accepted")
	}
}

// TestUnreplayableOutstandingRefusesRewind: with a LOCAL_INV outstanding
// the rewind plan is refused (a peer's notification is then refused) and
// says which WR; once it retired, the plan is made again.
func TestUnreplayableOutstandingRefusesRewind(t *testing.T) {
	r, err := NewSendRing(cap8, false)
	if err != nil {
		t.Fatal(err)
	}
	mustRecord(t, r, wr(1, verbs.WRSend, true), wr(2, verbs.WRLocalInv, true))
	if _, err := r.PlanRewind(0); !errors.Is(err, ErrUnreplayable) || !strings.Contains(err.Error(), "WR 2 is a LOCAL_INV") {
		t.Fatalf("plan with a LOCAL_INV outstanding: %v", err)
	}
	r.CompleteSignaled() // WR 1
	r.CompleteSignaled() // WR 2
	if why := r.Unreplayable(); why != "" {
		t.Fatalf("after it retired: %q", why)
	}
	if _, err := r.PlanRewind(1); err != nil {
		t.Fatalf("plan after it retired: %v", err)
	}
	mustRecord(t, r, wr(3, verbs.WRBindMW, false))
	r.dropLast() // its post failed
	if why := r.Unreplayable(); why != "" {
		t.Fatalf("after its post failed: %q", why)
	}
}
