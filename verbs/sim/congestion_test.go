package sim_test

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// congestRun is the traffic of the congestion tests: n messages from a to
// b on a fabric of link layer ll and seed seed, WRITEs of 256 bytes (one
// packet at MTU 1024) or, every fifth, of 2048 (two packets), and every
// fourth a SEND; marks[0] and marks[1] are the congestion of a's and b's
// ports. It checks that every message arrives intact and returns the run.
type congestResult struct {
	ca, cb  map[string]uint64 // a's and b's port counters
	pkts    uint64            // request packets a's messages make
	wcs     []verbs.WC        // a's completions, then b's
	times   []time.Duration   // when each was polled
	traffic []string          // the trace, but for the marks
	marks   int               // trace records of marks
	stats   sim.Stats
}

func congestRun(t *testing.T, ll verbs.LinkLayer, seed uint64, n int, marks [2]float64) congestResult {
	t.Helper()
	const recvBase = 1 << 18 // past the WRITEs of up to 128 messages
	if n > 128 {
		t.Fatalf("%d messages: at most 128", n)
	}
	c := newConn(t, connOpts{spec: sim.RailSpec{Config: sim.Config{Seed: seed}, Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 1, LinkLayer: ll},
		bufSize: 1 << 19})
	var r congestResult
	c.f.SetTracer(func(rec sim.TraceRecord) {
		if rec.Kind == "mark" {
			r.marks++
			return
		}
		r.traffic = append(r.traffic, rec.String())
	})
	must(t, c.f.SetCongestion(c.a.hca.Port(1), marks[0]))
	must(t, c.f.SetCongestion(c.b.hca.Port(1), marks[1]))
	size := func(i int) int {
		if i%5 == 0 {
			return 2048
		}
		return 256
	}
	sends := 0
	for i := range n {
		off, sz := i*2048, size(i)
		fill(c.a.buf[off:off+sz], byte(i*5+1))
		op := verbs.WRRDMAWrite
		if i%4 == 3 {
			op = verbs.WRSend
			c.b.recv(t, uint64(sends), recvBase+sends*2048, 2048)
			sends++
		}
		c.a.post(t, verbs.SendWR{WRID: uint64(i), Opcode: op, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{c.a.sge(off, sz)}, RemoteAddr: c.b.mr.Addr() + uint64(off), RKey: c.b.mr.RKey()})
		r.pkts += uint64((sz + 1023) / 1024)
		c.run(3 * time.Microsecond)
	}
	var wa, wb []verbs.WC
	for c.f.Now() < 100*time.Millisecond && (len(wa) < n || len(wb) < sends) {
		c.run(10 * time.Microsecond)
		for _, e := range []*end{c.a, c.b} {
			w := e.poll(t)
			for range w {
				r.times = append(r.times, c.f.Now())
			}
			if e == c.a {
				wa = append(wa, w...)
			} else {
				wb = append(wb, w...)
			}
		}
	}
	if len(wa) != n || len(wb) != sends {
		t.Fatalf("marks %v: %d send and %d receive completions, want %d and %d", marks, len(wa), len(wb), n, sends)
	}
	for i, w := range wa {
		if w.Status != verbs.WCSuccess || w.WRID != uint64(i) {
			t.Fatalf("marks %v: completion %d: %+v", marks, i, w)
		}
	}
	k := 0
	for i := range n {
		off, sz := i*2048, size(i)
		dst := c.b.buf[off : off+sz]
		if i%4 == 3 {
			w := wb[k]
			if w.Status != verbs.WCSuccess || w.WRID != uint64(k) || w.ByteLen != uint32(sz) {
				t.Fatalf("marks %v: receive completion %d: %+v", marks, k, w)
			}
			dst = c.b.buf[recvBase+k*2048 : recvBase+k*2048+sz]
			k++
		}
		if !bytes.Equal(dst, c.a.buf[off:off+sz]) {
			t.Fatalf("marks %v: message %d did not land intact", marks, i)
		}
	}
	r.wcs = append(wa, wb...)
	read := func(e *end) map[string]uint64 {
		t.Helper()
		m, err := e.ctx.(verbs.PortCounterReader).PortCounters(1)
		must(t, err)
		return m
	}
	r.ca, r.cb = read(c.a), read(c.b)
	r.stats = c.f.Stats()
	if r.ca["port_xmit_packets"] != r.pkts || r.stats.Dropped != 0 || r.stats.Retransmits != 0 {
		t.Fatalf("marks %v: a sent %d packets (stats %+v), want %d and no loss", marks, r.ca["port_xmit_packets"], r.stats, r.pkts)
	}
	return r
}

// sameTraffic fails unless two runs moved the same packets at the same
// virtual times and completed the same WRs at the same times.
func sameTraffic(t *testing.T, x, y congestResult) {
	t.Helper()
	if fmt.Sprint(x.wcs) != fmt.Sprint(y.wcs) || fmt.Sprint(x.times) != fmt.Sprint(y.times) {
		t.Fatalf("completions differ with marking:\n%v at %v\n%v at %v", x.wcs, x.times, y.wcs, y.times)
	}
	if strings.Join(x.traffic, "\n") != strings.Join(y.traffic, "\n") || x.stats != y.stats {
		t.Fatalf("traffic differs with marking (%d and %d trace records, stats %+v and %+v)", len(x.traffic), len(y.traffic), x.stats, y.stats)
	}
}

// unmarkedAndMarked runs seed's traffic twice, unmarked and with b's
// port congested (mark 1), and checks that the traffic is the same.
func unmarkedAndMarked(t *testing.T, ll verbs.LinkLayer, seed uint64, n int) (off, on congestResult) {
	t.Helper()
	off = congestRun(t, ll, seed, n, [2]float64{0, 0})
	on = congestRun(t, ll, seed, n, [2]float64{0, 1})
	sameTraffic(t, off, on)
	return off, on
}

// TestCongestionRoCEMarksAndCNPs: RoCE, b's port congested with mark 1.
// Every packet a sends b arrives marked: b counts each as an ECN-marked
// packet and a CNP sent, a each CNP handled; nothing else counts, and the
// traffic is exactly that of the same seed unmarked, where nothing
// counts. Both ports congested: the ACKs b sends a are marked too.
func TestCongestionRoCEMarksAndCNPs(t *testing.T) {
	const n = 60
	ll := verbs.LinkLayerEthernet
	off, on := unmarkedAndMarked(t, ll, 3, n)
	for _, name := range []string{"np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled"} {
		if v, ok := off.ca[name]; !ok || v != 0 || off.cb[name] != 0 {
			t.Fatalf("unmarked: %s a %d (present %v), b %d; want 0 on both", name, v, ok, off.cb[name])
		}
	}
	if _, ok := on.cb["port_xmit_wait"]; ok {
		t.Fatalf("RoCE port has port_xmit_wait: %+v", on.cb)
	}
	p := on.pkts
	if on.cb["np_ecn_marked_roce_packets"] != p || on.cb["np_cnp_sent"] != p || on.ca["rp_cnp_handled"] != p {
		t.Fatalf("b congested: b marked %d, CNPs sent %d, a CNPs handled %d; want %d each (the packets b received)",
			on.cb["np_ecn_marked_roce_packets"], on.cb["np_cnp_sent"], on.ca["rp_cnp_handled"], p)
	}
	if on.ca["np_ecn_marked_roce_packets"]+on.ca["np_cnp_sent"]+on.cb["rp_cnp_handled"] != 0 {
		t.Fatalf("a's port is not congested, yet a %+v, b %+v", on.ca, on.cb)
	}
	if on.marks != n {
		t.Fatalf("%d marks traced, want one per message (%d)", on.marks, n)
	}

	both := congestRun(t, ll, 3, n, [2]float64{1, 1})
	sameTraffic(t, off, both)
	acks := both.cb["port_xmit_packets"]
	if acks == 0 || both.ca["np_ecn_marked_roce_packets"] != acks || both.ca["np_cnp_sent"] != acks || both.cb["rp_cnp_handled"] != acks {
		t.Fatalf("a congested: a marked %d, CNPs sent %d, b CNPs handled %d; want the %d responses b sent",
			both.ca["np_ecn_marked_roce_packets"], both.ca["np_cnp_sent"], both.cb["rp_cnp_handled"], acks)
	}
	if both.cb["np_ecn_marked_roce_packets"] != p || both.ca["rp_cnp_handled"] != p {
		t.Fatalf("b congested: b marked %d, a handled %d; want %d", both.cb["np_ecn_marked_roce_packets"], both.ca["rp_cnp_handled"], p)
	}
}

// TestCongestionPartialMarkDeterministic: a mark of 0.5 marks some of the
// packets, not all, and the same seed marks the same ones again.
func TestCongestionPartialMarkDeterministic(t *testing.T) {
	const n = 100
	ll := verbs.LinkLayerEthernet
	x := congestRun(t, ll, 11, n, [2]float64{0, 0.5})
	y := congestRun(t, ll, 11, n, [2]float64{0, 0.5})
	m := x.cb["np_ecn_marked_roce_packets"]
	if m == 0 || m >= x.pkts || x.cb["np_cnp_sent"] != m || x.ca["rp_cnp_handled"] != m {
		t.Fatalf("mark 0.5: b marked %d of %d packets, CNPs sent %d, handled %d; want some, not all, and equal",
			m, x.pkts, x.cb["np_cnp_sent"], x.ca["rp_cnp_handled"])
	}
	if fmt.Sprint(x.ca, x.cb) != fmt.Sprint(y.ca, y.cb) || x.marks != y.marks {
		t.Fatalf("same seed, different counts:\n%v %v\n%v %v", x.ca, x.cb, y.ca, y.cb)
	}
	sameTraffic(t, x, y)
}

// TestCongestionIBXmitWait: InfiniBand has no ECN. b's port congested:
// a, the sender, waits for credits, xmitWaitTicks (1) per packet it sent
// b; b waits for nothing; neither port has the ECN counters.
func TestCongestionIBXmitWait(t *testing.T) {
	const n = 40
	ll := verbs.LinkLayerInfiniBand
	off, on := unmarkedAndMarked(t, ll, 5, n)
	if v, ok := off.ca["port_xmit_wait"]; !ok || v != 0 {
		t.Fatalf("unmarked: a's port_xmit_wait %d (present %v), want 0", v, ok)
	}
	if on.ca["port_xmit_wait"] != on.pkts || on.cb["port_xmit_wait"] != 0 {
		t.Fatalf("b congested: port_xmit_wait a %d, b %d; want a %d (one tick per packet), b 0", on.ca["port_xmit_wait"], on.cb["port_xmit_wait"], on.pkts)
	}
	for _, name := range []string{"np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled"} {
		if _, ok := on.ca[name]; ok {
			t.Fatalf("IB port has %s: %+v", name, on.ca)
		}
		if _, ok := on.cb[name]; ok {
			t.Fatalf("IB port has %s: %+v", name, on.cb)
		}
	}
}

// TestSetCongestionErrors: a probability outside [0,1] is refused naming
// the port, and so is a nil port.
func TestSetCongestionErrors(t *testing.T) {
	c := newConn(t, connOpts{spec: sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 1}})
	p := c.b.hca.Port(1)
	for _, m := range []float64{-0.1, 1.5, math.NaN()} {
		err := c.f.SetCongestion(p, m)
		if err == nil || !strings.Contains(err.Error(), p.String()) {
			t.Fatalf("SetCongestion(%v, %v) = %v, want an error naming the port", p, m, err)
		}
	}
	if err := c.f.SetCongestion(nil, 0.5); err == nil {
		t.Fatal("SetCongestion(nil) succeeded")
	}
	must(t, c.f.SetCongestion(p, 0))
	must(t, c.f.SetCongestion(p, 1))
}
