package crossnic_test

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// TestFillersFenceBeforePurge: in the world of TestSwitchNotifyLostAsked
// ("ack lost"), node1, which posts nothing of its own, owes node0 64
// fillers after the handshake through the mailbox, and the first of
// them is lost twice on the wire (the third try arrives, 12 ms on). The
// purge waits for the fence behind them, so node1's backup is purged only
// once node0's took them all: the two backups' streams agree (each one's
// send PSN is the other's receive PSN), and a third cable pull fails
// both over through the mailbox again, and they come home again, every
// message delivered once, in order. Purged at once, node1's backup had
// the fillers unanswered: its stream went on past them while node0's
// backup still expected the first, and node1's next record through the
// mailbox could not reach node0.
func TestFillersFenceBeforePurge(t *testing.T) {
	w := ackLostWith(t, func(w *world) {
		b := w.n[1]
		q, _, err := b.bak.qp.Query(verbs.QPAttrSQPSN)
		must(t, err)
		// node1's next requests on its backup: its acknowledgement
		// through the mailbox, then the fillers
		for range 3 {
			must(t, w.f.DropRequest(b.bak.qp, (q.SQPSN+1)&0xffffff))
		}
	})
	a, b := w.n[0], w.n[1]
	if st := b.conn.Stats(); st.MailboxHandshakes != 1 || st.Fillers == 0 || st.BackupResets < 2 {
		t.Fatalf("node1 did not send fillers and purge its backup after: the test no longer reaches its case (%s)", w.states())
	}
	w.run(20 * time.Millisecond)
	if !w.home() {
		t.Fatalf("not home: %s", w.states())
	}
	qa, _, err := a.bak.qp.Query(verbs.QPAttrSQPSN | verbs.QPAttrRQPSN)
	must(t, err)
	qb, _, err := b.bak.qp.Query(verbs.QPAttrSQPSN | verbs.QPAttrRQPSN)
	must(t, err)
	if qa.RQPSN != qb.SQPSN || qb.RQPSN != qa.SQPSN {
		t.Fatalf("the purged backups' streams are apart: node0 sends %d and expects %d, node1 sends %d and expects %d",
			qa.SQPSN, qa.RQPSN, qb.SQPSN, qb.RQPSN)
	}
	port := a.hca.Port(1)
	must(t, w.f.SetLink(port, false))
	w.run(5*time.Millisecond, 0)
	must(t, w.f.SetLink(port, true))
	w.run(100*time.Millisecond, 0)
	w.run(20 * time.Millisecond)
	for _, n := range w.n {
		if st := n.conn.Stats(); st.MailboxHandshakes != 2 {
			t.Fatalf("%s: %d handshakes through the mailbox, want the third pull's too (%s)", n.name, st.MailboxHandshakes, w.states())
		}
	}
	if err := w.delivered(0); err != nil {
		t.Fatalf("%v (%s)", err, w.states())
	}
	if !w.home() {
		t.Fatalf("not home after the third pull: %s", w.states())
	}
}
