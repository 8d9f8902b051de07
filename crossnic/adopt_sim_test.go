package crossnic_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// adoptCap: room for a slot of inline data, so inline SENDs can be tested.
var adoptCap = verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: slot}

// adoptApp is an application that posts straight on its default QP (as
// under the shim's hot path) until a Conn adopts the QP; direct records
// what the hot path would have recorded.
type adoptApp struct {
	*app
	h      *sim.Host
	bakCtx verbs.Context
	ch     verbs.CompChannel
	direct direct
}

// direct is the hot path's bookkeeping of one QP: posted WRs until a
// completion the application polled retires them, and the counters.
type direct struct {
	sends     []verbs.SendWR
	inline    [][]byte
	notifs    uint64
	recvs     []verbs.RecvWR
	recvsDone uint64
}

// retire applies the hot path's rule: a successful send completion
// retires the WRs up to the next signaled one, a receive completion the
// oldest receive; errors retire nothing.
func (d *direct) retire(wc verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		return
	}
	if wc.Opcode&verbs.WCRecv != 0 {
		d.recvs = d.recvs[1:]
		d.recvsDone++
		return
	}
	for len(d.sends) > 0 {
		w := d.sends[0]
		d.sends, d.inline = d.sends[1:], d.inline[1:]
		if w.Opcode.ConsumesRecv() {
			d.notifs++
		}
		if w.SendFlags&verbs.SendSignaled != 0 {
			return
		}
	}
}

func (d *direct) resume() crossnic.Resume {
	return crossnic.Resume{Sends: d.sends, Inline: d.inline, NotifsDone: d.notifs, Recvs: d.recvs, RecvsDone: d.recvsDone}
}

func newAdoptApp(t *testing.T, h *sim.Host, dir crossnic.Directory) *adoptApp {
	return newAdoptAppWrap(t, h, dir, nil)
}

// newAdoptAppWrap is newAdoptApp with the backup context the Shadow uses
// wrapped by wrapBak (nil: as it is): tests inject its failures so.
func newAdoptAppWrap(t *testing.T, h *sim.Host, dir crossnic.Directory, wrapBak func(verbs.Context) verbs.Context) *adoptApp {
	var descs []pathsel.HCA
	var ctxs []verbs.Context
	for _, a := range h.HCAs() {
		c, err := h.Open(a.Name())
		must(t, err)
		d, err := pathsel.Describe(c)
		must(t, err)
		ctxs, descs = append(ctxs, c), append(descs, d)
	}
	j, err := pathsel.ChooseBackup(descs, 0)
	must(t, err)
	x := &adoptApp{app: &app{ctx: ctxs[0]}, h: h, bakCtx: ctxs[j]}
	bak := ctxs[j]
	if wrapBak != nil {
		bak = wrapBak(bak)
	}
	x.shadow, err = crossnic.NewShadow(ctxs[0], bak, dir)
	must(t, err)
	x.ch, err = ctxs[j].CreateCompChannel()
	must(t, err)
	x.shadow.SetCompChannel(x.ch)
	x.pd, err = x.ctx.AllocPD()
	must(t, err)
	// the application's memory, as a real device would register it
	// (sim.Config.StrictMem)
	x.buf, err = x.pd.(verbs.MemAllocator).AllocMem(3 * nslots * slot)
	must(t, err)
	x.mr, err = x.pd.RegMR(x.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	must(t, x.shadow.RegMR(x.pd, x.mr, x.buf))
	x.cq, err = x.ctx.CreateCQ(256, nil, 0)
	must(t, err)
	init := verbs.QPInitAttr{SendCQ: x.cq, RecvCQ: x.cq, QPType: verbs.QPTRC, Cap: adoptCap}
	x.qp, err = x.pd.CreateQP(init)
	must(t, err)
	must(t, x.shadow.CreateQP(x.pd, x.qp, init))
	return x
}

// Buffer layout: [0, nslots) what it sends, [nslots, 2*nslots) where the
// peer's SENDs land, [2*nslots, 3*nslots) where the peer's WRITEs land.
func (x *adoptApp) slotAddr(region, s int) uint64 {
	return x.mr.Addr() + uint64((region*nslots+s%nslots)*slot)
}

func (x *adoptApp) slotBytes(region, s int) []byte {
	o := (region*nslots + s%nslots) * slot
	return x.buf[o : o+slot]
}

// round r from x to peer: an unsignaled WRITE of the slot, then a
// signaled SEND_WITH_IMM of the same bytes; or, inline, the SEND alone.
func (x *adoptApp) round(peer *adoptApp, r int, inline bool) []verbs.SendWR {
	copy(x.slotBytes(0, r), pattern(r))
	send := verbs.SendWR{WRID: uint64(2*r + 1), Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(r),
		SGList: []verbs.SGE{{Addr: x.slotAddr(0, r), Length: slot, LKey: x.mr.LKey()}}}
	if inline {
		send.SendFlags |= verbs.SendInline
		return []verbs.SendWR{send}
	}
	return []verbs.SendWR{
		{WRID: uint64(2 * r), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: x.slotAddr(0, r), Length: slot, LKey: x.mr.LKey()}},
			RemoteAddr: peer.slotAddr(2, r), RKey: peer.mr.RKey()},
		send,
	}
}

// postDirect posts wrs straight on the default QP and records them as the
// hot path does (inline payloads copied at post time).
func (x *adoptApp) postDirect(t *testing.T, wrs []verbs.SendWR) {
	t.Helper()
	_, err := x.qp.PostSend(wrs)
	must(t, err)
	for _, w := range wrs {
		var cp []byte
		if w.SendFlags&verbs.SendInline != 0 {
			o := int(w.SGList[0].Addr - x.mr.Addr())
			cp = append([]byte(nil), x.buf[o:o+int(w.SGList[0].Length)]...)
		}
		w.SGList = append([]verbs.SGE(nil), w.SGList...)
		x.direct.sends = append(x.direct.sends, w)
		x.direct.inline = append(x.direct.inline, cp)
	}
}

func (x *adoptApp) recvDirect(t *testing.T, k int) {
	t.Helper()
	w := verbs.RecvWR{WRID: uint64(1000 + k), SGList: []verbs.SGE{{Addr: x.slotAddr(1, k), Length: slot, LKey: x.mr.LKey()}}}
	_, err := x.qp.PostRecv([]verbs.RecvWR{w})
	must(t, err)
	x.direct.recvs = append(x.direct.recvs, w)
}

// pollDirect polls the default CQ as the application does under the hot
// path, retiring what it polls.
func (x *adoptApp) pollDirect(t *testing.T) []verbs.WC {
	t.Helper()
	wcs := poll(t, x.cq)
	for _, wc := range wcs {
		x.direct.retire(wc)
	}
	return wcs
}

func (x *adoptApp) pollConn(t *testing.T) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	wc := make([]verbs.WC, 16)
	for {
		n, err := x.conn.Poll(wc)
		must(t, err)
		if n == 0 {
			return out
		}
		out = append(out, wc[:n]...)
	}
}

// adoptPair: two connected applications, B's receives posted, with
// traffic from A posted straight on the default QPs.
func adoptPair(t *testing.T, seed uint64) (*sim.Fabric, *adoptApp, *adoptApp) {
	f, a, b, _ := adoptPairDir(t, seed)
	return f, a, b
}

// adoptPairDir is adoptPair with the directory the two publish into.
func adoptPairDir(t *testing.T, seed uint64) (*sim.Fabric, *adoptApp, *adoptApp, *crossnic.MemDirectory) {
	return adoptPairCfg(t, sim.Config{Seed: seed})
}

// adoptPairCfg is adoptPairDir on a fabric of the given configuration.
func adoptPairCfg(t *testing.T, cfg sim.Config) (*sim.Fabric, *adoptApp, *adoptApp, *crossnic.MemDirectory) {
	return adoptPairWrap(t, cfg, nil)
}

// adoptPairWrap is adoptPairCfg with A's backup context wrapped
// (newAdoptAppWrap).
func adoptPairWrap(t *testing.T, cfg sim.Config, wrapBakA func(verbs.Context) verbs.Context) (*sim.Fabric, *adoptApp, *adoptApp, *crossnic.MemDirectory) {
	f, err := sim.NewRailFabric(sim.RailSpec{Config: cfg, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	must(t, err)
	dir := crossnic.NewMemDirectory()
	a, b := newAdoptAppWrap(t, f.Host("node0"), dir, wrapBakA), newAdoptApp(t, f.Host("node1"), dir)
	connectApp(t, a.app, b.app, false)
	connectApp(t, b.app, a.app, false)
	if a.shadow.Scan() != 1 || !a.shadow.Ready(a.qp) || !b.shadow.Ready(b.qp) {
		t.Fatal("backups not connected")
	}
	for k := 0; k < 16; k++ {
		b.recvDirect(t, k)
	}
	return f, a, b, dir
}

// TestAdoptMidStream: A's application posts rounds straight on its
// default QP; the first ones complete and are polled directly, two more
// complete without being polled, then A's link goes down with three
// rounds in flight (the last one an inline SEND whose memory is reused at
// once). Conns adopt both QPs from what the hot path recorded, A's after
// the fault, B's only after A's notification reached its backup (the
// control receive was posted when the shadow connected it, and the
// completion channel says which QP it is for). Every adopted WR completes
// exactly once, in order, and B receives every round once, in order, with
// its data, the inline ones as they were when posted (one posted to the
// hot path before the fault, one posted through the Conn during the
// handshake).
func TestAdoptMidStream(t *testing.T) {
	for _, strict := range []bool{false, true} {
		// strict: the fabric registers only memory from AllocMem, as a
		// real device does (verbs/ibv); the replayed inline round is
		// then sent from a staging area allocated so
		t.Run(fmt.Sprintf("strict_mem=%v", strict), func(t *testing.T) {
			f, a, b, _ := adoptPairCfg(t, sim.Config{Seed: 21, StrictMem: strict})
			adoptMidStream(t, f, a, b)
		})
	}
}

func adoptMidStream(t *testing.T, f *sim.Fabric, a, b *adoptApp) {
	const inlineRound = 8
	var aDone []uint64
	var bGot []uint32
	checkB := func(wcs []verbs.WC) {
		t.Helper()
		for _, wc := range wcs {
			if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.QPNum != b.qp.QPN() {
				t.Fatalf("B's application saw %+v", wc)
			}
			r := int(wc.ImmData)
			wrote := r == inlineRound || r == inlineRound+1 || bytes.Equal(b.slotBytes(2, r), pattern(r))
			if wc.WRID != uint64(1000+len(bGot)) || !bytes.Equal(b.slotBytes(1, len(bGot)), pattern(r)) || !wrote {
				t.Fatalf("B's receive %d (wr_id %d) of round %d: data or order wrong", len(bGot), wc.WRID, r)
			}
			bGot = append(bGot, wc.ImmData)
		}
	}
	checkA := func(wcs []verbs.WC) {
		t.Helper()
		for _, wc := range wcs {
			if wc.Status != verbs.WCSuccess || wc.QPNum != a.qp.QPN() {
				t.Fatalf("A's application saw %+v", wc)
			}
			aDone = append(aDone, wc.WRID)
		}
	}
	for r := 0; r < 4; r++ {
		a.postDirect(t, a.round(b, r, false))
	}
	f.RunFor(50 * time.Microsecond)
	checkA(a.pollDirect(t))
	checkB(b.pollDirect(t))
	if len(aDone) != 4 || len(bGot) != 4 {
		t.Fatalf("before the fault: A %v, B %v", aDone, bGot)
	}
	// Two rounds complete, unpolled: their completions wait in the CQs.
	for r := 4; r < 6; r++ {
		a.postDirect(t, a.round(b, r, false))
	}
	f.RunFor(50 * time.Microsecond)
	// The link goes down; three more rounds are posted and stay in flight.
	must(t, f.SetLink(a.ctx.(*sim.Context).HCA().Port(1), false))
	for r := 6; r < 9; r++ {
		a.postDirect(t, a.round(b, r, r == inlineRound))
	}
	copy(a.slotBytes(0, inlineRound), bytes.Repeat([]byte{0xee}, slot)) // the inline WR's memory is reused
	st := a.direct.resume()
	if len(st.Sends) != 9 || st.NotifsDone != 4 {
		t.Fatalf("hot path holds %d sends, %d notifications done", len(st.Sends), st.NotifsDone)
	}
	var err error
	a.conn, err = a.shadow.Adopt(a.qp, a.cq, st)
	must(t, err)
	a.conn.HandleEvent(a.ctx, verbs.AsyncEvent{Type: verbs.EventPortErr, Port: 1}, 1)
	if sq, _ := a.conn.State(); sq != fsm.SQAwaitAck {
		t.Fatalf("A after PORT_ERR: %v", sq)
	}
	// During the handshake an inline round is only recorded: its payload
	// is copied through the memory reader, the memory reused at once.
	_, err = a.conn.PostSend(a.round(b, 9, true))
	if !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("inline post without a memory reader: %v", err)
	}
	a.conn.SetMemReader(func(addr uint64, n uint32) []byte {
		o := addr - a.mr.Addr()
		return a.buf[o : o+uint64(n)]
	})
	_, err = a.conn.PostSend(a.round(b, 9, true))
	must(t, err)
	copy(a.slotBytes(0, 9), bytes.Repeat([]byte{0xdd}, slot))
	f.RunFor(20 * time.Microsecond)
	checkA(a.pollConn(t))

	// B has no Conn yet; the notification is on its backup CQ, and the
	// completion channel names that CQ.
	cq, err := b.ch.GetCQEvent()
	must(t, err)
	b.ch.AckCQEvents(cq, 1)
	if q, ok := b.shadow.DefaultOf(cq); !ok || q != b.qp {
		t.Fatalf("DefaultOf(the backup CQ) = %v, %v; want B's QP", q, ok)
	}
	if _, ok := b.shadow.DefaultOf(b.cq); ok {
		t.Fatal("DefaultOf knows the application's own CQ")
	}
	b.conn, err = b.shadow.Adopt(b.qp, b.cq, b.direct.resume())
	must(t, err)
	for i := 0; i < 200 && len(bGot) < 10; i++ {
		f.RunFor(10 * time.Microsecond)
		checkB(b.pollConn(t))
		checkA(a.pollConn(t))
	}
	// Traffic continues on the backup.
	for r := 10; r < 13; r++ {
		_, err := a.conn.PostSend(a.round(b, r, false))
		must(t, err)
	}
	for i := 0; i < 200 && (len(bGot) < 13 || len(aDone) < 13); i++ {
		f.RunFor(10 * time.Microsecond)
		checkB(b.pollConn(t))
		checkA(a.pollConn(t))
	}
	for i, id := range aDone {
		if id != uint64(2*i+1) {
			t.Fatalf("A's completions %v: not each signaled WR once, in order", aDone)
		}
	}
	for i, r := range bGot {
		if r != uint32(i) {
			t.Fatalf("B's rounds %v: not each once, in order", bGot)
		}
	}
	if len(aDone) != 13 || len(bGot) != 13 {
		t.Fatalf("A completed %d rounds, B received %d; want 13", len(aDone), len(bGot))
	}
	sa, sb := a.conn.Stats(), b.conn.Stats()
	if sq, _ := a.conn.State(); sq != fsm.SQFallback || sa.Faults != 1 || sa.Replayed < 6 || sa.BackupCompletions < 6 {
		t.Fatalf("A %v, stats %+v", sq, sa)
	}
	if sq, rq := b.conn.State(); sq != fsm.SQFallback || rq != fsm.RQFallback || sb.RecvsMoved != 10 {
		t.Fatalf("B %v/%v, stats %+v", sq, rq, sb)
	}
	must(t, a.conn.Close())
}

// TestAdoptCounterMismatchSurfaces: a hot path that claims more
// notifications complete than the peer received gives a counter the
// peer's contradicts: no replay guesses, the error surfaces and every
// outstanding signaled WR completes exactly once (flushed).
func TestAdoptCounterMismatchSurfaces(t *testing.T) {
	f, a, b := adoptPair(t, 22)
	must(t, f.SetLink(a.ctx.(*sim.Context).HCA().Port(1), false))
	for r := 0; r < 3; r++ {
		a.postDirect(t, a.round(b, r, false))
	}
	st := a.direct.resume()
	st.NotifsDone = 5 // B consumed none
	var err error
	a.conn, err = a.shadow.Adopt(a.qp, a.cq, st)
	must(t, err)
	b.conn, err = b.shadow.Adopt(b.qp, b.cq, b.direct.resume())
	must(t, err)
	a.conn.HandleEvent(a.ctx, verbs.AsyncEvent{Type: verbs.EventPortErr, Port: 1}, 1)
	var got []verbs.WC
	for i := 0; i < 100; i++ {
		f.RunFor(10 * time.Microsecond)
		got = append(got, a.pollConn(t)...)
		b.pollConn(t)
	}
	if sq, _ := a.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), "inconsistent") {
		t.Fatalf("A %v (%q), want surfaced on the counter", sq, a.conn.Reason())
	}
	seen := map[uint64]int{}
	for _, wc := range got {
		if wc.Status == verbs.WCSuccess {
			t.Fatalf("A's application saw a success %+v after the counter mismatch", wc)
		}
		seen[wc.WRID]++
	}
	for r := 0; r < 3; r++ {
		if seen[uint64(2*r+1)] != 1 {
			t.Fatalf("completions %v: the signaled WR of round %d did not complete exactly once", got, r)
		}
	}
}

// TestAdoptRefusesInconsistentState: what the hot path hands over is
// checked against the QP before anything is posted.
func TestAdoptRefusesInconsistentState(t *testing.T) {
	_, a, b := adoptPair(t, 23)
	wr := a.round(b, 0, false)[1]
	in := wr
	in.SendFlags |= verbs.SendInline
	many := make([]verbs.SendWR, 33)
	for i := range many {
		many[i] = wr
	}
	manyR := make([]verbs.RecvWR, 33)
	two := wr
	two.SGList = []verbs.SGE{wr.SGList[0], wr.SGList[0]}
	for _, c := range []struct {
		name string
		st   crossnic.Resume
	}{
		{"more sends than the ring holds", crossnic.Resume{Sends: many}},
		{"more receives than the ring holds", crossnic.Resume{Recvs: manyR}},
		{"inline copies not one per send", crossnic.Resume{Sends: []verbs.SendWR{wr, wr}, Inline: [][]byte{nil}}},
		{"inline WR without its copy", crossnic.Resume{Sends: []verbs.SendWR{in}, Inline: [][]byte{nil}}},
		{"inline copy of the wrong length", crossnic.Resume{Sends: []verbs.SendWR{in}, Inline: [][]byte{make([]byte, 3)}}},
		{"copy for a WR that is not inline", crossnic.Resume{Sends: []verbs.SendWR{wr}, Inline: [][]byte{make([]byte, slot)}}},
		{"more SGEs than the QP takes", crossnic.Resume{Sends: []verbs.SendWR{two}}},
	} {
		if _, err := a.shadow.Adopt(a.qp, a.cq, c.st); !errors.Is(err, crossnic.ErrResume) {
			t.Errorf("%s: Adopt returned %v, want ErrResume", c.name, err)
		}
	}
	// An unknown QP, or one whose backup is not connected, cannot be adopted.
	other, err := a.pd.CreateQP(verbs.QPInitAttr{SendCQ: a.cq, RecvCQ: a.cq, QPType: verbs.QPTRC, Cap: adoptCap})
	must(t, err)
	if _, err := a.shadow.Adopt(other, a.cq, crossnic.Resume{}); err == nil {
		t.Error("adopted a QP the shadow does not know")
	}
	// A QP adopted with nothing outstanding is simply protected from now on.
	c, err := a.shadow.Adopt(a.qp, a.cq, crossnic.Resume{})
	must(t, err)
	if sq, _ := c.State(); sq != fsm.SQDefault {
		t.Fatalf("fresh adoption in %v", sq)
	}
	// Inline WRs posted through a Conn need a reader of local memory.
	if _, err := c.PostSend([]verbs.SendWR{in}); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("inline post without a memory reader: %v, want EINVAL", err)
	}
	// Surface gives the QP back to plain verbs: posts go to the default QP
	// as they are.
	c.Surface("the caller cannot replay")
	if sq, _ := c.State(); sq != fsm.SQSurfaced || c.Reason() != "the caller cannot replay" {
		t.Fatalf("after Surface: %v %q", sq, c.Reason())
	}
	if _, err := c.PostSend([]verbs.SendWR{in}); err != nil {
		t.Fatalf("a surfaced Conn refused an inline post: %v", err)
	}
	// A shadow's backup QP is released with the application's QP.
	must(t, a.shadow.DestroyQP(a.qp))
	if _, _, ok := a.shadow.BackupOf(a.qp); ok {
		t.Fatal("the backup of a destroyed QP is still known")
	}
	must(t, a.shadow.DestroyQP(a.qp)) // unknown by now: not an error
}
