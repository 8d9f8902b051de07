package sim_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// An implicit on-demand-paging region covers all of the host's memory:
// a WRITE, a SEND and a READ through the keys of two such regions reach
// buffers no MR names, an address where the host has no memory fails
// the access (REM_ACCESS_ERR), and a device without implicit ODP, or a
// registration without IBV_ACCESS_ON_DEMAND, is refused with EINVAL
// (rule 104).
func TestImplicitODP(t *testing.T) {
	c := newConn(t, connOpts{})
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessOnDemand
	reg := func(e *end) verbs.MR {
		mr, err := e.pd.(verbs.ImplicitODPRegistrar).RegImplicitODP(access)
		must(t, err)
		if mr.Addr() != 0 || mr.Len() != verbs.ImplicitLen || !verbs.IsImplicitODP(mr) {
			t.Fatalf("implicit MR at %#x+%d", mr.Addr(), mr.Len())
		}
		return mr
	}
	am, bm := reg(c.a), reg(c.b)
	src, dst, back := make([]byte, 64), make([]byte, 64), make([]byte, 64)
	for i := range src {
		src[i] = byte(i + 1)
	}
	addr := func(h *sim.Host, b []byte) uint64 {
		a, err := h.Addr(b)
		must(t, err)
		return a
	}
	sa, da, ba := addr(c.a.host, src), addr(c.b.host, dst), addr(c.a.host, back)
	sge := func(a uint64, mr verbs.MR) verbs.SGE { return verbs.SGE{Addr: a, Length: 64, LKey: mr.LKey()} }
	c.a.post(t, write(1, sge(sa, am), da, bm.RKey()))
	c.run(100 * time.Microsecond)
	if s := statuses(c.a.poll(t)); !slices.Equal(s, []verbs.WCStatus{verbs.WCSuccess}) || !bytes.Equal(dst, src) {
		t.Fatalf("WRITE through implicit keys: %v, data %v", s, dst[:8])
	}
	c.a.post(t, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{sge(ba, am)}, RemoteAddr: da, RKey: bm.RKey()})
	c.run(100 * time.Microsecond)
	if s := statuses(c.a.poll(t)); !slices.Equal(s, []verbs.WCStatus{verbs.WCSuccess}) || !bytes.Equal(back, src) {
		t.Fatalf("READ through implicit keys: %v, data %v", s, back[:8])
	}
	clear(dst)
	_, err := c.b.qp.PostRecv([]verbs.RecvWR{{WRID: 3, SGList: []verbs.SGE{sge(da, bm)}}})
	must(t, err)
	c.a.post(t, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{sge(sa, am)}})
	c.run(100 * time.Microsecond)
	if s := statuses(c.b.poll(t)); !slices.Equal(s, []verbs.WCStatus{verbs.WCSuccess}) || !bytes.Equal(dst, src) {
		t.Fatalf("SEND into a receive through an implicit key: %v, data %v", s, dst[:8])
	}
	c.a.poll(t)
	// no memory there: the page fault fails the access
	c.a.post(t, write(5, sge(sa, am), da+1<<40, bm.RKey()))
	c.run(100 * time.Microsecond)
	if s := statuses(c.a.poll(t)); !slices.Equal(s, []verbs.WCStatus{verbs.WCRemAccessErr}) {
		t.Fatalf("WRITE to unmapped memory: %v, want REM_ACCESS_ERR", s)
	}

	if _, err := c.a.pd.(verbs.ImplicitODPRegistrar).RegImplicitODP(access &^ verbs.AccessOnDemand); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("implicit registration without ON_DEMAND: %v, want EINVAL", err)
	}
	n := newConn(t, connOpts{spec: sim.RailSpec{Hosts: 2, HCAsPerHost: 1, NoImplicitODP: true}})
	if _, err := n.a.pd.(verbs.ImplicitODPRegistrar).RegImplicitODP(access); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("a device without implicit ODP: %v, want EINVAL", err)
	}
}
