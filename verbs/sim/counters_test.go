package sim_test

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// TestPortCounters: WRITEs from a to b over a port that loses 5 % of
// the requests and of the responses. The lossy port counts its lost
// packets as receive errors, a's requester its ACK timeouts and
// sequence NAKs there, and the packets it sent; b's port, which loses
// nothing, no errors, but its responder's out-of-order requests. Pulling a's cable counts a link down.
func TestPortCounters(t *testing.T) {
	c := newConn(t, connOpts{timeout: 8}) // 1 ms ACK timeout
	pa := c.a.hca.Port(1)
	must(t, c.f.SetLoss(pa, 0.05, 0.05))
	const n = 400
	for i := range n {
		c.a.post(t, write(uint64(i), c.a.sge(0, 256), c.b.mr.Addr(), c.b.mr.RKey()))
		c.run(20 * time.Microsecond)
	}
	if got, _ := c.pollFor(t, c.a, 0, 2*time.Second, 100*time.Microsecond); len(got) == 0 {
		t.Fatal("no completion")
	}
	read := func(e *end) map[string]uint64 {
		t.Helper()
		m, err := e.ctx.(verbs.PortCounterReader).PortCounters(1)
		must(t, err)
		return m
	}
	ca, cb := read(c.a), read(c.b)
	if ca["port_rcv_errors"] < 10 || cb["port_rcv_errors"] != 0 {
		t.Fatalf("receive errors: a %d, b %d; want a's lossy port to count some (5 %% of %d and their ACKs), b none", ca["port_rcv_errors"], cb["port_rcv_errors"], n)
	}
	if ca["local_ack_timeout_err"]+ca["packet_seq_err"] == 0 || cb["local_ack_timeout_err"]+cb["packet_seq_err"] != 0 {
		t.Fatalf("retransmissions: a %+v, b %+v; want a's only", ca, cb)
	}
	// b, the responder, got requests after a gap (and maybe again, after
	// a lost ACK)
	if cb["out_of_sequence"] == 0 || ca["out_of_sequence"]+ca["duplicate_request"] != 0 {
		t.Fatalf("sequence errors: a %+v, b %+v; want b's only", ca, cb)
	}
	if ca["port_xmit_packets"] < n || cb["port_xmit_packets"] == 0 {
		t.Fatalf("packets sent: a %d, b %d; want a at least %d, b its ACKs", ca["port_xmit_packets"], cb["port_xmit_packets"], n)
	}
	if ca["link_downed"] != 0 {
		t.Fatalf("link downed %d before any cut", ca["link_downed"])
	}
	must(t, c.f.SetLink(pa, false))
	if read(c.a)["link_downed"] != 1 {
		t.Fatalf("link downed %d after a cut, want 1", read(c.a)["link_downed"])
	}
}

// TestDuplicateRequestCounted: the ACK of a's one WRITE is lost; a
// retransmits it at its ACK timeout and b's responder, which executed
// it, counts a duplicate request.
func TestDuplicateRequestCounted(t *testing.T) {
	c := newConn(t, connOpts{timeout: 8})
	must(t, c.f.DropResponse(c.a.qp, 100))
	c.a.post(t, write(1, c.a.sge(0, 64), c.b.mr.Addr(), c.b.mr.RKey()))
	if got, _ := c.pollFor(t, c.a, 0, time.Second, 100*time.Microsecond); len(got) != 1 || got[0].Status != verbs.WCSuccess {
		t.Fatalf("completions %+v", got)
	}
	m, err := c.b.ctx.(verbs.PortCounterReader).PortCounters(1)
	must(t, err)
	if m["duplicate_request"] != 1 || m["out_of_sequence"] != 0 {
		t.Fatalf("b's counters %+v; want one duplicate request", m)
	}
}
