package sim_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

func fetchAdd(wrid uint64, local verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{WRID: wrid, Opcode: verbs.WRAtomicFetchAdd, SendFlags: verbs.SendSignaled, CompareAdd: 1,
		SGList: []verbs.SGE{local}, RemoteAddr: raddr, RKey: rkey}
}

func TestLostAckRetransmitIsExecutedOnce(t *testing.T) {
	c := newConn(t, connOpts{})
	// The responder executes the atomic, the ACK is lost, the requester
	// retransmits: within one QP the responder answers from its atomic
	// cache and the counter moves once.
	must(t, c.f.DropResponse(c.a.qp, 100))
	c.a.post(t, fetchAdd(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(100 * time.Millisecond)
	if st := statuses(c.a.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCSuccess}) {
		t.Fatalf("completions %v", st)
	}
	if n := binary.LittleEndian.Uint64(c.b.buf); n != 1 {
		t.Fatalf("counter = %d after one FETCH_ADD with a lost ACK, want 1", n)
	}
	if st := c.f.Stats(); st.Retransmits != 1 || st.Dropped != 1 {
		t.Fatalf("stats %+v: want one loss and one retransmission", st)
	}

	// The same for a notification: one receive completion, not two.
	must(t, c.f.DropResponse(c.a.qp, 101))
	c.b.recv(t, 1, 0, 0)
	c.b.recv(t, 2, 0, 0)
	c.a.post(t, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: 9,
		SGList: []verbs.SGE{c.a.sge(0, 8)}, RemoteAddr: c.b.mr.Addr() + 64, RKey: c.b.mr.RKey()})
	c.run(100 * time.Millisecond)
	if rw := c.b.poll(t); len(rw) != 1 || rw[0].ImmData != 9 {
		t.Fatalf("responder completions %+v, want exactly one notification", rw)
	}
}

// TestAckLostTraceExecutesTwiceOnReplay reproduces the SHIFT paper's trace
// T2: the operation executed, its ACK was lost, then the sender's HCA died.
// To the sender this is indistinguishable from a lost request; replaying the
// same WR on a QP of another HCA executes it a second time.
func TestAckLostTraceExecutesTwiceOnReplay(t *testing.T) {
	for _, prof := range sim.Profiles {
		t.Run(string(prof), func(t *testing.T) {
			o := defaults(connOpts{profile: prof})
			f, err := sim.NewRailFabric(o.spec)
			must(t, err)
			n0, n1 := f.Host("node0"), f.Host("node1")
			a := openEnd(t, n0, o)
			b := openEnd(t, n1, o)
			o2 := o
			o2.dev = "mlx5_1"
			a2 := openEnd(t, n0, o2)
			b2 := openEnd(t, n1, o2)
			connectRC(t, a, b, o)
			connectRC(t, b, a, o)
			connectRC(t, a2, b2, o2)
			connectRC(t, b2, a2, o2)
			// b2 registers b's memory on the backup HCA: same address, new rkey.
			shadow, err := b2.pd.RegMR(b.buf, o.access)
			must(t, err)
			if shadow.Addr() != b.mr.Addr() {
				t.Fatalf("shadow registration at %#x, default at %#x: must be the same memory", shadow.Addr(), b.mr.Addr())
			}
			b.recv(t, 1, 0, 0)
			b2.recv(t, 1, 0, 0)

			must(t, f.DropResponse(a.qp, 100))
			must(t, f.DropResponse(a.qp, 101))
			a.post(t, fetchAdd(1, a.sge(0, 8), b.mr.Addr(), b.mr.RKey()),
				verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: 42,
					SGList: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()})
			f.RunFor(20 * time.Microsecond) // executed at the responder, ACKs lost
			must(t, f.KillHCA(a.hca))
			f.RunFor(time.Millisecond)
			var want []verbs.WCStatus // no completion from a dead ConnectX
			if fatalFlushes(prof) {
				want = []verbs.WCStatus{verbs.WCWRFlushErr, verbs.WCWRFlushErr}
			}
			if st := statuses(a.poll(t)); !slices.Equal(st, want) {
				t.Fatalf("sender completions %v, want %v", st, want)
			}
			if n := binary.LittleEndian.Uint64(b.buf); n != 1 {
				t.Fatalf("counter = %d: the request must have executed before the death", n)
			}
			if rw := b.poll(t); len(rw) != 1 || rw[0].ImmData != 42 {
				t.Fatalf("receiver completions %+v: the notification was delivered once", rw)
			}

			// Replay both WRs on the backup QP with the shadow rkey.
			a2.post(t, fetchAdd(1, a2.sge(0, 8), shadow.Addr(), shadow.RKey()),
				verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: 42,
					SGList: []verbs.SGE{a2.sge(0, 8)}, RemoteAddr: shadow.Addr() + 64, RKey: shadow.RKey()})
			f.RunFor(time.Millisecond)
			if st := statuses(a2.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCSuccess, verbs.WCSuccess}) {
				t.Fatalf("replay completions %v", st)
			}
			if n := binary.LittleEndian.Uint64(b.buf); n != 2 {
				t.Fatalf("counter = %d after replay, want 2: the atomic executed twice", n)
			}
			if rw := b2.poll(t); len(rw) != 1 || rw[0].ImmData != 42 {
				t.Fatalf("backup receiver completions %+v: the notification arrives a second time", rw)
			}
		})
	}
}

func TestLossyLinkDeliversEverythingIntact(t *testing.T) {
	c := newConn(t, connOpts{spec: sim.RailSpec{Config: sim.Config{Seed: 7}, Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 1}})
	must(t, c.f.SetLoss(c.a.hca.Port(1), 0.1, 0.1))
	for i := 0; i < 200; i++ {
		c.b.recv(t, uint64(i), 32768+i*64, 64)
	}
	for i := 0; i < 200; i++ {
		off := i * 64
		fill(c.a.buf[off:off+64], byte(i*3))
		op := verbs.WRRDMAWrite
		if i%4 == 3 {
			op = verbs.WRSend
		}
		wr := verbs.SendWR{WRID: uint64(i), Opcode: op, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{c.a.sge(off, 64)},
			RemoteAddr: c.b.mr.Addr() + uint64(off), RKey: c.b.mr.RKey()}
		c.a.post(t, wr)
		c.run(2 * time.Microsecond)
	}
	c.run(2 * time.Second)
	wcs := c.a.poll(t)
	if len(wcs) != 200 {
		t.Fatalf("%d completions, want 200", len(wcs))
	}
	for i, w := range wcs {
		if w.Status != verbs.WCSuccess || w.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, w)
		}
	}
	recvs := c.b.poll(t)
	if len(recvs) != 50 {
		t.Fatalf("%d receive completions, want 50 (one per SEND, never duplicated)", len(recvs))
	}
	for k, r := range recvs {
		i := 4*k + 3
		if r.WRID != uint64(k) || !bytes.Equal(c.b.buf[32768+k*64:32768+k*64+64], c.a.buf[i*64:i*64+64]) {
			t.Fatalf("SEND %d landed wrong (wr_id %d)", i, r.WRID)
		}
	}
	for i := 0; i < 200; i++ {
		if i%4 != 3 && !bytes.Equal(c.b.buf[i*64:i*64+64], c.a.buf[i*64:i*64+64]) {
			t.Fatalf("WRITE %d did not land intact", i)
		}
	}
	if st := c.f.Stats(); st.Dropped == 0 || st.Retransmits == 0 {
		t.Fatalf("stats %+v: 10%% loss must cause drops and retransmissions", st)
	}
}

func TestFlapScheduleRaisesPortEvents(t *testing.T) {
	c := newConn(t, connOpts{})
	p := c.a.hca.Port(1)
	must(t, c.f.Flap(p, c.f.Now()+time.Millisecond, 5*time.Millisecond, 20*time.Millisecond, 3))
	c.run(100 * time.Millisecond)
	want := []verbs.EventType{verbs.EventPortErr, verbs.EventPortActive, verbs.EventPortErr, verbs.EventPortActive,
		verbs.EventPortErr, verbs.EventPortActive}
	if ev := c.a.events(); !slices.Equal(ev, want) {
		t.Fatalf("events %v, want %v", ev, want)
	}
	if s := p.State(); s != verbs.PortActive {
		t.Fatalf("port ends %v", s)
	}
	if err := c.f.Flap(p, 0, 0, 0, 1); err == nil {
		t.Fatal("a flap with no down time was accepted")
	}
}

func TestPortComesBackThroughInit(t *testing.T) {
	c := newConn(t, connOpts{})
	p := c.a.hca.Port(1)
	must(t, c.f.SetLink(p, false))
	pa, err := c.a.ctx.QueryPort(1)
	must(t, err)
	if pa.State != verbs.PortDown || pa.PhysState != verbs.PhysPolling {
		t.Fatalf("pulled cable: %v / %v", pa.State, pa.PhysState)
	}
	must(t, c.f.SetLink(p, true))
	pa, _ = c.a.ctx.QueryPort(1)
	if pa.State != verbs.PortInit || pa.PhysState != verbs.PhysLinkUp {
		t.Fatalf("plugged: %v / %v, want INIT / LinkUp until the SM sweep", pa.State, pa.PhysState)
	}
	c.run(sim.DefaultConfig.PortActivateDelay)
	if pa, _ = c.a.ctx.QueryPort(1); pa.State != verbs.PortActive {
		t.Fatalf("after the sweep: %v", pa.State)
	}
}

func TestLIDAndSMChanges(t *testing.T) {
	for _, prof := range sim.Profiles {
		t.Run(string(prof), func(t *testing.T) { lidAndSMChanges(t, prof) })
	}
}

func lidAndSMChanges(t *testing.T, prof sim.Profile) {
	c := newConn(t, connOpts{profile: prof})
	p := c.b.hca.Port(1)
	must(t, c.f.SetLID(p, 0x400))
	if ev := c.b.events(); !slices.Equal(ev, []verbs.EventType{verbs.EventLIDChange}) {
		t.Fatalf("events %v, want [LID_CHANGE]", ev)
	}
	// The requester still addresses the old LID: its WRs time out.
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(time.Second)
	if st := statuses(c.a.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCRetryExcErr}) {
		t.Fatalf("completions %v", st)
	}
	if err := c.f.SetLID(p, 0x401); err == nil {
		t.Fatal("a LID not aligned to the LMC was accepted")
	}
	must(t, c.f.SetSMLID(3))
	pa, _ := c.a.ctx.QueryPort(1)
	if pa.SMLID != 3 {
		t.Fatalf("SM LID %d", pa.SMLID)
	}
	n := 0
	for _, e := range c.a.events() {
		if e == verbs.EventSMChange {
			n++
		}
	}
	// Only the software SMA drivers raise SM_CHANGE (qib, hfi1).
	want := 0
	if prof == sim.ProfileRdmavt {
		want = 2
	}
	if n != want {
		t.Fatalf("%d SM_CHANGE events on a two-port HCA, want %d", n, want)
	}
}

func TestCQOverrunFailsItsQPs(t *testing.T) {
	o := defaults(connOpts{})
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	a := openEnd(t, f.Host("node0"), o)
	b := openEnd(t, f.Host("node1"), o)
	small, err := a.ctx.CreateCQ(3, nil, 0)
	must(t, err)
	a.qp, err = a.pd.CreateQP(verbs.QPInitAttr{SendCQ: small, RecvCQ: small, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	connectRC(t, a, b, o)
	connectRC(t, b, a, o)
	for i := 0; i < 5; i++ {
		a.post(t, write(uint64(i), a.sge(0, 8), b.mr.Addr(), b.mr.RKey()))
	}
	f.RunFor(time.Millisecond)
	if ev := a.events(); !slices.Equal(ev, []verbs.EventType{verbs.EventCQErr, verbs.EventQPFatal}) {
		t.Fatalf("events %v, want [CQ_ERR QP_FATAL]", ev)
	}
	if s := a.qp.State(); s != verbs.QPSErr {
		t.Fatalf("QP feeding an overrun CQ is %v, want ERR", s)
	}
	buf := make([]verbs.WC, 8)
	if n, err := small.Poll(buf); n != 3 || err != nil {
		t.Fatalf("poll: %d, %v; want the 3 stored completions", n, err)
	}
	if _, err := small.Poll(buf); verbs.ErrnoOf(err) != verbs.EIO {
		t.Fatalf("poll of an overrun CQ: %v, want EIO", err)
	}
}

func TestSenderDeathMidTransmissionLosesThePacket(t *testing.T) {
	c := newConn(t, connOpts{})
	fill(c.a.buf[:60000], 1)
	// 60 KB at 100 Gb/s take about 4.8 us to leave the port: a death at
	// the instant of posting catches the message still being sent.
	c.a.post(t, write(1, c.a.sge(0, 60000), c.b.mr.Addr(), c.b.mr.RKey()))
	must(t, c.f.KillHCA(c.a.hca))
	c.run(time.Millisecond)
	if !bytes.Equal(c.b.buf[:60000], make([]byte, 60000)) {
		t.Fatal("a message whose sender died while sending it landed at the responder")
	}
	// One that had fully left before the death lands.
	c2 := newConn(t, connOpts{})
	fill(c2.a.buf[:60000], 1)
	c2.a.post(t, write(1, c2.a.sge(0, 60000), c2.b.mr.Addr(), c2.b.mr.RKey()))
	c2.run(5 * time.Microsecond)
	must(t, c2.f.KillHCA(c2.a.hca))
	c2.run(time.Millisecond)
	if !bytes.Equal(c2.b.buf[:60000], c2.a.buf[:60000]) {
		t.Fatal("a message that left before its sender died did not land")
	}
}

// TestEndlessRetry7: with EndlessRetry7 a requester with retry_cnt 7 to a
// peer that never answers keeps retransmitting (rdma_rxe); without it,
// and with any lower count, the WR fails with RETRY_EXC_ERR. Once the
// link is back the endless requester's WR completes.
func TestEndlessRetry7(t *testing.T) {
	for _, tc := range []struct {
		name    string
		endless bool
		retry   uint8
		want    []verbs.WCStatus
	}{
		{"spec", false, 7, []verbs.WCStatus{verbs.WCRetryExcErr}},
		{"rxe-7", true, 7, nil},
		{"rxe-6", true, 6, []verbs.WCStatus{verbs.WCRetryExcErr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConn(t, connOpts{spec: sim.RailSpec{Config: sim.Config{EndlessRetry7: tc.endless}, Hosts: 2, HCAsPerHost: 1},
				retry: tc.retry, timeout: 8})
			must(t, c.f.SetLink(c.b.hca.Port(1), false))
			c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
			c.run(time.Second) // about 1000 timeouts of 1 ms
			if st := statuses(c.a.poll(t)); !slices.Equal(st, tc.want) {
				t.Fatalf("completions %v, want %v", st, tc.want)
			}
			if tc.want != nil {
				return
			}
			if n := c.f.Stats().RetryTimeouts; n < 500 {
				t.Fatalf("%d retransmission timeouts in 1 s of 1 ms timeouts, want hundreds", n)
			}
			must(t, c.f.SetLink(c.b.hca.Port(1), true))
			c.run(100 * time.Millisecond)
			if st := statuses(c.a.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCSuccess}) {
				t.Fatalf("after the link came back: completions %v, want [SUCCESS]", st)
			}
		})
	}
}

// TestAckThenDieBeforeCQE: the responder executes a SEND and acknowledges
// it, then its HCA dies before the receive's CQE reaches memory. The
// requester's WR succeeded; the responder's application never learns of
// the receive. Without the CQE delay the receive completes.
func TestAckThenDieBeforeCQE(t *testing.T) {
	for _, delay := range []time.Duration{0, 50 * time.Microsecond} {
		c := newConn(t, connOpts{})
		must(t, c.f.SetCQEDelay(c.b.hca, delay))
		c.b.recv(t, 7, 0, 64)
		c.a.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{c.a.sge(0, 8)}})
		c.run(10 * time.Microsecond) // executed and acknowledged
		if st := statuses(c.a.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCSuccess}) {
			t.Fatalf("delay %v: requester completions %v, want the SEND's success", delay, st)
		}
		must(t, c.f.KillHCA(c.b.hca))
		c.run(time.Millisecond)
		got := c.b.poll(t)
		if delay == 0 && (len(got) != 1 || got[0].WRID != 7 || got[0].Status != verbs.WCSuccess) {
			t.Fatalf("no CQE delay: responder completions %+v, want receive 7", got)
		}
		if delay > 0 && len(got) != 0 {
			t.Fatalf("CQE delay %v: responder completions %+v, want none (the HCA died first)", delay, got)
		}
	}
}

// TestDelayReordersAndPSNRecovers: with a random extra latency on a port,
// requests arrive out of order; the responder's PSN check (sequence NAK,
// duplicate) delivers every WRITE once and in order, and every WR
// completes successfully, in order.
func TestDelayReordersAndPSNRecovers(t *testing.T) {
	c := newConn(t, connOpts{})
	must(t, c.f.SetDelay(c.a.hca.Port(1), 20*time.Microsecond))
	naks := 0
	c.f.SetTracer(func(r sim.TraceRecord) {
		if r.Kind == "tx" && strings.HasPrefix(r.Detail, "NAK") {
			naks++
		}
	})
	for i := 0; i < 200; i++ {
		off := i * 64 % 30000
		for j := range 64 {
			c.a.buf[off+j] = byte(i + j)
		}
		c.a.post(t, write(uint64(i), c.a.sge(off, 64), c.b.mr.Addr()+uint64(off), c.b.mr.RKey()))
		c.run(time.Microsecond)
	}
	c.run(100 * time.Millisecond)
	wcs := c.a.poll(t)
	if len(wcs) != 200 {
		t.Fatalf("%d completions, want 200", len(wcs))
	}
	for i, w := range wcs {
		if w.WRID != uint64(i) || w.Status != verbs.WCSuccess {
			t.Fatalf("completion %d = %+v, want wr_id %d success", i, w, i)
		}
	}
	for i := 0; i < 200; i++ {
		off := i * 64 % 30000
		if !slices.Equal(c.a.buf[off:off+64], c.b.buf[off:off+64]) {
			t.Fatalf("WRITE %d did not land", i)
		}
	}
	if naks == 0 {
		t.Fatal("no sequence NAK: the delay did not reorder anything")
	}
}

// TestHoldRequestDeliversStaleCopy: a held request reaches its responder
// only at the time given, with the payload it was sent with; meanwhile
// the requester retransmits it at its local ACK timeout, as for a lost
// packet, and goes on. Arriving while the same incarnation of the QP pair
// runs, the held copy is a duplicate and executes nothing; arriving after
// both QPs were reset and connected again, a new incarnation takes or
// rejects it by its PSN alone: from the same PSN it executes (a stale
// write over newer data), from another it does not.
func TestHoldRequestDeliversStaleCopy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reset    bool
		psn      uint32 // of the new incarnation
		executes bool
	}{
		{"same incarnation", false, 0, false},
		{"reset, same PSN", true, 100, true},
		{"reset, other PSN", true, 0x654321, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConn(t, connOpts{}) // PSNs from 100, local ACK timeout 4.2 ms
			until := c.f.Now() + 20*time.Millisecond
			must(t, c.f.HoldRequest(c.a.qp, 100, until))
			fill(c.a.buf[:8], 1)
			c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
			c.run(time.Millisecond)
			if len(c.a.poll(t)) != 0 || c.b.buf[0] != 0 {
				t.Fatal("the held request arrived before its time")
			}
			c.run(9 * time.Millisecond) // the retransmission
			if wcs := c.a.poll(t); len(wcs) != 1 || wcs[0].Status != verbs.WCSuccess {
				t.Fatalf("after the local ACK timeout: %+v, want the retransmission's success", wcs)
			}
			fill(c.a.buf[:8], 2)
			c.a.post(t, write(2, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
			c.run(time.Millisecond)
			if len(c.a.poll(t)) != 1 || c.b.buf[0] != 2 {
				t.Fatal("the second write did not land")
			}
			if tc.reset {
				for _, e := range []*end{c.a, c.b} {
					must(t, e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState))
				}
				o := defaults(connOpts{psn: tc.psn})
				connectRC(t, c.a, c.b, o)
				connectRC(t, c.b, c.a, o)
			}
			c.run(until - c.f.Now() + time.Millisecond)
			want := byte(2)
			if tc.executes {
				want = 1
			}
			if c.b.buf[0] != want {
				t.Fatalf("after the held copy arrived the responder holds %d, want %d", c.b.buf[0], want)
			}
			// The fabric records the stale execution, and only that one.
			st, stale := c.f.Stats(), c.f.StaleExecutions()
			if tc.executes {
				if st.StaleExecuted != 1 || st.StaleEffective != 1 || len(stale) != 1 || stale[0].PSN != 100 ||
					stale[0].Op != verbs.WRRDMAWrite || stale[0].Length != 8 || stale[0].Resets != 1 || !stale[0].Effected {
					t.Fatalf("stale executions: stats %d/%d, %v; want the held WRITE, effective", st.StaleExecuted, st.StaleEffective, stale)
				}
			} else if st.StaleExecuted != 0 || len(stale) != 0 {
				t.Fatalf("stale executions %d (%v), want none", st.StaleExecuted, stale)
			}
			if w := c.a.poll(t); len(w) != 0 {
				t.Fatalf("the held copy's answer completed something at the requester: %+v", w)
			}
		})
	}
}

// TestStaleZeroLengthWriteHasNoEffect: a zero-length RDMA WRITE held
// across a reset of both QPs and taken by the new incarnation at its PSN
// executes (the responder's expected PSN moves on) but touches nothing:
// the fabric records it as stale, not effective, and as crossed (the
// responder was reset too). A SEND held the same way consumes a receive
// of the new incarnation: effective.
func TestStaleZeroLengthWriteHasNoEffect(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wr        func(c *conn) verbs.SendWR
		effective bool
	}{
		{"zero-length WRITE", func(c *conn) verbs.SendWR {
			return verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled}
		}, false},
		{"SEND", func(c *conn) verbs.SendWR {
			return verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{c.a.sge(0, 8)}}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConn(t, connOpts{}) // PSNs from 100
			c.b.recv(t, 7, 0, 64)
			until := c.f.Now() + 20*time.Millisecond
			must(t, c.f.HoldRequest(c.a.qp, 100, until))
			c.a.post(t, tc.wr(c))
			c.run(10 * time.Millisecond) // the retransmission completes it
			if wcs := c.a.poll(t); len(wcs) != 1 || wcs[0].Status != verbs.WCSuccess {
				t.Fatalf("requester: %+v, want one success", wcs)
			}
			c.b.poll(t)
			for _, e := range []*end{c.a, c.b} {
				must(t, e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState))
			}
			o := defaults(connOpts{psn: 100})
			connectRC(t, c.a, c.b, o)
			connectRC(t, c.b, c.a, o)
			c.b.recv(t, 8, 0, 64)
			c.run(until - c.f.Now() + time.Millisecond)
			st, stale := c.f.Stats(), c.f.StaleExecutions()
			if st.StaleExecuted != 1 || len(stale) != 1 || stale[0].Effected != tc.effective {
				t.Fatalf("stale executions %v (stats %d/%d), want one, effective %v", stale, st.StaleExecuted, st.StaleEffective, tc.effective)
			}
			if !stale[0].Crossed || st.StaleCrossed != 1 {
				t.Fatalf("stale execution %v (StaleCrossed %d): both QPs were reset since it was sent, want it crossed", stale[0], st.StaleCrossed)
			}
			if want := map[bool]uint64{true: 1}[tc.effective]; st.StaleEffective != want {
				t.Fatalf("StaleEffective %d, want %d", st.StaleEffective, want)
			}
			if got := len(c.b.poll(t)); got != int(st.StaleEffective) {
				t.Fatalf("the responder completed %d receives, want %d", got, st.StaleEffective)
			}
		})
	}
}

// TestProcessTeardown: the process holding one end exits (its context
// torn down, as the kernel's uverbs cleanup does): its QP is destroyed
// with what it holds, no completion made, and the peer's requests go
// unanswered until its requester gives up with RETRY_EXC_ERR.
func TestProcessTeardown(t *testing.T) {
	c := newConn(t, connOpts{})
	c.b.recv(t, 1, 0, 8)
	c.b.post(t, write(2, c.b.sge(0, 8), c.a.mr.Addr(), c.a.mr.RKey()))
	c.b.ctx.(*sim.Context).Teardown()
	if _, _, err := c.b.qp.Query(verbs.QPAttrState); err == nil {
		t.Fatal("a torn-down context's QP answers ibv_query_qp")
	}
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(time.Second)
	if st := statuses(c.a.poll(t)); !slices.Equal(st, []verbs.WCStatus{verbs.WCRetryExcErr}) {
		t.Fatalf("the peer's completions %v, want [RETRY_EXC_ERR]", st)
	}
	if got := c.b.poll(t); len(got) != 0 {
		t.Fatalf("the torn-down end completed %+v", got)
	}
	c.b.ctx.(*sim.Context).Teardown() // a second teardown is harmless
}

// TestStaleNotCrossed: a zero-length WRITE held in the fabric while its
// requester's retransmissions are lost (its link down) until the QP fails
// and is reset, and reconnected at the same PSN. The held copy executes at
// the responder, whose incarnation ran beside the requester's that sent
// it: stale (its requester was reset), not crossed. So with the
// responder never reset, and with the responder reset and connected again
// while the requester's incarnation still ran (as at a handshake, before
// the requester's own reset).
func TestStaleNotCrossed(t *testing.T) {
	for _, respReset := range []bool{false, true} {
		t.Run(fmt.Sprintf("responder reset %v", respReset), func(t *testing.T) {
			c := newConn(t, connOpts{retry: 1})
			until := c.f.Now() + 40*time.Millisecond
			must(t, c.f.HoldRequest(c.a.qp, 100, until))
			c.a.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled})
			c.run(10 * time.Microsecond)
			must(t, c.f.SetLink(c.a.hca.Port(1), false))
			if respReset {
				c.run(time.Millisecond)
				must(t, c.b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState))
				connectRC(t, c.b, c.a, defaults(connOpts{}))
			}
			c.run(30 * time.Millisecond)
			if wcs := c.a.poll(t); len(wcs) != 1 || wcs[0].Status != verbs.WCRetryExcErr {
				t.Fatalf("requester: %+v, want RETRY_EXC_ERR", wcs)
			}
			must(t, c.f.SetLink(c.a.hca.Port(1), true))
			c.run(5 * time.Millisecond) // the port ACTIVE again
			must(t, c.a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState))
			connectRC(t, c.a, c.b, defaults(connOpts{}))
			c.run(until - c.f.Now() + time.Millisecond)
			st, stale := c.f.Stats(), c.f.StaleExecutions()
			if st.StaleExecuted != 1 || len(stale) != 1 || stale[0].Crossed || st.StaleCrossed != 0 {
				t.Fatalf("stale executions %v (stats %d, crossed %d), want the held WRITE, not crossed", stale, st.StaleExecuted, st.StaleCrossed)
			}
		})
	}
}
