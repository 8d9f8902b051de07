package sim_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func TestWriteLandsInRemoteMemory(t *testing.T) {
	c := newConn(t, connOpts{})
	fill(c.a.buf[:5000], 3)
	c.a.post(t, write(1, c.a.sge(0, 5000), c.b.mr.Addr()+100, c.b.mr.RKey()))
	c.run(time.Millisecond)
	wcs := c.a.poll(t)
	if len(wcs) != 1 || wcs[0].Status != verbs.WCSuccess || wcs[0].Opcode != verbs.WCRDMAWrite || wcs[0].WRID != 1 {
		t.Fatalf("completions = %+v", wcs)
	}
	if !bytes.Equal(c.b.buf[100:5100], c.a.buf[:5000]) {
		t.Fatal("remote memory does not hold the written bytes")
	}
	if got := c.b.poll(t); len(got) != 0 {
		t.Fatalf("plain WRITE produced responder completions: %+v", got)
	}
}

func TestWriteGathersSeveralSGEs(t *testing.T) {
	c := newConn(t, connOpts{})
	fill(c.a.buf, 9)
	wr := verbs.SendWR{WRID: 7, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList:     []verbs.SGE{c.a.sge(0, 10), c.a.sge(1000, 20), c.a.sge(3000, 5)},
		RemoteAddr: c.b.mr.Addr(), RKey: c.b.mr.RKey()}
	c.a.post(t, wr)
	c.run(time.Millisecond)
	want := append(append(append([]byte{}, c.a.buf[0:10]...), c.a.buf[1000:1020]...), c.a.buf[3000:3005]...)
	if !bytes.Equal(c.b.buf[:35], want) {
		t.Fatalf("gathered bytes wrong: %v", c.b.buf[:35])
	}
}

func TestWriteWithImmConsumesReceive(t *testing.T) {
	c := newConn(t, connOpts{})
	fill(c.a.buf[:64], 1)
	c.b.recv(t, 55, 0, 0)
	c.a.post(t, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: 0xabcd,
		SGList: []verbs.SGE{c.a.sge(0, 64)}, RemoteAddr: c.b.mr.Addr() + 512, RKey: c.b.mr.RKey()})
	c.run(time.Millisecond)
	rw := c.b.poll(t)
	if len(rw) != 1 || rw[0].Opcode != verbs.WCRecvRDMAWithImm || rw[0].ImmData != 0xabcd ||
		rw[0].WCFlags&verbs.WCFlagWithImm == 0 || rw[0].ByteLen != 64 || rw[0].WRID != 55 || rw[0].SrcQP != c.a.qp.QPN() {
		t.Fatalf("receive completion = %+v", rw)
	}
	if !bytes.Equal(c.b.buf[512:576], c.a.buf[:64]) {
		t.Fatal("data of WRITE_WITH_IMM missing")
	}
	if sw := c.a.poll(t); len(sw) != 1 || sw[0].Status != verbs.WCSuccess {
		t.Fatalf("send completion = %+v", sw)
	}
}

func TestSendScattersIntoReceiveSGEs(t *testing.T) {
	c := newConn(t, connOpts{})
	fill(c.a.buf[:300], 5)
	if _, err := c.b.qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: []verbs.SGE{c.b.sge(0, 100), c.b.sge(4096, 300)}}}); err != nil {
		t.Fatal(err)
	}
	c.a.post(t, verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, ImmData: 77,
		SGList: []verbs.SGE{c.a.sge(0, 300)}})
	c.run(time.Millisecond)
	rw := c.b.poll(t)
	if len(rw) != 1 || rw[0].Opcode != verbs.WCRecv || rw[0].ByteLen != 300 || rw[0].ImmData != 77 || rw[0].WRID != 9 {
		t.Fatalf("receive completion = %+v", rw)
	}
	if !bytes.Equal(c.b.buf[:100], c.a.buf[:100]) || !bytes.Equal(c.b.buf[4096:4296], c.a.buf[100:300]) {
		t.Fatal("SEND payload not scattered across the receive SGEs")
	}
}

func TestInlineSendCopiesAtPostTime(t *testing.T) {
	c := newConn(t, connOpts{})
	copy(c.a.buf, "inline!")
	c.b.recv(t, 1, 0, 64)
	// Inline data may use any key; it is copied when posted.
	c.a.post(t, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{{Addr: c.a.mr.Addr(), Length: 7, LKey: 0xdead}}})
	copy(c.a.buf, "changed")
	c.run(time.Millisecond)
	if string(c.b.buf[:7]) != "inline!" {
		t.Fatalf("responder got %q, want the bytes at post time", c.b.buf[:7])
	}
	_, err := c.a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SendFlags: verbs.SendInline,
		SGList: []verbs.SGE{c.a.sge(0, 65)}}})
	if verbs.ErrnoOf(err) != verbs.EINVAL {
		t.Fatalf("inline above max_inline_data: err = %v, want EINVAL", err)
	}
}

func TestReadFetchesRemoteMemory(t *testing.T) {
	c := newConn(t, connOpts{})
	fill(c.b.buf[2000:6000], 11)
	c.a.post(t, verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{c.a.sge(0, 4000)}, RemoteAddr: c.b.mr.Addr() + 2000, RKey: c.b.mr.RKey()})
	c.run(time.Millisecond)
	wcs := c.a.poll(t)
	if len(wcs) != 1 || wcs[0].Opcode != verbs.WCRDMARead || wcs[0].ByteLen != 4000 || wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("completion = %+v", wcs)
	}
	if !bytes.Equal(c.a.buf[:4000], c.b.buf[2000:6000]) {
		t.Fatal("READ did not bring the remote bytes")
	}
}

func TestAtomicsExecuteOnTarget(t *testing.T) {
	c := newConn(t, connOpts{})
	binary.LittleEndian.PutUint64(c.b.buf[64:], 40)
	c.a.post(t,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicFetchAdd, SendFlags: verbs.SendSignaled, CompareAdd: 2,
			SGList: []verbs.SGE{c.a.sge(0, 8)}, RemoteAddr: c.b.mr.Addr() + 64, RKey: c.b.mr.RKey()},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled, CompareAdd: 42, Swap: 1000,
			SGList: []verbs.SGE{c.a.sge(8, 8)}, RemoteAddr: c.b.mr.Addr() + 64, RKey: c.b.mr.RKey()},
		verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled, CompareAdd: 42, Swap: 7,
			SGList: []verbs.SGE{c.a.sge(16, 8)}, RemoteAddr: c.b.mr.Addr() + 64, RKey: c.b.mr.RKey()})
	c.run(time.Millisecond)
	wcs := c.a.poll(t)
	if len(wcs) != 3 || wcs[0].Opcode != verbs.WCFetchAdd || wcs[1].Opcode != verbs.WCCompSwap {
		t.Fatalf("completions = %+v", wcs)
	}
	le := binary.LittleEndian
	if got := []uint64{le.Uint64(c.a.buf[0:]), le.Uint64(c.a.buf[8:]), le.Uint64(c.a.buf[16:]), le.Uint64(c.b.buf[64:])}; got[0] != 40 || got[1] != 42 || got[2] != 1000 || got[3] != 1000 {
		t.Fatalf("originals and target = %v, want [40 42 1000 1000]", got)
	}
}

func TestUnsignaledCompletesSilentlyAndSigAllSignalsEverything(t *testing.T) {
	c := newConn(t, connOpts{})
	wr := write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey())
	wr.SendFlags = 0
	sig := write(2, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey())
	c.a.post(t, wr, wr, sig)
	c.run(time.Millisecond)
	if wcs := c.a.poll(t); len(wcs) != 1 || wcs[0].WRID != 2 {
		t.Fatalf("completions = %+v, want only the signaled WR", wcs)
	}
	if s, _ := c.a.qp.(interface{ Outstanding() (int, int) }).Outstanding(); s != 0 {
		t.Fatalf("%d send WRs still outstanding", s)
	}

	c2 := newConn(t, connOpts{sigAll: true})
	c2.a.post(t, wr, wr)
	c2.run(time.Millisecond)
	if wcs := c2.a.poll(t); len(wcs) != 2 {
		t.Fatalf("sq_sig_all: %d completions, want 2", len(wcs))
	}
}

func TestMultiPacketMessagesAdvancePSNPerMTU(t *testing.T) {
	c := newConn(t, connOpts{})
	// 5000 bytes at MTU 1024 span 5 PSNs: the WR after it starts at 105.
	c.a.post(t, write(1, c.a.sge(0, 5000), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(time.Millisecond)
	must(t, c.f.DropRequest(c.a.qp, 105))
	c.a.post(t, write(2, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(time.Millisecond)
	if len(c.a.poll(t)) != 1 {
		t.Fatal("first write did not complete")
	}
	if st := c.f.Stats(); st.Dropped != 1 {
		t.Fatalf("dropped = %d: the rule for PSN 105 did not hit the second WR", st.Dropped)
	}
	c.run(50 * time.Millisecond)
	if wcs := c.a.poll(t); len(wcs) != 1 || wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("retransmitted WR: %+v", wcs)
	}
}
