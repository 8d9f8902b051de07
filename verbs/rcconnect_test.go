package verbs

import (
	"errors"
	"strings"
	"testing"
)

// TestRCConnectSteps: the three modifies carry every field where the
// transition takes it, and the masks the kernel requires of an RC QP.
func TestRCConnectSteps(t *testing.T) {
	c := RCConnect{AH: AHAttr{DLID: 7, PortNum: 2}, PKeyIndex: 1, Access: AccessRemoteWrite, PathMTU: MTU1024,
		DestQPN: 0x55, RQPSN: 100, SQPSN: 200, MaxDestRdAtomic: 4, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7,
		RNRRetry: 6, MaxRdAtomic: 2}
	s := c.Steps()
	if a := s[0].Attr; s[0].State != QPSInit || a.QPState != QPSInit || a.PortNum != 2 || a.PKeyIndex != 1 || a.QPAccessFlags != AccessRemoteWrite ||
		s[0].Mask != QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags {
		t.Errorf("INIT: %+v", s[0])
	}
	if a := s[1].Attr; s[1].State != QPSRTR || a.QPState != QPSRTR || a.AHAttr != c.AH || a.PathMTU != MTU1024 || a.DestQPN != 0x55 ||
		a.RQPSN != 100 || a.MaxDestRdAtomic != 4 || a.MinRNRTimer != 12 ||
		s[1].Mask != QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer {
		t.Errorf("RTR: %+v", s[1])
	}
	if a := s[2].Attr; s[2].State != QPSRTS || a.QPState != QPSRTS || a.SQPSN != 200 || a.Timeout != 14 || a.RetryCnt != 7 ||
		a.RNRRetry != 6 || a.MaxRdAtomic != 2 ||
		s[2].Mask != QPAttrState|QPAttrSQPSN|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic {
		t.Errorf("RTS: %+v", s[2])
	}
}

// TestRCConnectApply: the steps run in order, and the first failure stops
// them, named by the state it moved to.
func TestRCConnectApply(t *testing.T) {
	var states []QPState
	ok := func(a *QPAttr, _ QPAttrMask) error { states = append(states, a.QPState); return nil }
	if err := (RCConnect{}).Apply(ok); err != nil || len(states) != 3 || states[0] != QPSInit || states[2] != QPSRTS {
		t.Fatalf("applied %v: %v", states, err)
	}
	states = nil
	refused := errors.New("refused")
	err := (RCConnect{}).Apply(func(a *QPAttr, m QPAttrMask) error {
		if a.QPState == QPSRTR {
			return refused
		}
		return ok(a, m)
	})
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "to RTR") || len(states) != 1 {
		t.Fatalf("a refused RTR: %v after %v", err, states)
	}
}
