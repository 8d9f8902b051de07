package sim_test

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// TestPortServesQPsInTurn: two QPs of one port with work at the same
// moment share the wire message by message (arbitrate.go). The second
// QP's single WRITE, posted behind the first QP's eight, leaves second and
// completes before the first QP's third; a port that sent each QP's
// backlog whole would complete it last.
func TestPortServesQPsInTurn(t *testing.T) {
	o := defaults(connOpts{})
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	var ends [2][2]*end
	for i := range ends {
		ends[i] = [2]*end{openEnd(t, f.Host("node0"), o), openEnd(t, f.Host("node1"), o)}
		connectRC(t, ends[i][0], ends[i][1], o)
		connectRC(t, ends[i][1], ends[i][0], o)
	}
	const size = 16 << 10
	a, b := ends[0], ends[1]
	for i := 0; i < 8; i++ {
		a[0].post(t, write(uint64(i), a[0].sge(0, size), a[1].mr.Addr()+uint64(i*size)%uint64(len(a[1].buf)-size), a[1].mr.RKey()))
	}
	b[0].post(t, write(100, b[0].sge(0, size), b[1].mr.Addr(), b[1].mr.RKey()))

	var order []uint64
	for start := f.Now(); len(order) < 9 && f.Now()-start < 10*time.Millisecond; {
		f.RunFor(100 * time.Nanosecond)
		for _, e := range []*end{a[0], b[0]} {
			for _, wc := range e.poll(t) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("wr %d: %v", wc.WRID, wc.Status)
				}
				order = append(order, wc.WRID)
			}
		}
	}
	if len(order) != 9 {
		t.Fatalf("%d of 9 WRs completed: %v", len(order), order)
	}
	at := -1
	for i, id := range order {
		if id == 100 {
			at = i
		}
	}
	if at < 0 || at > 2 {
		t.Fatalf("completion order %v: the second QP's WRITE completed at position %d, want among the first three", order, at)
	}
}
