package crossnic

import (
	"errors"

	"github.com/ibpath/ibpath/verbs"
)

// errorIsFault classifies an error completion of the default QP: true, the
// default path or device failed and another HCA may do what it could not
// (fail over); false, the application's own error, which any path would
// report again (it reaches the application as plain verbs report it, and
// the QP is in error as a plain one would be: no failover). qpFailed is
// asked only for WR_FLUSH_ERR: whether the QP went to ERR after a fault
// (flushFromFault).
//
// Replaying an application's error on the backup would only report it a
// second time, after a handshake with the peer, and leave the connection
// on another HCA for nothing; taking a fault for an application error
// would surface what ibpath exists to hide.
func errorIsFault(s verbs.WCStatus, qpFailed func() bool) bool {
	switch s {
	case verbs.WCRemAccessErr, // the peer's MR refused the rkey, address or right: the backup rkey maps the same rights
		verbs.WCLocProtErr,     // the WR's own lkey or SGE (or the receive's) does not cover its memory
		verbs.WCRemInvReqErr,   // the peer judged the request invalid (a SEND longer than its receive)
		verbs.WCLocLenErr,      // a message longer than the receive's buffers (or than max_msg_sz)
		verbs.WCRemOpErr,       // the peer could not carry out the operation (its receive's SGE is bad)
		verbs.WCLocAccessErr,   // a READ or atomic result landing in memory the lkey does not allow
		verbs.WCMWBindErr,      // a memory window bind the application asked for
		verbs.WCBadRespErr,     // the responder answered with the wrong opcode: the peer's, not the path's
		verbs.WCRNRRetryExcErr: // the peer posted no receive in time: the peer application's pace
		return false
	case verbs.WCWRFlushErr:
		// The QP is in ERR. After an error completion of its own the
		// Conn acted on that one (and the Conn's own moves to ERR are
		// its doing); a flush first means something else put it there:
		// its device died (rdmavt flushes a dead device's QPs) or its
		// port went down, a fault; or the responder found the peer's
		// request at fault (QP_ACCESS_ERR, QP_REQ_ERR), the CQ overran,
		// or the application moved its QP to ERR, which plain verbs
		// report the same way on any path.
		return qpFailed()
	case verbs.WCRetryExcErr, // no ACK within the retries: the path, or the peer's HCA, is gone
		verbs.WCLocQPOpErr, // soft-RoCE (rdma_rxe) completes the WRs in flight with it at once on a link down
		verbs.WCFatalErr,   // the HCA failed
		verbs.WCGeneralErr: // the provider could not say: failing over can only help
		return true
	}
	// The rest belong to RD (EEC, RDD, response timeout) or tag matching,
	// which a protected RC QP does not use: as before classes existed, a
	// fault, so the backup gets its chance.
	return true
}

// flushFromFault reports whether a flush of the default QP follows a
// fault: the QP completed an error since its reset (the Conn acted on
// that one) or the Conn moved it to ERR, or its device or port failed.
func (c *Conn) flushFromFault() bool { return c.defErr || c.defQPFailed() }

// defQPFailed reports whether the default QP's device or port failed: the
// device is known dead, refuses ibv_query_qp with EIO, or the QP's port is
// not ACTIVE. A query that fails otherwise counts as failed too (a fault
// is what an error meant before the classes existed).
func (c *Conn) defQPFailed() bool {
	if c.defDead {
		return true
	}
	a, _, err := c.def.QP.Query(verbs.QPAttrState | verbs.QPAttrPort)
	if err != nil {
		if errors.Is(err, verbs.EIO) {
			c.defDead = true
		}
		return true
	}
	pa, err := c.def.Ctx.QueryPort(max(a.PortNum, 1))
	return err != nil || pa.State != verbs.PortActive
}
