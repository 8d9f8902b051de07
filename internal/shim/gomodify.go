package shim

import (
	"errors"

	"github.com/ibpath/ibpath/verbs"
)

// InterposedModify is the sequence cmd/libibpath's interposed
// ibv_modify_qp makes, for a data path written in Go (the simulator's
// processes, the shim's tests): layer 1 carries the modify out when it
// wants it (ModifyQP), else the provider; then the runtime hears of it
// (AfterModify, with the errno of a failure). ctx is the application's
// context id, def its device context. It returns whether layer 1 carried
// the modify out, and the modify's error.
func (r *Runtime) InterposedModify(ctx uintptr, def verbs.Context, qp verbs.QP, attr verbs.QPAttr, mask verbs.QPAttrMask) (bool, error) {
	a := attr // the C side hands Go a copy of the application's attributes
	var err error
	wants := r.Layer1Wants(ctx, qp.QPN(), mask, attr.QPState)
	if wants {
		err = r.ModifyQP(def, qp, &a, mask)
	} else {
		err = qp.Modify(&a, mask)
	}
	m := Modify{QPN: qp.QPN(), Mask: mask, State: attr.QPState, Port: attr.PortNum, DLID: attr.AHAttr.DLID,
		Global: attr.AHAttr.IsGlobal, DGID: attr.AHAttr.GRH.DGID, DestQPN: attr.DestQPN, Attr: attr}
	if err != nil {
		m.Err = int(verbs.EINVAL)
		var ve *verbs.Error
		if errors.As(err, &ve) {
			m.Err = int(ve.Errno)
		}
	}
	r.AfterModify(ctx, m)
	return wants, err
}

// AfterModify is what the runtime hears once an application's
// ibv_modify_qp returned (the C side's ibpathAfterModify): the modify is
// recorded (Modified), and a QP the application took to RTR is connected
// for layer 2 (Connected): the peer's address and QP number are known
// then, and a QP that only receives (the server of ib_write_bw) never
// goes further. Its RTS sets the scan off at once: the backup QP waits
// for it to copy the application's ACK timeout and retry counts
// (crossnic.Shadow's scan).
func (r *Runtime) AfterModify(ctx uintptr, m Modify) {
	r.Modified(ctx, m)
	if m.Err != 0 || m.Mask&verbs.QPAttrState == 0 {
		return
	}
	switch m.State {
	case verbs.QPSRTR:
		r.Connected(ctx, m.QPN)
	case verbs.QPSRTS:
		select {
		case r.rescan <- struct{}{}:
		default:
		}
	}
}
