package crossnic_test

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs/sim"
)

// noStaleEffect checks that no request of an earlier connection did
// anything at its responder: a packet sent before its QP was reset and
// taken after by its PSN alone (sim.StaleExecution). Resets after a
// handshake take fresh PSNs, so such a packet meets a PSN it does not
// carry; resets without one carry the streams on, and what a side sends
// on the default QP until its switch-back notification is acknowledged
// is zero-length WRITEs (probes), which execute without effect: either
// way nothing stale may write, read, or consume a receive
// (docs/CROSSNIC.md, "Reset PSNs"). It returns the stale executions,
// all without effect.
func noStaleEffect(f *sim.Fabric) (uint64, error) {
	st := f.Stats()
	if st.StaleEffective > 0 {
		return st.StaleExecuted, fmt.Errorf("%d stale requests executed with effect (of %d stale): %v",
			st.StaleEffective, st.StaleExecuted, f.StaleExecutions())
	}
	return st.StaleExecuted, nil
}
