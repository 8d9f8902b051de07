package crossnic

import (
	"errors"
	"fmt"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// Recovery configures switching back to the default QP once its path
// works again.
type Recovery struct {
	Clock verbs.Clock
	// ProbeInterval is how often the reset default QP is probed with a
	// zero-length WRITE (default 10 ms).
	ProbeInterval time.Duration
	// HandshakeTimeout bounds the wait for the peer's acknowledgement
	// (default 1 s; past it the error surfaces), and for the answer to
	// the switch-back notification on the default QP (past it the switch
	// counts as broken: traffic stays on the backup, the QP is reset).
	// Either wait lasts at least as long as the QP the message travels
	// on retransmits before it reports an error (retry_cnt+1 local ACK
	// timeouts, and a quarter more), however short this is.
	HandshakeTimeout time.Duration
	// ProbeTimeout is how long a probe may go unanswered (default
	// HandshakeTimeout) before it counts as a failure in the statistics
	// and ProbeErr. The probe stays outstanding and the QP is not reset:
	// a probe sent while the peer's QP is not reset yet gets its answer
	// once the peer resets (some providers retransmit without end,
	// rdma_rxe at retry_cnt 7), and a reset after the peer took it would
	// put the two ends' PSNs apart. Only an error completion resets the
	// QP.
	ProbeTimeout time.Duration
	// DefAttr and BakAttr are the connect attributes the default and the
	// backup QP are reset with (RTR and RTS fields: path, destination,
	// timers; the PSNs are those the two ends announced at the fallback
	// handshake, whatever these say). Nil: ibv_query_qp's answer now.
	DefAttr, BakAttr *verbs.QPAttr
	// PSN, when set, draws the starting send PSN this side announces at
	// each fallback handshake, as SetPSNSource (nil: keep the source
	// set there, or crypto/rand).
	PSN func() uint32
	// PathUp, when set, says whether the default QP's port is up. While
	// it is not, the default QP is not reset (on RoCE the reset's route
	// resolution would wait for a neighbour that cannot answer, up to a
	// second per try) and not probed; it is reset once the port is back.
	PathUp func() bool
	// Room, when set, is the budget of the default QP's CQs for the
	// switch back's own completions (see Room). The default QP is reset
	// and probed only while the Conn holds its share; nil: the CQs are
	// the Conn's own, or big enough.
	Room Room
}

// Room is the budget of entries the application's CQs hold beyond what
// the application sized them for. A switch back puts completions of its
// own in the default QP's CQs: the probe's, the switch-back
// notification's, the peer's notification (it consumes the control
// receive), and the flushes of those when the QP goes to ERR. A CQ sized
// for the application's WRs alone can overrun then, and an overrun puts
// the QP in error without an answer to the peer (ib_write_lat's single
// CQ holds one entry). The shim creates the application's CQs with
// headroom and shares it out among the QPs switching back at the same
// time.
type Room interface {
	// Take reserves the Conn's share; false: none is free now (other
	// QPs of the same CQs are switching back), ask again later.
	Take() bool
	// Give returns the share once the Conn's own completions are all
	// polled (it is home), or when the Conn is closed.
	Give()
}

// errNoRoom: the default QP is not reset while the Conn's share of its
// CQs' headroom is not free.
var errNoRoom = errors.New("no room in the application's CQs for the switch back's own completions yet (other QPs on them are switching back)")

// ErrSwitchNotifyLost is in the Reason of a Conn whose switch-back
// notification failed after it was posted: the peer may have taken it (its
// ACK being what was lost) and moved its receives home, so the held WRs
// cannot go to the backup, and the error surfaces.
var ErrSwitchNotifyLost = errors.New("crossnic: the switch-back notification failed after it was posted: the peer may have taken it")

// ErrNoMailbox: EnableRecovery on a Conn without a mailbox at both ends.
// A switch back needs them: the resets of the default QP it makes take
// fresh PSNs through them (docs/CROSSNIC.md, "Reset PSNs"), and a fault
// in the middle of it hands over through them ("The mailbox"). Without,
// the Conn stays on the backup after a failover.
var ErrNoMailbox = errors.New("switch back needs a mailbox at both ends (OpenMailbox and SetPeerMailbox; a peer that published none runs an older version, or has switch back off)")

// errPathDown: the default QP is not reset while its port is down.
var errPathDown = errors.New("the default port is down")

// errAwaitPSN: the reset default QP waits in INIT for the peer's
// announcement of its starting PSN.
var errAwaitPSN = errors.New("reset to INIT; waiting for the peer's starting PSN (its announcement on the backup QP or through the mailbox)")

// EnableRecovery turns on switching back: after a failover the default QP
// is reset and probed; when a probe succeeds, the next signaled WR becomes
// the fence on the backup QP, later WRs wait, and once the fence completed
// a notification on the default QP tells the peer to move its receives
// home before the held WRs are released there. A default QP whose device
// died cannot be reset: traffic then stays on the backup. The QP's connect
// attributes are taken from ibv_query_qp now (the simulator reports the
// initial PSNs; on hardware the shim keeps those of the application's own
// modifies instead: Recovery.DefAttr and BakAttr).
func (c *Conn) EnableRecovery(r Recovery) error {
	if c.srq != nil {
		return fmt.Errorf("crossnic: enable recovery on QP %#x: it receives through an SRQ, whose receives cannot come home (%w)", c.defQPN, ErrSRQMoved)
	}
	if !c.mboxUsable() {
		return fmt.Errorf("crossnic: enable recovery on QP %#x: %w", c.defQPN, ErrNoMailbox)
	}
	if r.Clock == nil {
		return fmt.Errorf("crossnic: enable recovery: a clock is required")
	}
	if r.ProbeInterval <= 0 {
		r.ProbeInterval = 10 * time.Millisecond
	}
	if r.HandshakeTimeout <= 0 {
		r.HandshakeTimeout = time.Second
	}
	if r.ProbeTimeout <= 0 {
		r.ProbeTimeout = r.HandshakeTimeout
	}
	var err error
	if c.defAttr, err = connectAttr(c.def.QP, r.DefAttr); err != nil {
		return fmt.Errorf("crossnic: enable recovery: query the default QP: %w", err)
	}
	if c.bakAttr, err = connectAttr(c.bak.QP, r.BakAttr); err != nil {
		return fmt.Errorf("crossnic: enable recovery: query the backup QP: %w", err)
	}
	c.rec = &r
	if r.PSN != nil {
		c.psnSrc = r.PSN
	}
	c.hs = &handshakeBound{clock: r.Clock, timeout: waitBound(r.HandshakeTimeout, c.bakAttr)}
	c.notifyBound = waitBound(r.HandshakeTimeout, c.defAttr)
	return nil
}

// connectAttr is given, or else what ibv_query_qp reports of qp.
func connectAttr(qp verbs.QP, given *verbs.QPAttr) (verbs.QPAttr, error) {
	if given != nil {
		return *given, nil
	}
	a, _, err := qp.Query(verbs.QPAttrAV)
	return a, err
}

// Home reports whether the Conn, with recovery on, runs on its default
// QP with nothing else pending: both queues there (after a switch back,
// or never moved), nothing held or owed to the application, the backup
// purged for the next failover, and no probe of the Conn's outstanding
// on the default QP. The default QP then holds every outstanding WR
// (Outstanding) and nothing of the Conn's, and a data path that runs the
// default QP without a Conn (the shim's hot path) can take it back.
func (c *Conn) Home() bool {
	return c.rec != nil && c.m.SQ == fsm.SQDefault && c.m.RQ == fsm.RQDefault &&
		!c.bakDirty && len(c.ready) == 0 && c.probesOut == 0
}

// Outstanding is what the Conn's rings hold: the WRs the application has
// not seen complete, oldest first, with the inline copies, and the
// counters of the handshake. At Home they are all on the default QP; it
// is what a data path taking the QP back starts from (the converse of
// Shadow.Adopt).
func (c *Conn) Outstanding() Resume {
	var st Resume
	inline := false
	c.sring.Outstanding(func(w *verbs.SendWR, b []byte) bool {
		x := *w
		x.SGList = append([]verbs.SGE(nil), w.SGList...)
		st.Sends = append(st.Sends, x)
		var cp []byte
		if w.SendFlags&verbs.SendInline != 0 {
			cp = append([]byte{}, b...)
			inline = true
		}
		st.Inline = append(st.Inline, cp)
		return true
	})
	if !inline {
		st.Inline = nil
	}
	c.rring.Outstanding(func(w *verbs.RecvWR) bool {
		x := *w
		x.SGList = append([]verbs.SGE(nil), w.SGList...)
		st.Recvs = append(st.Recvs, x)
		return true
	})
	st.NotifsDone, st.RecvsDone = c.sring.NotifsDone(), c.rring.Completed()
	return st
}

// Tick does the timed work of recovery: probing the default QP and giving
// up on a handshake the peer never answers. Call it regularly (at least
// every ProbeInterval) once recovery is enabled; without recovery, while
// a handshake bounded by BoundHandshake waits (State says SQAwaitAck).
func (c *Conn) Tick() {
	c.checkMailbox()
	if c.rec == nil {
		if c.hs != nil {
			c.tickHandshake(c.hs.clock.Now())
		}
		return
	}
	now := c.rec.Clock.Now()
	switch c.m.SQ {
	case fsm.SQAwaitAck:
		c.tickHandshake(now)
	case fsm.SQWaitSignaled:
		c.switchIfIdle()
	case fsm.SQWaitNotify:
		if now-c.notifyAt > c.notifyBound {
			if c.m.RQ == fsm.RQDefault && !c.defErr {
				// The peer's sends arrive on this QP, which is not in
				// error: the notification is waited for (a reset would
				// put the PSNs of the peer's direction apart, and a
				// notification abandoned here could still arrive after
				// the held WRs went to the backup). An error completion
				// ends the wait; so does a third timeout, which surfaces
				// the error rather than hold the application's sends
				// for ever on a provider that retransmits without end.
				c.notifyWaits++
				if c.notifyWaits >= maxNotifyWaits {
					why := fmt.Sprintf("the switch-back notification on QP %#x got no answer within %v",
						c.def.QP.QPN(), time.Duration(maxNotifyWaits)*c.notifyBound)
					if !c.switchLost(why) {
						c.Surface(why)
					}
					break
				}
				c.probeErr = fmt.Errorf("switch-back notification on QP %#x: no answer within %v (still waiting for it)",
					c.def.QP.QPN(), c.notifyBound)
				c.notifyAt = now
				break
			}
			// The notification got no answer: the default path broke
			// again. As after an error completion of it, nothing says
			// whether the peer took it (its ACKs may be what was lost),
			// and a peer that took it moved its receives home: the held
			// WRs sent to the backup would land where it no longer
			// reads. The error surfaces (the QP goes to ERR, so that the
			// notification cannot arrive later either).
			_ = c.def.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
			c.defErr = true
			why := fmt.Sprintf("the switch-back notification on QP %#x got no answer within %v", c.def.QP.QPN(), c.notifyBound)
			if !c.switchLost(why) {
				c.Surface(fmt.Sprintf("%s: %v", why, ErrSwitchNotifyLost))
			}
		}
	case fsm.SQFallback:
		if c.probing && now-c.probeAt > c.rec.ProbeTimeout {
			c.probeTimedOut(now)
		}
		if !c.defUsable && !c.defInit && now >= c.nextProbe {
			c.resetDefault() // its port may be back (a RoCE GID returns with its link)
		}
		if c.defUsable && !c.probing && now >= c.nextProbe && c.probesOut == 0 && c.takeRoom() {
			_, err := c.def.QP.PostSend([]verbs.SendWR{{WRID: probeWRID, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled}})
			if err == nil {
				c.probing, c.probeAt = true, now
				c.probesOut++
				c.stats.Probes++
			} else {
				c.probeErr = fmt.Errorf("post the probe on QP %#x: %w", c.def.QP.QPN(), err)
				c.stats.ProbeFailures++
				c.nextProbe = now + c.rec.ProbeInterval
			}
		}
	}
	c.purgeBackup()
	c.settleRoom()
}

// takeRoom reports whether the Conn holds its share of the default QP's
// CQs' headroom, taking it when it is free.
func (c *Conn) takeRoom() bool {
	if c.rec.Room == nil || c.roomHeld {
		return true
	}
	c.roomHeld = c.rec.Room.Take()
	return c.roomHeld
}

// settleRoom gives the Conn's share back once it is home: its probes,
// notifications and control receives are all polled.
func (c *Conn) settleRoom() {
	if c.roomHeld && c.Home() {
		c.rec.Room.Give()
		c.roomHeld = false
	}
}

// probeTimedOut: the outstanding probe got no answer within ProbeTimeout.
//
// With mailboxes at both ends, on a QP the peer's sends do not use, the
// probe is failed: the QP goes to ERR, and the probe's flush resets it,
// paired with the peer's reset (resetpair.go), so the next probe goes
// out at once instead of at the HCA's next retransmission (one local ACK
// timeout after the path came back: 67 ms at timeout 14, 4.3 s at
// timeout 20). The fresh PSNs of both ends make it safe whatever became
// of the probe; a copy of it still in the fabric meets a PSN the peer's
// new incarnation does not carry. (A peer whose QP connects late with
// the last handshake's PSNs, which this side's QP used, pairs that
// connect too: pairedReset.) Past repeated timeouts on a path that
// stays broken with both ports up, the resets back off (maxAskBackoff).
//
// Otherwise it stays outstanding, and no other is posted behind it: the
// QP is not in error, so the path may answer yet. The peer's QP may not
// be reset yet (its port still down), and takes the probe once it is. A
// reset that carried the PSNs on here could come after the peer took
// the probe, or after the peer's sends came home onto the QP, and put
// the two ends' PSNs apart for good on a provider that retransmits
// without end (the switch-back campaign shows both); a second probe
// could fill a send queue of one WR (the application's own depth:
// ib_write_lat's is 1) and leave no room for the switch-back
// notification. A probe that fails with an error completion resets the
// QP (onDefault).
func (c *Conn) probeTimedOut(now time.Duration) {
	c.probeAt = now // the next failure is counted one ProbeTimeout later
	if c.m.RQ != fsm.RQDefault && c.pairedReset() &&
		(c.timeoutAsks == 0 || now-c.askedAt >= c.rec.ProbeTimeout<<min(c.timeoutAsks, maxAskBackoff)) {
		_ = c.drain(&c.def)
		if !c.probing || c.m.SQ != fsm.SQFallback {
			return // answered after all (or the drain moved things on)
		}
		c.timeoutAsks++
		c.askedAt = now
		c.defaultToErr()
		_ = c.drain(&c.def) // the probe's flush: CNProbeFailed resets the QP, paired
		if c.probing && c.m.SQ == fsm.SQFallback {
			// The flush is not in the CQ yet (a provider that writes it
			// later: it meets the reset QP, and is hidden as a stale
			// flush).
			c.stats.ProbeFailures++
			c.resetDefault()
		}
		c.probeErr = fmt.Errorf("probe on QP %#x: no answer within %v (failed: the QP is reset, paired with the peer's)", c.def.QP.QPN(), c.rec.ProbeTimeout)
		return
	}
	c.stats.ProbeFailures++
	c.probeErr = fmt.Errorf("probe on QP %#x: no answer within %v (still waiting for it, not reset)", c.def.QP.QPN(), c.rec.ProbeTimeout)
}

// maxAskBackoff bounds the backoff of paired resets asked for timed-out
// probes on a path that stays broken with both ports up (a switch in
// between): the n-th waits ProbeTimeout<<n after the one before, n at
// most this (64 ProbeTimeouts: about a minute in the shim).
const maxAskBackoff = 6

// errNotReset: initQP failed at its first step, the modify to RESET: the
// QP holds what it held (its receives among it).
var errNotReset = errors.New("the QP was not reset")

// initQP takes a QP through RESET to INIT (REMOTE_WRITE added to its
// access flags: probes and notifications are zero-length WRITEs) and
// posts n control receives first on its empty receive queue. Its PSNs are
// set by connectQP, once the peer's is known.
func initQP(qp verbs.QP, a verbs.QPAttr, n int) error {
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState},
		{verbs.QPAttr{QPState: verbs.QPSInit, PKeyIndex: a.PKeyIndex, PortNum: a.PortNum,
			QPAccessFlags: a.QPAccessFlags | verbs.AccessRemoteWrite},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
	}
	for i, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			if i == 0 {
				return fmt.Errorf("reset QP %#x to %v: %w: %w", qp.QPN(), s.attr.QPState, errNotReset, err)
			}
			return fmt.Errorf("reset QP %#x to %v: %w", qp.QPN(), s.attr.QPState, err)
		}
	}
	if err := postCtrlRecvs(qp, n); err != nil {
		return fmt.Errorf("post the control receive on QP %#x: %w", qp.QPN(), err)
	}
	return nil
}

// connectQP takes a QP in INIT through RTR (receive PSN rq: the peer's
// announced one) and RTS (send PSN sq: this side's) with its connect
// attributes.
func connectQP(qp verbs.QP, a verbs.QPAttr, rq, sq uint32) error {
	c := verbs.RCConnect{AH: a.AHAttr, PathMTU: a.PathMTU, DestQPN: a.DestQPN, RQPSN: rq, SQPSN: sq,
		MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, Timeout: a.Timeout, RetryCnt: a.RetryCnt,
		RNRRetry: a.RNRRetry, MaxRdAtomic: a.MaxRdAtomic}
	for _, s := range c.Steps()[1:] { // RTR, RTS: the QP is at INIT
		if err := qp.Modify(&s.Attr, s.Mask); err != nil {
			return fmt.Errorf("reset QP %#x to %v: %w", qp.QPN(), s.State, err)
		}
	}
	return nil
}

// resetDefault makes the failed default QP usable again and schedules a
// probe. A QP that cannot be reset (its device died, or its port's
// address is gone) is tried again every ProbeInterval: traffic stays on
// the backup meanwhile.
func (c *Conn) resetDefault() {
	if c.rec == nil {
		return
	}
	_ = c.drain(&c.def)
	if c.m.SQ == fsm.SQSurfaced {
		return // what the drain handled surfaced the error: the QP stays in ERR
	}
	if c.defInit || c.resetHeld {
		return // reset already: it waits in INIT for the peer's PSN; or not now (onMailboxNotify)
	}
	c.probing = false
	c.nextProbe = c.rec.Clock.Now() + c.rec.ProbeInterval
	if !c.takeRoom() {
		c.defUsable, c.resetErr = false, errNoRoom
		return
	}
	if c.m.RQ == fsm.RQDefault && c.defUsable && !c.defErr {
		// The peer's sends arrive on the default QP, and it is not in
		// error: a reset would take its receive queue and its PSNs from
		// under that traffic (stalling it on a provider that retransmits
		// without end). It is probed again as it is; this side's sends
		// stay on the backup meanwhile.
		c.stats.ResetsSkipped++
		return
	}
	if !c.pathUp() {
		c.defUsable, c.resetErr, c.defLate = false, errPathDown, true
		return
	}
	// The peer's sends came home onto this QP (its switch-back
	// notification arrived): the reset is paired with a flag that says
	// so (askReset), and the peer, whose sends lose their QP, fails over
	// through the mailbox instead of sending into the reset QP. The
	// application's receives the QP held (flushed and hidden by an
	// error, or discarded by the reset) are on no QP until that failover
	// moves them to the backup.
	rqHome := c.m.RQ == fsm.RQDefault
	paired := c.pairedReset()
	if err := initQP(c.def.QP, c.defAttr, 1); err != nil {
		c.defUsable = false
		c.stats.ResetFailures++
		c.resetErr = err
		// Flushed and hidden (an error), or discarded by a reset that
		// got further than RESET: the receives are on no QP now.
		if (c.defErr || !errors.Is(err, errNotReset)) && !c.recvsOnBak {
			c.recvsOffEnd = c.rring.tail
		}
		return
	}
	if (c.defErr || rqHome) && !c.recvsOnBak {
		c.recvsOffEnd = c.rring.tail // flushed and hidden, or discarded: on no QP now
	}
	c.defUsable, c.defErr, c.defInit = false, false, true
	c.resetErr = errAwaitPSN
	c.probesOut = 0 // the reset discarded them
	if paired {
		c.askReset()
		return
	}
	if c.peerPSNSet {
		c.connectDefault()
	}
}

// connectDefault takes the default QP waiting in INIT to RTS with the
// peer's announced PSN and this side's, of the last handshake or paired
// reset.
// Probes and notifications go on it only from then on. A QP that cannot
// be connected is reset again every ProbeInterval.
func (c *Conn) connectDefault() {
	c.defInit = false
	if err := connectQP(c.def.QP, c.defAttr, c.peerPSN, c.ownPSN); err != nil {
		c.stats.ResetFailures++
		c.resetErr = err
		if a, _, qerr := c.def.QP.Query(verbs.QPAttrState); qerr == nil && a.QPState == verbs.QPSRTR {
			// Its responder runs from the peer's PSN: it may take the
			// peer's packets before the next reset, which takes
			// fresh PSNs then (pairedReset).
			c.defPaired = true
		}
		return
	}
	c.defUsable, c.resetErr, c.defPaired, c.defLate = true, nil, true, false
}

// peerAnnounced: the peer announced the send PSN its QPs start from at
// their next resets (it follows its fallback notification or
// acknowledgement). A default QP waiting in INIT for it is connected now.
func (c *Conn) peerAnnounced(psn uint32) {
	c.peerPSN, c.peerPSNSet, c.defPaired = psn, true, false
	if c.rec != nil && c.defInit {
		c.connectDefault()
	}
}

// peerFellBackAgain: the peer's fallback notification arrived while this
// side's sends were away from the default QP already (prior: the send
// queue's state then), so the fsm does not reset the default QP for it.
// But the peer resets its own, and connects it with the PSN this side
// just announced: this side's default QP, connected with the PSNs of the
// earlier handshake, would send into it PSNs it takes for duplicates (and
// acknowledges without executing them) or for a gap. It goes to ERR at
// once, before the peer can have this side's announcement, and is reset
// (a switch back under way on it fails over to the backup first) and
// connected with the new PSNs.
func (c *Conn) peerFellBackAgain(prior fsm.SQState) {
	if c.rec == nil || c.m.SQ == fsm.SQSurfaced {
		return
	}
	if c.defInit {
		if !c.defErr {
			return // it waits in INIT for the announcement that follows
		}
		// Reset for a paired reset, then moved to ERR for the peer's
		// notification (onMailboxNotify): its receives flushed, it is
		// reset again for the handshake's PSNs.
		c.defInit = false
	}
	switch prior {
	case fsm.SQFallback, fsm.SQWaitSignaled, fsm.SQWaitDrained, fsm.SQWaitNotify:
	default:
		return // the fsm resets it (Default), or reset it already (AwaitAck)
	}
	c.defaultToErr()
	if c.m.SQ == fsm.SQFallback {
		c.resetDefault()
		return
	}
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFault, ReplaySafe: true, BackupReady: true,
		Reason: "the peer fell back again during the switch back"}))
}

// ProbeErr is why the last try of the default path that failed did: a
// probe that could not be posted, completed in error, or got no answer in
// time, or a switch-back notification still unanswered past
// HandshakeTimeout on a QP the peer's sends use (nil: none failed).
func (c *Conn) ProbeErr() error { return c.probeErr }

// ResetErr is why the default QP could not be reset for a switch back the
// last time it was tried (nil: it was, or never tried).
func (c *Conn) ResetErr() error { return c.resetErr }

// switchIfIdle: with nothing outstanding on the backup there is nothing to
// fence, so a direction whose application posts nothing switches back
// without waiting for a signaled WR that may never come.
func (c *Conn) switchIfIdle() {
	if c.m.SQ != fsm.SQWaitSignaled || c.sring.Len() != 0 || c.bakFence {
		return
	}
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFencePosted}))
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFenceCompleted}))
}

// fencePosted: a signaled WR just went to the backup as the fence.
func (c *Conn) fencePosted() {
	c.fenceIdx = c.sring.tail - 1
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFencePosted}))
}

// holdAfterFence: every WR recorded from now on waits for the switch.
func (c *Conn) holdAfterFence() {
	c.holdFrom = c.sring.tail
	c.holdAt = c.rec.Clock.Now()
}

// maxNotifyWaits is how many HandshakeTimeouts a switch-back notification
// on a QP the peer's sends use is waited for before the error surfaces.
const maxNotifyWaits = 3

// releaseNotify tells the peer, on the default QP, that this side's sends
// are back there, and how many of its receives they consumed.
func (c *Conn) releaseNotify() error {
	// It carries the receive-consuming sends completed so far: the fence
	// completed, so every one the peer will find on its backup is counted.
	_, err := c.def.QP.PostSend([]verbs.SendWR{{WRID: ctrlSwitchWRID, Opcode: verbs.WRRDMAWriteWithImm,
		SendFlags: verbs.SendSignaled, ImmData: encodeCtrl(ctrlSwitch, c.sring.NotifsDone())}})
	if err != nil {
		return fmt.Errorf("crossnic: post the switch-back notification: %w", err)
	}
	c.notifyAt, c.notifyWaits = c.rec.Clock.Now(), 0
	c.stats.Notified = c.sring.NotifsDone()
	return nil
}

// releaseHeld posts the held WRs on the default QP, in order. An inline
// WR is sent from the copy taken when it was posted, as in a replay: the
// application may have reused its buffer since (inline data names memory
// by address, so the staging area serves any device).
func (c *Conn) releaseHeld() error {
	ch := &c.schain
	for i := max(c.holdFrom, c.sring.head); i < c.sring.tail; {
		ch.start(cap(c.sges))
		var cerr error
		for ; i < c.sring.tail && !ch.full(); i++ {
			w, inline := c.sring.wr(i)
			dst, sges := ch.next()
			*dst = *w
			if w.SendFlags&verbs.SendInline != 0 && len(inline) > 0 {
				if err := c.fromCopy(dst, sges, i, inline); err != nil {
					cerr = fmt.Errorf("crossnic: release WR %d on the default QP: %w", w.WRID, err)
					break
				}
			}
			ch.keep()
		}
		if len(ch.wrs) > 0 {
			if n, err := c.def.QP.PostSend(ch.wrs); err != nil {
				return fmt.Errorf("crossnic: release WR %d on the default QP: %w", ch.wrs[min(n, len(ch.wrs)-1)].WRID, err)
			}
		}
		if cerr != nil {
			return cerr
		}
	}
	c.bakFrom = c.sring.tail // nothing more goes to the backup
	c.defHolds = true
	c.stats.SwitchBacks++
	c.stats.SwitchPause = c.rec.Clock.Now() - c.holdAt
	return nil
}

// redirectHeld: the default failed during the switch; the held WRs go to
// the backup instead.
func (c *Conn) redirectHeld() error {
	c.bakFrom = max(c.bakFrom, c.fenceIdx+1)
	return c.replayTail()
}

// repostRecvsDefault moves the outstanding receives home. Completions the
// backup already produced are collected first, as the data they are (the
// peer's fence proved them executed before its notification), so no
// receive moves twice. They stop at the count the notification carried:
// a receive consumed beyond it was consumed by a control message the peer
// sent after its switch (onBackup).
func (c *Conn) repostRecvsDefault() error {
	c.collecting = true
	_ = c.drain(&c.bak)
	c.collecting = false
	c.stats.CollectedTo = c.rring.Completed()
	c.recvsOnBak = false
	c.bakStale = c.rring.Len() // their copies stay on the backup until it is purged
	err := c.postRecvsDefault()
	c.recvsOffEnd = 0
	c.bakDirty = true
	return err
}

// postRecvsDefault posts the outstanding receives on the default QP, in
// order, up to the first it refuses.
func (c *Conn) postRecvsDefault() error {
	ch := &c.rchain
	ch.start(cap(c.sges))
	var err error
	post := func() {
		if len(ch.wrs) > 0 {
			_, err = c.def.QP.PostRecv(ch.wrs)
			ch.wrs = ch.wrs[:0]
		}
	}
	c.rring.Outstanding(func(w *verbs.RecvWR) bool {
		ch.add(*w) // its SGE list stays in the ring while posted
		if ch.full() {
			post()
		}
		return err == nil
	})
	if err == nil {
		post()
	}
	return err
}

// purgeBackup resets the backup QP once both queues are home, so that no
// stale receive waits there for the next failover's notification.
func (c *Conn) purgeBackup() {
	if c.rec == nil || !c.bakDirty || c.m.SQ != fsm.SQDefault || c.m.RQ != fsm.RQDefault {
		return
	}
	now := c.rec.Clock.Now()
	if c.purgeErr != nil && now < c.nextPurge {
		return // a failed purge is tried again every ProbeInterval, not at every poll
	}
	_ = c.drain(&c.bak)
	if c.mbox.unfenced || c.bakFence {
		// A record written to the peer's mailbox may not be
		// acknowledged yet (records are unsignaled), nor the fillers
		// (their fence outstanding). The purge would drop them from
		// the QP, and a retransmission already in the fabric could
		// still reach the peer's backup after it, or be lost, leaving
		// the peer's stream short of the one the purge carries on
		// (purgePSNs). The purge waits for a fence behind them.
		if !c.bakFence {
			if err := c.postBakFence(); err != nil {
				c.purgeErr = fmt.Errorf("purge the backup QP: post the fence behind the mailbox records: %w", err)
				c.nextPurge = now + c.rec.ProbeInterval
			}
		}
		return
	}
	rq, sq, err := c.purgePSNs()
	if err == nil {
		if err = initQP(c.bak.QP, c.bakAttr, ctrlRecvs); err == nil {
			err = connectQP(c.bak.QP, c.bakAttr, rq, sq)
		}
	}
	if err != nil {
		c.bakReady = false
		c.purgeErr = fmt.Errorf("purge the backup QP: %w", err)
		c.nextPurge = now + c.rec.ProbeInterval
		return
	}
	c.bakDirty, c.bakReady, c.bakCtrl, c.purgeErr = false, true, true, nil
	c.bakStale, c.fillersDue = 0, 0
	c.stats.BackupResets++
}

// AwayReason says what keeps a Conn with recovery from being Home ("" when
// it is): for the log of a switch back that does not finish.
func (c *Conn) AwayReason() string {
	switch {
	case c.rec == nil:
		return "no recovery"
	case c.m.SQ != fsm.SQDefault:
		return "send queue " + c.m.SQ.String()
	case c.m.RQ != fsm.RQDefault:
		return "receive queue " + c.m.RQ.String() + ": the peer's sends are not home"
	case c.bakDirty && c.purgeErr != nil:
		return c.purgeErr.Error()
	case c.bakDirty:
		return "backup not purged yet"
	case len(c.ready) > 0:
		return fmt.Sprintf("%d completions owed to the application", len(c.ready))
	case c.probesOut > 0:
		return fmt.Sprintf("%d probes outstanding on the default QP", c.probesOut)
	}
	return ""
}

// pathUp reports what Recovery.PathUp says of the default port (up when
// none was given).
func (c *Conn) pathUp() bool {
	return c.rec == nil || c.rec.PathUp == nil || c.rec.PathUp()
}
