package crossnic_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// side is one host's default or backup resources.
type side struct {
	ctx verbs.Context
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
}

const (
	slot   = 256
	rounds = 40
	qcap   = 128
)

func openSide(t testing.TB, h *sim.Host, dev string, buf []byte) *side {
	return openSideSkip(t, h, dev, buf, 0)
}

// openSideSkip first creates skip unused QPs, so the side's QP number
// differs from other HCAs' first QP.
func openSideSkip(t testing.TB, h *sim.Host, dev string, buf []byte, skip int) *side {
	return openSideCQ(t, h, dev, buf, skip, 1024)
}

// openSideCQ is openSideSkip with a CQ of cqe entries.
func openSideCQ(t testing.TB, h *sim.Host, dev string, buf []byte, skip, cqe int) *side {
	s := &side{}
	var err error
	s.ctx, err = h.Open(dev)
	must(t, err)
	s.pd, err = s.ctx.AllocPD()
	must(t, err)
	s.cq, err = s.ctx.CreateCQ(cqe, nil, 0)
	must(t, err)
	for i := 0; i < skip; i++ {
		_, err = s.pd.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
	}
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: qcap, MaxRecvWR: qcap, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: slot}})
	must(t, err)
	s.mr, err = s.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	must(t, err)
	return s
}

func connect(t testing.TB, a, b *side) { connectRetry(t, a, b, 3) }

// connectRetry is connect with the given retry_cnt.
func connectRetry(t testing.TB, a, b *side, retry uint8) { connectRNR(t, a, b, retry, 7) }

// connectRNR is connectRetry with the given rnr_retry (7: without end).
func connectRNR(t testing.TB, a, b *side, retry, rnr uint8) { connectTimeout(t, a, b, retry, rnr, 10) }

// connectTimeout is connectRNR with the given local ACK timeout
// (4.096 µs·2^timeout). The QP allows remote WRITEs, READs and atomics,
// as the application's MRs do.
func connectTimeout(t testing.TB, a, b *side, retry, rnr, timeout uint8) {
	pa, err := b.ctx.QueryPort(1)
	must(t, err)
	c := verbs.RCConnect{AH: verbs.AHAttr{DLID: pa.LID, PortNum: 1},
		Access:  verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
		PathMTU: verbs.MTU1024, DestQPN: b.qp.QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 1,
		Timeout: timeout, RetryCnt: retry, RNRRetry: rnr, MaxRdAtomic: 1}
	must(t, c.Apply(a.qp.Modify))
}

func poll(t testing.TB, cq verbs.CQ) []verbs.WC {
	var out []verbs.WC
	buf := make([]verbs.WC, 64)
	for {
		n, err := cq.Poll(buf)
		must(t, err)
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

// pattern is the content of round's slot (shared: callers only read it).
func pattern(round int) []byte { return patterns[uint8(round)] }

// patterns holds the 256 distinct patterns (31·round mod 256 depends on
// round mod 256 only), built once: the campaigns check every round.
var patterns = func() (p [256][]byte) {
	for r := range p {
		p[r] = make([]byte, slot)
		for i := range p[r] {
			p[r][i] = byte(r*31 + i)
		}
	}
	return p
}()

// TestRewindAfterLostAckDeliversNotificationsOnce: NCCL-Simple traffic (a
// bulk WRITE, then a WRITE_WITH_IMM notification) from A to B. The ACK of
// a notification is lost and A's HCA dies before A learns it executed.
// With B's receive counter the plan skips what B consumed; the rest is
// replayed on the backup HCAs with translated keys. B sees every
// notification exactly once, in order, with its bulk data intact, and A
// every signaled WR complete exactly once.
func TestRewindAfterLostAckDeliversNotificationsOnce(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 4}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	must(t, err)
	abuf, bbuf := make([]byte, rounds*slot), make([]byte, rounds*slot)
	ha, hb := f.Host("node0"), f.Host("node1")
	aDef, bDef := openSide(t, ha, "mlx5_0", abuf), openSide(t, hb, "mlx5_0", bbuf)
	aBak, bBak := openSide(t, ha, "mlx5_1", abuf), openSide(t, hb, "mlx5_1", bbuf)
	connect(t, aDef, bDef)
	connect(t, bDef, aDef)
	connect(t, aBak, bBak)
	connect(t, bBak, aBak)

	// Backup attributes, published in advance as the shadow verbs do.
	dir := crossnic.NewMemDirectory()
	bPort, _ := bDef.ctx.QueryPort(1)
	must(t, dir.PublishMR(crossnic.MRRef{LID: bPort.LID, RKey: bDef.mr.RKey()}, bBak.mr.RKey()))
	keys := &crossnic.KeyMap{LKeys: map[uint32]uint32{aDef.mr.LKey(): aBak.mr.LKey()},
		RKey: func(rk uint32) (uint32, bool) { return dir.LookupMR(crossnic.MRRef{LID: bPort.LID, RKey: rk}) }}
	bKeys := map[uint32]uint32{bDef.mr.LKey(): bBak.mr.LKey()}

	qc := verbs.QPCap{MaxSendWR: qcap, MaxRecvWR: qcap, MaxSendSGE: 1, MaxRecvSGE: 1}
	sring, err := crossnic.NewSendRing(qc, false)
	must(t, err)
	rring, err := crossnic.NewRecvRing(qc)
	must(t, err)
	for i := 0; i < rounds; i++ {
		w := verbs.RecvWR{WRID: uint64(i)}
		_, err := bDef.qp.PostRecv([]verbs.RecvWR{w})
		must(t, err)
		must(t, rring.Record(&w))
	}

	var aSeen []uint64 // completions the application on A sees
	var notifs []uint32
	checkB := func(wcs []verbs.WC) {
		for _, wc := range wcs {
			if wc.Status != verbs.WCSuccess {
				continue // flushes of the default QP are not the application's
			}
			must(t, rring.Complete(true))
			r := int(wc.ImmData)
			if !bytes.Equal(bbuf[r*slot:(r+1)*slot], pattern(r)) {
				t.Fatalf("notification %d arrived before its bulk data", r)
			}
			notifs = append(notifs, wc.ImmData)
		}
	}
	// Rounds 0..20 execute; the ACK of notification 20 (PSN 2*20+1) is
	// lost. Rounds 21..29 are posted at the instant A's HCA dies, so no
	// later ACK covers it: A cannot tell round 20 executed.
	must(t, f.DropResponse(aDef.qp, uint32(2*20+1)))
	for r := 0; r < 30; r++ {
		copy(abuf[r*slot:], pattern(r))
		ws := []verbs.SendWR{
			{WRID: uint64(2 * r), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: aDef.mr.Addr() + uint64(r*slot), Length: slot, LKey: aDef.mr.LKey()}},
				RemoteAddr: bDef.mr.Addr() + uint64(r*slot), RKey: bDef.mr.RKey()},
			{WRID: uint64(2*r + 1), Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(r),
				RemoteAddr: bDef.mr.Addr(), RKey: bDef.mr.RKey()},
		}
		_, err := aDef.qp.PostSend(ws)
		must(t, err)
		for i := range ws {
			must(t, sring.Record(&ws[i], nil))
		}
		if r <= 20 {
			f.RunFor(20 * time.Microsecond)
			for _, wc := range poll(t, aDef.cq) {
				if wc.Status == verbs.WCSuccess {
					aSeen = append(aSeen, wc.WRID)
					sring.CompleteSignaled()
				}
			}
		}
	}
	must(t, f.KillHCA(aDef.qp.(*sim.QP).HCA()))
	f.RunFor(time.Millisecond)
	for _, wc := range poll(t, aDef.cq) {
		if wc.Status == verbs.WCSuccess {
			t.Fatalf("completion %d after the death", wc.WRID)
		}
	}
	checkB(poll(t, bDef.cq))
	if len(notifs) < 21 {
		t.Fatalf("only %d notifications before the fault; the trace needs notification 20 delivered with its ACK lost", len(notifs))
	}

	// The handshake's content: B's receive counter. Plan and replay.
	plan, err := sring.PlanRewind(rring.Completed())
	must(t, err)
	if plan.Delivered == 0 {
		t.Fatalf("plan %+v: the executed notification whose ACK was lost must not be replayed", plan)
	}
	sring.TakeDelivered(plan.Delivered, func(w *verbs.SendWR) { aSeen = append(aSeen, w.WRID) })
	// B reposts its outstanding receives on the backup QP.
	rring.Outstanding(func(w *verbs.RecvWR) bool {
		c := *w
		for i := range c.SGList {
			c.SGList[i].LKey = bKeys[c.SGList[i].LKey]
		}
		_, err := bBak.qp.PostRecv([]verbs.RecvWR{c})
		must(t, err)
		return true
	})
	// Replay onto A's backup QP, keys translated, with the backup rkey.
	var dst verbs.SendWR
	sges := make([]verbs.SGE, 0, 1)
	sring.Outstanding(func(w *verbs.SendWR, _ []byte) bool {
		must(t, keys.Translate(&dst, sges, w))
		dst.RemoteAddr = w.RemoteAddr // same memory, same address on the backup HCA
		_, err := aBak.qp.PostSend([]verbs.SendWR{dst})
		must(t, err)
		return true
	})
	f.RunFor(time.Millisecond)
	for _, wc := range poll(t, aBak.cq) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("replay failed: %+v", wc)
		}
		aSeen = append(aSeen, wc.WRID)
		sring.CompleteSignaled()
	}
	checkB(poll(t, bBak.cq))

	for i, n := range notifs {
		if n != uint32(i) {
			t.Fatalf("notifications %v: not exactly once and in order", notifs)
		}
	}
	if len(notifs) != 30 {
		t.Fatalf("%d notifications, want 30", len(notifs))
	}
	for i, id := range aSeen {
		if id != uint64(2*i+1) {
			t.Fatalf("A saw completions %v: each signaled WR exactly once, in order", aSeen)
		}
	}
	if len(aSeen) != 30 || sring.Len() != 0 {
		t.Fatalf("A saw %d completions, %d WRs still outstanding", len(aSeen), sring.Len())
	}
}

// TestRewindRefusedWithAtomicInFlight: an atomic outstanding at the fault
// means no replay: the plan says so and the error surfaces.
func TestRewindRefusedWithAtomicInFlight(t *testing.T) {
	r, err := crossnic.NewSendRing(verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}, false)
	must(t, err)
	w := verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicFetchAdd, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Length: 8}}}
	must(t, r.Record(&w, nil))
	if _, err := r.PlanRewind(0); !errors.Is(err, crossnic.ErrAtomicOutstanding) {
		t.Fatalf("plan with an atomic outstanding: %v", err)
	}
}
