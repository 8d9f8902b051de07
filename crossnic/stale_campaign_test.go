package crossnic_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// noStaleEffect checks that no request of an earlier connection did
// anything at its responder: a packet sent before its QP was reset and
// taken after by its PSN alone (sim.StaleExecution). Resets after a
// handshake take fresh PSNs, so such a packet meets a PSN it does not
// carry; resets without one carry the streams on, and what a side sends
// on the default QP until its switch-back notification is acknowledged
// is zero-length WRITEs (probes), which execute without effect: either
// way nothing stale may write, read, or consume a receive. With
// mailboxes every reset without a handshake is paired, both ends taking
// fresh PSNs (none carries the streams on): no request executes at all
// at a responder that was reset since it was sent, its requester reset
// too (sim.Stats.StaleCrossed). (docs/CROSSNIC.md, "Reset PSNs".) It
// returns the stale executions, all without effect.
func noStaleEffect(w *world) (uint64, error) {
	f := w.f
	st := f.Stats()
	if st.StaleEffective > 0 {
		return st.StaleExecuted, fmt.Errorf("%d stale requests executed with effect (of %d stale): %v",
			st.StaleEffective, st.StaleExecuted, f.StaleExecutions())
	}
	if w.mailbox && st.StaleCrossed > 0 {
		return st.StaleExecuted, fmt.Errorf("%d requests executed after both their QP and the responder were reset since they were sent (of %d stale): %v",
			st.StaleCrossed, st.StaleExecuted, f.StaleExecutions())
	}
	return st.StaleExecuted, nil
}

// drawHold, at one flap's end in two, holds in the fabric the next
// request one QP of one node (default or backup) sends, for 1 to 25 ms: a
// packet stuck in a switch (IBA 9.7: packets outlive their QP's state).
// On the default QP that is the first probe or switch-back notification,
// sent after the QP was reset and connected with PSNs drawn then. The QP
// resends it at its local ACK timeout; the held copy arrives late, after
// a reset of the QP pair at times, where only its PSN decides what it
// does (noStaleEffect). It returns the draw's description.
func drawHold(t testing.TB, rng *rand.Rand, w *world) string {
	if rng.IntN(2) == 0 {
		return ""
	}
	i, onBak := rng.IntN(2), rng.IntN(2) == 0
	qp, leg := w.n[i].def.qp, "default"
	if onBak {
		qp, leg = w.n[i].bak.qp, "backup"
	}
	late := time.Duration(1000+rng.IntN(24000)) * time.Microsecond
	must(t, w.f.HoldNext(qp, w.f.Now()+late))
	return fmt.Sprintf(" (hold node%d's next %s request %v)", i, leg, late)
}
