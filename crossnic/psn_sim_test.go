package crossnic_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/verbs"
)

// TestStalePacketAfterReset: a request of the default QP's first
// incarnation, round 0's bulk WRITE (PSN 0 of the application's QP), is
// held in the fabric while the traffic goes on (the sender retransmits
// it) and the slot it wrote is written again by a later round. The default
// link fails, both sides fail over to the backup and reset their default
// QPs, and the held copy arrives at the peer's reset default QP while the
// link is still down. The reset QP expects the PSN its peer announced
// (drawn at random, from a seeded source here), not 0: the stale WRITE
// is a duplicate or out of sequence and executes nothing, where a reset
// to PSN 0 would write round 0's data over the later round's. After the repair
// both sides switch back, and every round arrives once, in order, with
// its data.
func TestStalePacketAfterReset(t *testing.T) {
	w := newWorld(t, 21)
	a, b := w.n[0], w.n[1]
	rng := rand.New(rand.NewPCG(21, 1))
	for _, n := range w.n {
		must(t, n.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond,
			PSN: func() uint32 { return rng.Uint32() }}))
	}
	until := w.f.Now() + 5*time.Millisecond
	must(t, w.f.HoldRequest(a.def.qp, 0, until))
	for w.sent[0] <= nslots {
		w.run(10*time.Microsecond, 0)
	}
	w.run(200 * time.Microsecond) // every round posted completes; none more
	last := (w.sent[0] - 1) / nslots * nslots
	slot0 := func() []byte { return b.buf[nslots*slot : (nslots+1)*slot] }
	if last == 0 || !bytes.Equal(slot0(), pattern(last)) {
		t.Fatalf("before the fault B's slot 0 does not hold round %d", last)
	}
	if w.f.Now() >= until-time.Millisecond {
		t.Fatalf("the traffic took until %v; the held copy arrives at %v", w.f.Now(), until)
	}
	port := a.hca.Port(1)
	must(t, w.f.SetLink(port, false))
	w.run(until - w.f.Now() - time.Microsecond) // the failover, the resets; nothing sent
	st, _, err := b.def.qp.Query(verbs.QPAttrState)
	must(t, err)
	if st.QPState != verbs.QPSRTS {
		t.Fatalf("B's default QP is %v when the held copy arrives, want reset and connected (RTS)", st.QPState)
	}
	w.run(time.Millisecond)
	if !bytes.Equal(slot0(), pattern(last)) {
		t.Fatalf("the held WRITE of round 0 executed on B's reset default QP: round %d's data overwritten", last)
	}
	must(t, w.f.SetLink(port, true))
	w.run(100*time.Millisecond, 0)
	if !w.home() {
		t.Fatalf("not home after the repair: %+v / %+v", a.conn.Stats(), b.conn.Stats())
	}
	w.run(20 * time.Millisecond)
	if err := w.delivered(0); err != nil {
		t.Fatal(err)
	}
	if st := a.conn.Stats(); st.SwitchBacks != 1 || st.BackupResets != 1 {
		t.Fatalf("A: %+v, want one switch back and one purge", st)
	}
}
