package demo

import (
	"fmt"
	"strings"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// roceGIDIndex is the GID table entry of a RoCEv2 address on the
// simulated fabric (index 0 is the link-local GID).
const roceGIDIndex = 1

// LinkLayerNames are the names ParseLinkLayer accepts, default first.
var LinkLayerNames = []string{"ib", "roce"}

// ParseLinkLayer maps a name of LinkLayerNames to a link layer: "ib" is
// InfiniBand, "roce" Ethernet. Any other name is an error that lists the
// allowed ones.
func ParseLinkLayer(name string) (verbs.LinkLayer, error) {
	switch name {
	case "ib":
		return verbs.LinkLayerInfiniBand, nil
	case "roce":
		return verbs.LinkLayerEthernet, nil
	}
	return verbs.LinkLayerUnspecified, fmt.Errorf("unknown link layer %q: want ib or roce", name)
}

// roce: the run is the RoCE variant of the script. RoCE has no APM, so
// every QP is unsupported for layer 1: layer 2 is QP B's only protection,
// and what QP A meets reaches the application as plain verbs report it.
func (s *scenario) roce() bool { return s.opts.LinkLayer == verbs.LinkLayerEthernet }

// nicWord names the adapters in the timeline.
func (s *scenario) nicWord() string {
	if s.roce() {
		return "NIC"
	}
	return "HCA"
}

// recordConnected notes each QP's path_mig_state and alternate port right
// after the connect: on RoCE the manager's ModifyQP must have added
// neither an alternate path nor REARM.
func (s *scenario) recordConnected() error {
	for _, e := range s.eps {
		attr, _, err := e.qp.Query(verbs.QPAttrPathMigState | verbs.QPAttrAltPath)
		if err != nil {
			return fmt.Errorf("ibv_query_qp on %v: %w", e, err)
		}
		e.connMig, e.connAlt = attr.PathMigState, attr.AltPortNum
	}
	return nil
}

// unprotected follows a PORT_ERR on RoCE: layer 1 has nothing to migrate
// the QPs on that port to; one that layer 2 does not protect either (QP A
// in this script) is left to plain verbs.
func (s *scenario) unprotected(d *device, port uint8) {
	for _, e := range d.eps {
		st, ok := d.host.mgr.QPStatus(e.qp)
		if e.port != port || !ok || st.State != fsm.APMUnsupported {
			continue
		}
		if e.l2 != nil {
			s.p.at(s.f.Now(), "%v layer 1: unsupported, no alternate; layer 2 protects it", e)
			continue
		}
		s.p.at(s.f.Now(), "%v layer 1: unsupported, no alternate; layer 2 does not protect QP %s in this script: plain verbs from here", e, e.qpName)
	}
}

// afterRepair says, at the plug, where QP A stands: in ERR nothing brings
// it back (layer 2 does not protect it); in RTS a retry of its HCA may
// still get through.
func (s *scenario) afterRepair(t time.Duration) {
	var dead []string
	for _, e := range s.eps {
		if e.qpName == "A" && e.qp.State() == verbs.QPSErr {
			dead = append(dead, e.dev.String())
		}
	}
	if len(dead) > 0 {
		s.p.at(t, "QP A: in ERR on %s: nothing recovers it (layer 2 does not protect it), the cable back or not", strings.Join(dead, " + "))
		return
	}
	s.p.at(t, "QP A: still in RTS on both sides, stalled with retries left: the HCAs' next retry can cross the repaired cable")
}
