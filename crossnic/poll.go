package crossnic

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// Poll returns up to len(wc) completions for the application, as
// ibv_poll_cq would: it drains both legs' CQs, runs the failover when the
// default fails, keeps flushes of replayed WRs to itself, and gives
// completions of the backup leg the default QP's numbers.
func (c *Conn) Poll(wc []verbs.WC) (int, error) {
	if err := c.drain(&c.def); err != nil {
		c.defCQFailed(err)
		return 0, err
	}
	if c.bakReady {
		if err := c.drain(&c.bak); err != nil {
			return 0, err
		}
	}
	c.checkMailbox()
	c.flushUnpostedDue()
	c.purgeBackup()
	n := copy(wc, c.ready)
	c.ready = c.ready[:copy(c.ready, c.ready[n:])]
	return n, nil
}

// defCQFailed: ibv_poll_cq failed on the application's CQ (the default
// leg's). EIO with the device alive is an overrun, the application's own
// error: the CQ is unusable and its QPs are in error, as with plain verbs,
// and no other HCA would do better. The Conn surfaces; its backup QP goes
// to ERR with it, so that the peer's failover fails at once instead of
// waiting for an answer this side's application will never poll for.
// The error returns to the application as ibv_poll_cq reported it.
func (c *Conn) defCQFailed(err error) {
	if !errors.Is(err, verbs.EIO) || c.m.SQ == fsm.SQSurfaced {
		return
	}
	if _, _, qerr := c.def.QP.Query(verbs.QPAttrState); errors.Is(qerr, verbs.EIO) {
		c.defDied() // the device died: its CQ answers EIO too
		return
	}
	c.Surface(fmt.Sprintf("the application's CQ failed (an overrun): %v", err))
}

func (c *Conn) drain(l *Leg) error {
	if err := c.drainCQ(l, l.CQ, false); err != nil {
		return err
	}
	if l.split() {
		return c.drainCQ(l, l.RecvCQ, true)
	}
	return nil
}

// drainCQ handles every completion cq holds for leg l; recvCQ says cq is
// the leg's separate receive CQ.
func (c *Conn) drainCQ(l *Leg, cq verbs.CQ, recvCQ bool) error {
	split := l.split()
	for {
		k, err := cq.Poll(c.buf)
		if err != nil {
			return fmt.Errorf("crossnic: poll %s: %w", l.Ctx.Device().Name, err)
		}
		if k == 0 {
			// Completions polled before (by an outer drain, or by a data
			// path that reads a QP's CQs together) are handled first: a
			// step taken now (a reset) must see them all.
			c.handlePending(c.nestedLeg(l))
			return nil
		}
		for i := 0; i < k; i++ {
			wc := c.buf[i]
			if split && wc.Status != verbs.WCSuccess {
				// The opcode of an error completion is undefined; the CQ
				// it came from says which queue it belongs to.
				switch {
				case recvCQ:
					wc.Opcode = verbs.WCRecv
				case isRecv(&wc):
					wc.Opcode = verbs.WCSend
				}
			}
			c.pend = append(c.pend, pendingWC{leg: l, wc: wc})
		}
		c.handlePending(c.nestedLeg(l))
	}
}

// pendingWC is a polled completion and the leg it came from.
type pendingWC struct {
	leg  *Leg
	wc   verbs.WC
	done bool // handled (by a nested drain, ahead of those before it)
}

// nestedLeg is the leg whose pending completions alone a drain of leg l
// handles: none but l's while the Conn collects what a leg completed in
// the middle of a step (repostRecvsDefault: the backup's receives, before
// the receives move home), so that no other leg's completion starts a
// step of its own half-way through (a probe's error resetting the
// default QP between the move's drain and its reposts put the receives
// there twice: TestProbeErrorWhileReceivesMoveHome); nil, every leg's,
// otherwise. Two legs' CQs keep no order between them.
func (c *Conn) nestedLeg(l *Leg) *Leg {
	if c.collecting {
		return l
	}
	return nil
}

// handlePending handles the polled completions in poll order: every
// leg's (only nil), or only's. Handling one can drain a CQ again (a
// control step first collects what a leg completed); that nested drain
// handles the completions still pending before its own, so none is
// handled twice or out of order within its leg, whichever level polled
// it. The list is emptied once the outermost call handled all of it.
func (c *Conn) handlePending(only *Leg) {
	c.pendDepth++
	for i := c.pendHead; i < len(c.pend); i++ {
		p := c.pend[i]
		if p.done || only != nil && p.leg != only {
			continue
		}
		c.pend[i].done = true
		for c.pendHead < len(c.pend) && c.pend[c.pendHead].done {
			c.pendHead++
		}
		if p.leg == &c.def {
			c.onDefault(p.wc)
		} else {
			c.onBackup(p.wc)
		}
	}
	c.pendDepth--
	if c.pendDepth == 0 && c.pendHead == len(c.pend) {
		c.pend, c.pendHead = c.pend[:0], 0
	}
}

func isRecv(wc *verbs.WC) bool {
	return wc.Opcode == verbs.WCRecv || wc.Opcode == verbs.WCRecvRDMAWithImm
}

// onDefault handles a completion of the default QP.
func (c *Conn) onDefault(wc verbs.WC) {
	if wc.WRID == NudgeWRID {
		c.onNudge(&wc)
		return
	}
	if c.m.SQ == fsm.SQSurfaced {
		switch {
		case ownWRID(wc.WRID): // a probe or notification of a switch back is not the application's
		case c.defGone, c.hideFlushes && wc.Status != verbs.WCSuccess:
			// Its device died and what it held completed from the rings:
			// a late flush of one of those.
			c.stats.HiddenFlushes++
		default:
			c.retireWC(&c.def, &wc)
			c.ready = append(c.ready, wc)
		}
		return
	}
	if wc.Status != verbs.WCSuccess {
		if wc.Status == verbs.WCWRFlushErr && c.rec != nil && c.staleFlush() {
			c.stats.HiddenFlushes++
			return
		}
		if !ownWRID(wc.WRID) && !errorIsFault(wc.Status, c.flushFromFault) && c.retireWC(&c.def, &wc) {
			// The application's own error, on a WR the default QP still
			// holds for it: any path would report it again. It reaches
			// the application as plain verbs report it, and the QP is in
			// error as a plain one would be: its later WRs flush to the
			// application, the peer's notification is refused.
			c.ready = append(c.ready, wc)
			c.Surface(fmt.Sprintf("completion error %v of WR %d on the default QP: the application's error, not a fault", wc.Status, wc.WRID))
			return
		}
		c.defErr = true // the QP is in error: only a reset makes it usable
		switch {
		case wc.WRID == probeWRID:
			c.probing = false
			c.probesOut = max(c.probesOut-1, 0)
			c.stats.ProbeFailures++
			c.probeErr = fmt.Errorf("probe on QP %#x completed with %v", c.def.QP.QPN(), wc.Status)
			c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNProbeFailed}))
		case c.m.SQ == fsm.SQDefault:
			c.fault(fmt.Sprintf("completion error %v on the default QP", wc.Status), &wc)
			if c.m.SQ == fsm.SQSurfaced {
				return // no replay: surfaceHeld gave the application this error
			}
		case c.m.SQ == fsm.SQWaitDrained:
			c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFault, ReplaySafe: true, BackupReady: true,
				Reason: fmt.Sprintf("completion error %v on the default QP during the switch back", wc.Status)}))
		case c.m.SQ == fsm.SQWaitNotify:
			// The switch-back notification was posted: an error does not
			// say whether the peer took it (its ACK may be what was lost),
			// and a peer that took it moved its receives home. Sending the
			// held WRs to the backup then would land them in receives the
			// peer no longer reads (data lost without an error). The
			// error surfaces instead, as for a second fault before the
			// purge. Through the mailbox the peer is asked instead.
			if !c.switchLost(fmt.Sprintf("completion error %v on the default QP", wc.Status)) {
				c.Surface(fmt.Sprintf("completion error %v on the default QP: %v", wc.Status, ErrSwitchNotifyLost))
			}
			return
		}
		c.stats.HiddenFlushes++
		return
	}
	switch {
	case wc.WRID == probeWRID && c.defErr:
		// Answered, but polled after this side moved the QP to ERR
		// (a timed-out probe, the peer's request for a paired reset,
		// its notification): a switch back on it would only flush. It
		// is reset.
		c.probing = false
		c.probesOut = max(c.probesOut-1, 0)
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNProbeFailed}))
	case wc.WRID == probeWRID:
		c.probing = false
		c.probesOut = max(c.probesOut-1, 0)
		c.timeoutAsks = 0
		if c.m.SQ == fsm.SQFallback && c.holdForPeer(c.rec.Clock.Now()) {
			break // the peer switches first (follow.go)
		}
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNProbeOK}))
		c.switchIfIdle()
	case wc.WRID == ctrlSwitchWRID && !isRecv(&wc):
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNNotifyCompleted}))
	case wc.WRID == ctrlRecvWRID && isRecv(&wc):
		if k, n, err := decodeCtrl(wc.ImmData, c.rring.Completed()); err == nil && k == ctrlSwitch {
			c.peerSent, c.stats.PeerSent = n, n
		}
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNPeerSwitchBack}))
		if c.rec != nil {
			c.peerCameHome(c.rec.Clock.Now())
		}
	case wc.WRID == ctrlSendWRID && !isRecv(&wc):
	case isRecv(&wc):
		c.recvSucceeded(&wc)
		c.ready = append(c.ready, wc)
	default:
		c.sring.CompleteSignaled()
		c.ready = append(c.ready, wc)
	}
}

// onNudge handles an error completion of layer 1's nudge, which the shim
// hands over only when it is an armed QP's first error (not a flush): the
// new path failed too. It is a fault of the default QP, never the
// application's: its WR is none of the application's, so it neither
// retires a WR nor reaches the application, and the failover it starts
// surfaces no completion of it (fault without a WC).
func (c *Conn) onNudge(wc *verbs.WC) {
	c.stats.HiddenFlushes++
	if wc.Status == verbs.WCSuccess || wc.Status == verbs.WCWRFlushErr {
		return
	}
	c.defErr = true
	if c.m.SQ == fsm.SQDefault {
		c.fault(fmt.Sprintf("layer 1's nudge completed with %v on the default QP", wc.Status), nil)
	}
}

// recvSucceeded retires the receive a successful completion is of: the
// oldest of the QP's own, or the SRQ's it names.
func (c *Conn) recvSucceeded(wc *verbs.WC) {
	if c.srq != nil {
		c.srqRecvDone(wc)
		return
	}
	_ = c.rring.Complete(true)
}

// staleFlush reports whether a flush completion of the default QP comes
// from before its last reset: a QP flushes only in ERR, so one that is not
// in ERR now flushed in an earlier life. rdma_rxe can put the flushes of a
// QP moved to ERR in the CQ after the drain that preceded its reset; taken
// for a new fault, such a flush would undo the switch back that followed.
func (c *Conn) staleFlush() bool {
	a, _, err := c.def.QP.Query(verbs.QPAttrState)
	return err == nil && a.QPState != verbs.QPSErr
}

// onBackup handles a completion of the backup QP: control messages, and
// the application's traffic after a fallback.
func (c *Conn) onBackup(wc verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		switch {
		case c.aheadFlush(&wc):
			// a receive ahead of the ones moved to the backup, whose
			// filler did not come: a stale copy, or a control receive
			c.fillersDue--
			c.stats.HiddenFlushes++
		case !ownWRID(wc.WRID) && !c.bakGone:
			// The application's WR, retired before the error surfaces
			// (so that no ring completes it again). A flush that is none
			// of the WRs the backup holds, on a backup that holds no
			// receives, is a stale receive's (reposted home at a switch
			// back, not purged yet): the application's copy of it is on
			// the default QP.
			_, recvs := c.holds(&c.bak)
			if c.retireWC(&c.bak, &wc) || recvs {
				wc.QPNum = c.defQPN
				c.ready = append(c.ready, wc)
			} else {
				c.stats.HiddenFlushes++
			}
		}
		if c.m.SQ != fsm.SQSurfaced {
			c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: wc.Status.String()}))
		}
		return
	}
	switch {
	case c.fillersDue > 0 && isRecv(&wc):
		// a filler the peer sent ahead of its replay consumed a stale
		// receive (or a control receive) at the head of the queue
		c.fillersDue--
		c.bakCtrl = false
	case c.srq != nil && isRecv(&wc) && (wc.WRID == ctrlRecvWRID || c.srqCtrlNext()):
		c.onSRQControl(&wc)
	case wc.WRID == ctrlRecvWRID && isRecv(&wc):
		c.bakCtrl = false
		c.onControl(wc.ImmData)
	case isRecv(&wc) && c.m.RQ == fsm.RQDefault && (!c.collecting || c.rring.Completed() >= c.peerSent):
		// A message on the backup while our receives are home can only be
		// a control message, and it consumed a stale receive: the backup
		// was not purged yet. Replaying onto it could corrupt memory.
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: "control message on a backup QP not purged since the last switch back"}))
	case wc.WRID == ctrlSendWRID:
	case wc.WRID == probeWRID && !isRecv(&wc):
		c.bakFence = false // the peer took the records and fillers before it
	case isRecv(&wc):
		c.recvSucceeded(&wc)
		wc.QPNum, wc.SrcQP = c.defQPN, c.peerQPN
		c.ready = append(c.ready, wc)
		c.stats.BackupCompletions++
	default:
		c.sring.CompleteSignaled()
		wc.QPNum = c.defQPN
		c.ready = append(c.ready, wc)
		c.stats.BackupCompletions++
		if c.m.SQ == fsm.SQWaitDrained && c.sring.head > c.fenceIdx {
			c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFenceCompleted}))
		}
	}
}

// srqCtrlNext reports whether the next message on the backup QP of a QP
// on an SRQ is a control message of the peer: before its first replayed
// WR the peer sends nothing else there (its notification or answer, then
// its announcement).
func (c *Conn) srqCtrlNext() bool {
	return c.srqAnn || c.m.SQ == fsm.SQDefault || c.m.SQ == fsm.SQAwaitAck ||
		c.m.SQ == fsm.SQSurfaced && !c.recvsOnBak
}

// onSRQControl handles a control message that arrived on the backup QP of
// a QP on an SRQ: it consumed the group's control receive, or one of the
// application's receives, which it left untouched (zero length) and which
// goes back to the backup SRQ's tail.
func (c *Conn) onSRQControl(wc *verbs.WC) {
	if wc.ByteLen != 0 || wc.WCFlags&verbs.WCFlagWithImm == 0 {
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault,
			Reason: fmt.Sprintf("a message of %d bytes on the backup QP where the peer's control message was due", wc.ByteLen)}))
		return
	}
	if wc.WRID != ctrlRecvWRID {
		if err := c.srq.requeue(wc.WRID); err != nil {
			c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: err.Error()}))
			return
		}
	}
	c.onControl(wc.ImmData)
}

// onControl handles the peer's notification, acknowledgement, refusal or
// PSN announcement.
func (c *Conn) onControl(imm uint32) {
	k, peerRecv, err := decodeCtrl(imm, c.sring.NotifsDone())
	if err == nil && (k == ctrlNotify || k == ctrlAck) {
		c.mbox.watched = true // the peer has a Conn, which reads its inbox from now on
	}
	switch {
	case err != nil:
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: err.Error()}))
	case c.m.SQ == fsm.SQSurfaced:
		// Our error surfaced: the QP is dead in both directions, as with
		// plain verbs. Tell the peer at once instead of letting it wait.
		if k == ctrlNotify {
			c.refuse()
		}
	case k == ctrlRefuse:
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: "the peer cannot fail over (its error surfaced)"}))
	case k == ctrlAck:
		c.srqAnn = c.srq != nil
		c.peerPSNSet = false // the peer's announcement follows its acknowledgement
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNPeerAck, PeerRecv: peerRecv}))
	case k == ctrlAnnounce:
		c.srqAnn = false
		c.peerAnnounced(uint32(peerRecv))
	case k == ctrlNotify:
		c.srqAnn = c.srq != nil
		// The peer's announcement follows its notification: what it
		// announced before is of an earlier handshake. Unless the
		// notification is the answer to this side's own (both saw the
		// fault), this side answers with an acknowledgement and an
		// announcement of its own, drawn now, before handling the
		// notification may connect the default QP.
		c.peerPSNSet = false
		prior := c.m.SQ
		if prior != fsm.SQAwaitAck {
			c.newHandshakePSN() // (in AwaitAck, fault drew it)
		}
		if c.m.SQ == fsm.SQDefault {
			// The peer fell back first; what the default QP completed
			// before counts against its counter.
			_ = c.drain(&c.def)
		}
		if c.unfollowable(peerRecv) {
			c.refuse()
			return
		}
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNPeerNotify, PeerRecv: peerRecv}))
		c.peerFellBackAgain(prior)
	default:
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: fmt.Sprintf("control message of kind %d on the backup QP", k)}))
	}
}

// unfollowable reports, in Default, whether the peer's notification with
// counter peerRecv can be followed by no rewind (an atomic outstanding
// here, or a counter behind what completed here or beyond what was
// posted), and then surfaces the error. It is refused before this side
// moves anything: its error surfaces as plain verbs report it, from the
// default QP, which still holds every WR, and the peer surfaces at once
// instead of replaying against an answer this side could not keep. It
// reports true too when the error surfaced already.
func (c *Conn) unfollowable(peerRecv uint64) bool {
	if c.m.SQ == fsm.SQDefault {
		if _, err := c.sring.PlanRewind(peerRecv); err != nil {
			c.Surface(fmt.Sprintf("the peer's fallback notification cannot be followed: %v", err))
			// The peer's default QP went to ERR when it fell back:
			// nothing on this one is acknowledged again. A provider that
			// retransmits without end (rdma_rxe at retry_cnt 7) would
			// hold the WRs for ever; in ERR they flush to the
			// application now.
			if err := c.def.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); errors.Is(err, verbs.EIO) {
				c.defDead = true
				c.completeGone(&c.def)
			}
		}
	}
	return c.m.SQ == fsm.SQSurfaced
}

// HandleEvent reacts to an async event of the default device: PORT_ERR on
// the default QP's port or DEVICE_FATAL start a failover at once. After a
// local link-down a real HCA may never complete the WRs in flight, so
// waiting for an error completion could hang. Feed PORT_ERR here only for
// QPs layer 1 does not protect: for an armed QP, layer 1 migrates at
// PORT_ERR and hands the QP over (HandOver) only if it cannot.
//
// DEVICE_FATAL counts in every state: the Conn then knows that the default
// QP may never complete what it holds (a ConnectX after a fatal error
// writes no completion to user CQs), and once the error surfaced it
// completes those WRs itself (completeGone).
//
// DEVICE_FATAL of the backup device, while traffic is on the backup QP,
// is a backup fault: the error surfaces and what the backup held
// completes from the shadow rings (a dead ConnectX completes nothing
// more, and waiting for it would hang the application).
func (c *Conn) HandleEvent(ctx verbs.Context, ev verbs.AsyncEvent, defPort uint8) {
	if ctx == c.bak.Ctx && ctx != c.def.Ctx {
		if ev.Type == verbs.EventDeviceFatal && c.m.SQ != fsm.SQDefault && c.m.SQ != fsm.SQSurfaced {
			c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: "DEVICE_FATAL on the backup HCA"}))
		}
		return
	}
	if ctx != c.def.Ctx {
		return
	}
	if ev.Type == verbs.EventDeviceFatal {
		c.defDied()
		if c.m.SQ == fsm.SQDefault {
			c.fault("DEVICE_FATAL on the default HCA", nil)
		}
		return
	}
	if c.m.SQ == fsm.SQDefault && ev.Type == verbs.EventPortErr && ev.Port == defPort {
		c.fault(fmt.Sprintf("PORT_ERR on the default port %d", ev.Port), nil)
	}
}

// HandOver implements the layer-1 hand-over (apm.Handover): APM cannot
// protect the QP any more.
func (c *Conn) HandOver(_ verbs.QP, reason string) {
	if c.m.SQ == fsm.SQDefault {
		c.fault("layer 1 handed over: "+reason, nil)
	}
}
