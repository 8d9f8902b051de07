package verbs

import "fmt"

// RCConnect is an RC QP's connect, the three ibv_modify_qp calls from
// RESET to RTS, each with the attributes the kernel requires of an RC QP
// for that transition (qp_state_table, drivers/infiniband/core/verbs.c;
// verbs/sim's rcTable): INIT (P_Key index, port, remote access), RTR
// (the path, MTU, destination QPN, receive PSN, responder resources, RNR
// timer) and RTS (send PSN, ACK timeout, retry counts, initiator depth).
// Every field is used as given; a zero is the value zero.
type RCConnect struct {
	AH              AHAttr // the path to the peer; AH.PortNum is the QP's port
	PKeyIndex       uint16
	Access          AccessFlags
	PathMTU         MTU
	DestQPN         uint32
	RQPSN, SQPSN    uint32
	MaxDestRdAtomic uint8 // responder resources
	MinRNRTimer     uint8
	Timeout         uint8 // local ACK timeout, 4.096 us * 2^Timeout
	RetryCnt        uint8
	RNRRetry        uint8 // 7: without end
	MaxRdAtomic     uint8 // initiator depth
}

// ModifyStep is one ibv_modify_qp: the attributes and the mask.
type ModifyStep struct {
	State QPState
	Attr  QPAttr
	Mask  QPAttrMask
}

// Steps are the INIT, RTR and RTS modifies of the connect.
func (c RCConnect) Steps() []ModifyStep {
	return []ModifyStep{
		{QPSInit, QPAttr{QPState: QPSInit, PKeyIndex: c.PKeyIndex, PortNum: c.AH.PortNum, QPAccessFlags: c.Access},
			QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		{QPSRTR, QPAttr{QPState: QPSRTR, AHAttr: c.AH, PathMTU: c.PathMTU, DestQPN: c.DestQPN, RQPSN: c.RQPSN,
			MaxDestRdAtomic: c.MaxDestRdAtomic, MinRNRTimer: c.MinRNRTimer},
			QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer},
		{QPSRTS, QPAttr{QPState: QPSRTS, SQPSN: c.SQPSN, Timeout: c.Timeout, RetryCnt: c.RetryCnt, RNRRetry: c.RNRRetry,
			MaxRdAtomic: c.MaxRdAtomic},
			QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic},
	}
}

// Apply runs the steps through modify (a QP's Modify, or a layer's
// ModifyQP that wraps it), stopping at the first error, which it returns
// wrapped with the state it was moving to.
func (c RCConnect) Apply(modify func(*QPAttr, QPAttrMask) error) error {
	for _, s := range c.Steps() {
		if err := modify(&s.Attr, s.Mask); err != nil {
			return fmt.Errorf("ibv_modify_qp to %v: %w", s.State, err)
		}
	}
	return nil
}
