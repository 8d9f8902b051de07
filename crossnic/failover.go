package crossnic

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// fault starts a failover from the Default state; wc is the error
// completion of the default QP that showed the fault, if one did.
func (c *Conn) fault(reason string, wc *verbs.WC) {
	c.faultWCSet = wc != nil
	if wc != nil {
		c.faultWC = *wc
	}
	c.stats.Faults++
	// The PSN the notification's announcement carries is drawn before
	// anything else: handling the fault can handle the peer's
	// notification too (both sides saw it), and connect the default QP
	// once the peer's announcement follows.
	c.newHandshakePSN()
	if c.hs != nil {
		c.faultAt = c.hs.clock.Now()
	}
	c.mbox.use = c.bakReady && c.mboxFault()
	ready := c.bakReady && (c.bakCtrl || c.mbox.use)
	c.mbox.switchDone = true // (fault is called only in Default)
	if c.bakReady && !ready {
		// A second fault before the backup was purged after a switch
		// back: the peer's answer would consume one of the application's
		// receives there, or a stale one, and the mailbox cannot carry
		// this one. The error surfaces instead.
		reason = "the backup QP is not purged since the last switch back: " + reason
	}
	unsafe := c.sring.Unreplayable()
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFault, ReplaySafe: !c.sring.AtomicOutstanding() && unsafe == "", Unsafe: unsafe,
		BackupReady: ready, Reason: reason}))
}

// act performs the machine's actions in order.
func (c *Conn) act(acts []fsm.CNAction) {
	for _, a := range acts {
		if c.m.SQ == fsm.SQSurfaced && a.Kind != fsm.ActSurface {
			return // an action before surfaced the error (Surface did its work): the rest is moot
		}
		var err error
		switch a.Kind {
		case fsm.ActFlushDefault:
			c.flushDefault()
		case fsm.ActRepostRecvsBackup:
			err = c.repostRecvs()
		case fsm.ActSendNotify:
			err = c.sendCtrl(ctrlNotify)
		case fsm.ActSendAck:
			err = c.sendCtrl(ctrlAck)
		case fsm.ActRewindSends:
			if err = c.announceOwed(); err == nil {
				err = c.rewind(a.PeerRecv)
			}
		case fsm.ActSurface:
			c.surfaceHeld()
		case fsm.ActResetDefault:
			c.resetDefault()
		case fsm.ActPostSwitchNotify:
			c.holdAfterFence()
		case fsm.ActReleaseNotify:
			err = c.releaseNotify()
		case fsm.ActReleaseHeld:
			err = c.releaseHeld()
		case fsm.ActRedirectHeld:
			err = c.redirectHeld()
		case fsm.ActRepostRecvsDefault:
			err = c.repostRecvsDefault()
		}
		if err != nil {
			c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: err.Error()}))
			return
		}
	}
}

// flushDefault collects what the default QP completed before the fault
// (so the receive counter is current), then moves it to ERR so every WR it
// still holds flushes at once, and hides those flushes.
func (c *Conn) flushDefault() {
	_ = c.drain(&c.def)
	c.defHolds = false
	c.defErr = true // its flushes are the Conn's doing, not a new fault
	// The sends were all on the default QP (after a switch back too: its
	// fence drained the backup), so none is on the backup now: if the
	// error surfaces before the replay, every outstanding WR is flushed
	// to the application here (surfaceHeld), none is left waiting for a
	// flush the backup will never give.
	c.bakFrom = c.sring.head
	// A dead device refuses the modify (EIO); its QPs may have flushed
	// (rdmavt) or may never complete what they hold (a ConnectX): either
	// way those WRs are replayed, and their flushes hidden.
	if err := c.def.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); errors.Is(err, verbs.EIO) {
		c.defDead = true
	}
	_ = c.drain(&c.def)
}

// defaultToErr moves the default QP to ERR (a device that refuses with
// EIO is dead) and notes that its flushes are the Conn's doing.
func (c *Conn) defaultToErr() {
	if err := c.def.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); errors.Is(err, verbs.EIO) {
		c.defDead = true
	}
	c.defErr = true
}

// repostRecvs moves the outstanding receives to the backup QP, after the
// control receive already there.
func (c *Conn) repostRecvs() error {
	c.recvsOnBak = true
	if c.srq != nil {
		return c.srq.move(c)
	}
	ch := &c.rchain
	ch.start(cap(c.sges))
	var err error
	c.rring.Outstanding(func(w *verbs.RecvWR) bool {
		var r verbs.RecvWR
		if r, err = c.keys.TranslateRecv(ch.slot(), w); err != nil {
			return false
		}
		ch.add(r)
		if ch.full() {
			err = c.postRecvChain()
			ch.start(cap(c.sges))
		}
		return err == nil
	})
	c.recvsOffEnd = 0
	if perr := c.postRecvChain(); err == nil {
		err = perr
	}
	return err
}

// postRecvChain posts the receives chained in c.rchain on the backup QP
// and counts those it took.
func (c *Conn) postRecvChain() error {
	ch := &c.rchain
	if len(ch.wrs) == 0 {
		return nil
	}
	n, err := c.bak.QP.PostRecv(ch.wrs)
	c.stats.RecvsMoved += n
	if err != nil {
		err = fmt.Errorf("crossnic: move receive %d to the backup QP: %w", ch.wrs[min(n, len(ch.wrs)-1)].WRID, err)
	}
	ch.wrs = ch.wrs[:0]
	return err
}

// sendCtrl sends a notification or acknowledgement carrying the receive
// counter to the peer's backup QP, followed by the announcement of the
// send PSN this side's QPs start from at their next resets (drawn at the
// fault); or a refusal, alone. The peer's backup has a control receive
// for each (PostControlRecv), and nothing of this side's traffic goes to
// the backup before them: the replay follows the handshake. Every
// handshake message is followed by an announcement, with recovery or
// without, so that the peer's second control receive never waits for a
// message that does not come (the application's first message would take
// it).
//
// An acknowledgement's announcement goes right behind it. A
// notification's waits for the peer's answer (announceOwed, before the
// replay): until then this side cannot know which incarnation of the
// peer's backup QP takes its packets. A peer that was about to purge its
// backup (reset it after a switch back) when this side faulted again may
// purge between the two packets: its old incarnation can take the
// announcement's PSN for a duplicate and acknowledge it without a
// completion, and the new one then gets the notification (held in the
// fabric) and waits in INIT for an announcement that never comes
// (switch-back campaign seed 22436 of 30,000, before a switch back
// needed mailboxes: with them a handshake after a purge goes through the
// mailbox, and a notification through the control receives is a first
// one, with no purge before it). The peer's answer comes
// from the incarnation that took the notification, and the peer does not
// purge in the middle of a handshake. Nothing else may follow the
// notification before the answer either: whatever the old incarnation
// acknowledges leaves a gap in the PSNs the new one expects. Without
// recovery (no switch back, so no purge), a zero-length RDMA WRITE goes
// right behind the notification instead (the trailer: it consumes no
// receive and executes nothing), so that a notification lost in the
// fabric is resent at the peer's sequence NAK, not at the local ACK
// timeout; with recovery, a lost notification waits for that timeout.
func (c *Conn) sendCtrl(k ctrlKind) error {
	_ = c.drain(&c.def) // the counter must include every receive already completed
	switch {
	case c.mbox.via && k == ctrlAck:
		return c.answerMailbox(ctrlAck) // the notification came through the mailbox
	case k == ctrlNotify && c.mbox.use:
		return c.notifyMailbox() // (fault or switchLost chose it)
	}
	imm := encodeRefusal()
	if k != ctrlRefuse {
		imm = encodeCtrl(k, c.rring.Completed())
	}
	// The message and what follows it go in one post (chain.go).
	c.ctrl[0] = verbs.SendWR{WRID: ctrlSendWRID, Opcode: verbs.WRRDMAWriteWithImm, ImmData: imm}
	wrs := c.ctrl[:1]
	switch {
	case k == ctrlRefuse:
	case k == ctrlNotify:
		c.annOwed = true
		if c.rec == nil {
			wrs = append(wrs, verbs.SendWR{WRID: ctrlSendWRID, Opcode: verbs.WRRDMAWrite}) // the trailer
		}
	default:
		wrs = append(wrs, verbs.SendWR{WRID: ctrlSendWRID, Opcode: verbs.WRRDMAWriteWithImm, ImmData: encodeAnnounce(c.ownPSN)})
	}
	if n, err := c.bak.QP.PostSend(wrs); err != nil {
		what := "control message"
		if n > 0 {
			what = "the control message's follower"
		}
		return fmt.Errorf("crossnic: send %s on the backup QP: %w", what, err)
	}
	return nil
}

// announceOwed posts the announcement that follows this side's
// notification, if it is still owed: the peer answered (sendCtrl).
func (c *Conn) announceOwed() error {
	if !c.annOwed {
		return nil
	}
	c.annOwed = false
	return c.postCtrl(encodeAnnounce(c.ownPSN))
}

// postCtrl posts a control message with immediate imm on the backup QP.
func (c *Conn) postCtrl(imm uint32) error {
	_, err := c.bak.QP.PostSend([]verbs.SendWR{{WRID: ctrlSendWRID, Opcode: verbs.WRRDMAWriteWithImm, ImmData: imm}})
	if err != nil {
		return fmt.Errorf("crossnic: send control message on the backup QP: %w", err)
	}
	return nil
}

// newHandshakePSN draws the PSN this side announces at a handshake (or
// at a reset paired through the mailbox): the send PSN of the default
// QP's next reset and of the backup's purge. A follower's wait
// (follow.go) belonged to the handshake before, and so did a paired
// reset's wait for the peer's answer.
func (c *Conn) newHandshakePSN() {
	c.ownPSN = c.drawPSN()
	c.following = false
	// the handshake's announcements connect both ends
	c.mbox.resetAsk, c.mbox.deferredSet = 0, false
}

// drawPSN draws a starting PSN: from the source SetPSNSource or
// Recovery.PSN gave, else from crypto/rand.
func (c *Conn) drawPSN() uint32 {
	if c.psnSrc != nil {
		return c.psnSrc() & ctrlPSNMask
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return binary.LittleEndian.Uint32(b[:]) & ctrlPSNMask
}

// SetPSNSource makes src draw the starting send PSNs this side announces
// at each fallback handshake (24 bits are kept), with recovery or
// without; nil: crypto/rand. Tests give a seeded source, so that a
// simulated run replays exactly.
func (c *Conn) SetPSNSource(src func() uint32) { c.psnSrc = src }

// rewind skips what the peer's counter proves delivered (synthesizing the
// completions the application is owed) and replays the rest on the backup.
func (c *Conn) rewind(peerRecv uint64) error {
	plan, err := c.sring.PlanRewind(peerRecv)
	if err != nil {
		return err
	}
	c.sring.TakeDelivered(plan.Delivered, func(w *verbs.SendWR) {
		c.ready = append(c.ready, verbs.WC{WRID: w.WRID, Status: verbs.WCSuccess,
			Opcode: verbs.WCOpcodeFor(w.Opcode), QPNum: c.defQPN})
		c.stats.Synthesized++
	})
	c.stats.Delivered += plan.Delivered
	c.bakFrom = c.sring.head
	c.faultWCSet = false // the WR it was of goes to the backup, which reports its own errors
	return c.replayTail()
}

// replayTail posts on the backup every recorded WR not posted there yet,
// in chains (chain.go). An inline WR is sent from the copy taken when it
// was posted, not from the application's memory, which it may have
// reused since. A WR that cannot be translated ends the replay with an
// error after those before it are posted, as one refused by the backup
// does.
func (c *Conn) replayTail() error {
	if c.replayHeld {
		return nil // ReleaseReplay posts them
	}
	if err := c.postFillers(); err != nil {
		return err // (the peer's answer through the mailbox asked for them first)
	}
	for {
		start := max(c.bakFrom, c.sring.head)
		if start >= c.sring.tail {
			return nil
		}
		ch := &c.schain
		ch.start(cap(c.sges))
		var terr error
		for i := start; i < c.sring.tail && !ch.full(); i++ {
			w, inline := c.sring.wr(i)
			dst, sges := ch.next()
			if terr = c.keys.Translate(dst, sges, w); terr != nil {
				break
			}
			if w.SendFlags&verbs.SendInline != 0 && len(inline) > 0 {
				if terr = c.fromCopy(dst, sges, i, inline); terr != nil {
					break
				}
			}
			ch.keep()
		}
		if len(ch.wrs) > 0 {
			n, err := c.bak.QP.PostSend(ch.wrs)
			c.stats.Replayed += n
			c.bakFrom = start + uint64(n)
			if err != nil {
				return fmt.Errorf("crossnic: replay WR %d on the backup QP: %w", ch.wrs[min(n, len(ch.wrs)-1)].WRID, err)
			}
		}
		if terr != nil {
			return terr
		}
	}
}

// HoldReplay keeps on the Conn, until ReleaseReplay, the WRs it would
// post on the backup: a rewind's replay, and what the application posts
// meanwhile. The handshake goes on (answers, announcements, receives
// moved). A caller answering several peers at once (the shim, when the
// notifications of many QPs arrive together) answers every one of them
// before the first replay loads the backup HCA, and on rdma_rxe the CPU
// the other answers need: otherwise each peer waits for the replays of
// the QPs answered before it.
func (c *Conn) HoldReplay() { c.replayHeld = true }

// ReplayHeld reports whether HoldReplay holds the replay.
func (c *Conn) ReplayHeld() bool { return c.replayHeld }

// ReleaseReplay posts, in order, what HoldReplay kept, if the sends are on
// the backup by now; a failure of the backup QP is handled as in a
// replay.
func (c *Conn) ReleaseReplay() {
	if !c.replayHeld {
		return
	}
	c.replayHeld = false
	if c.m.SQ != fsm.SQFallback && c.m.SQ != fsm.SQWaitSignaled {
		return // not on the backup (yet, or any more): nothing of it goes there now
	}
	if err := c.replayTail(); err != nil {
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: err.Error()}))
	}
}

// fromCopy points the inline WR w (ring index i) at a copy of inline,
// the payload recorded when it was posted, in the staging area (a
// provider reads inline data at post time from the address in the SGE;
// the registration makes the copy addressable on the backup). sges is
// the room for w's SGE list (at least one).
func (c *Conn) fromCopy(w *verbs.SendWR, sges []verbs.SGE, i uint64, inline []byte) error {
	if c.stage == nil {
		if err := c.stageInline(); err != nil {
			return err
		}
	}
	off := c.sring.inlineAt(i)
	copy(c.stageBuf[off:], inline)
	sges = append(sges[:0], verbs.SGE{Addr: c.stage.Addr() + uint64(off), Length: uint32(len(inline)), LKey: c.stage.LKey()})
	w.SGList = sges[:1]
	return nil
}

// stageInline makes the staging area, the size of the send ring's inline
// copies, on the backup device, the first time a replay needs it. Its
// memory comes from the backup PD's allocator when the PD has one: a real
// device registers only memory outside the Go heap (the ring's copies are
// on it).
func (c *Conn) stageInline() error {
	mr, buf, err := regBackup(c.bak.QP.PD(), len(c.sring.inline), verbs.AccessLocalWrite)
	if err != nil {
		return fmt.Errorf("crossnic: the inline copies' staging area: %w", err)
	}
	c.stage, c.stageBuf = mr, buf
	return nil
}

// surfaceHeld: the error reaches the application. While the default QP
// still holds every WR and every receive (the fault was caught before its
// flush) its own completions say what happened: first the one that showed
// the fault, if one did. Otherwise WRs no QP holds (recorded during the
// handshake, or held for a switch) complete here, the one the default QP
// failed with its error (RETRY_EXC_ERR, as plain verbs report it), the
// others with WR_FLUSH_ERR; and both QPs go to ERR so the WRs and
// receives they hold flush to the application too: the QP is dead in
// both directions, as a plain QP in error is, or the peer would go on
// sending into receives the application no longer posts (a default QP
// reset for a switch back may be healthy, and a surfaced Conn posts new
// receives there, not on the backup). A QP whose device died may never
// flush: what it holds completes from the rings (completeGone). Nothing
// is lost, nothing completes twice.
func (c *Conn) surfaceHeld() {
	fw, haveFW := c.faultWC, c.faultWCSet
	c.faultWCSet = false
	if haveFW && c.defHolds {
		c.retireWC(&c.def, &fw)
		c.ready = append(c.ready, fw)
	}
	if !c.defHolds {
		// The WRs no QP holds complete after those the backup holds,
		// which are older: once its completions (flushes, or none from
		// a dead device: completeGone) are all in (flushUnpostedDue).
		c.unpostedFW, c.unpostedHaveFW, c.unpostedDue = fw, haveFW, true
		if !c.recvsOnBak {
			c.offRecvs()
		}
	}
	if c.defHolds && !c.recvsOnBak {
		// Not moved to ERR (its completions say what happened): is its
		// device alive to make them?
		if !c.defDead {
			_, _, err := c.def.QP.Query(verbs.QPAttrState)
			c.defDead = errors.Is(err, verbs.EIO)
		}
	} else {
		c.backupToErr()
		if err := c.def.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); errors.Is(err, verbs.EIO) {
			c.defDead = true
		}
	}
	if c.defDead {
		c.completeGone(&c.def)
	}
	if c.bakDead {
		c.completeGone(&c.bak)
	}
	c.flushUnpostedDue()
}

// flushUnpostedDue completes the WRs no QP holds (flushUnposted) once the
// surfaced error made them due and the backup's older WRs all completed:
// the application sees its sends complete in posting order.
func (c *Conn) flushUnpostedDue() {
	if c.unpostedDue && (c.sring.head >= c.bakFrom || c.bakGone) {
		c.unpostedDue = false
		c.flushUnposted(c.unpostedFW, c.unpostedHaveFW)
	}
}

// flushUnposted completes with an error the recorded WRs no QP holds
// ([bakFrom, tail): recorded during the handshake, or held for a switch
// back) and forgets them. The first is the WR the default QP failed when
// nothing was replayed yet: it gets that error (fw), the others
// WR_FLUSH_ERR, as plain verbs report a QP that failed.
func (c *Conn) flushUnposted(fw verbs.WC, haveFW bool) {
	start := max(c.bakFrom, c.sring.head)
	for i := start; i < c.sring.tail; i++ {
		w, _ := c.sring.wr(i)
		st := verbs.WCWRFlushErr
		if haveFW && i == c.sring.head && fw.WRID == w.WRID {
			st = fw.Status
		}
		c.ready = append(c.ready, verbs.WC{WRID: w.WRID, Status: st, Opcode: verbs.WCOpcodeFor(w.Opcode), QPNum: c.defQPN})
	}
	c.sring.truncate(start)
	c.bakFrom = c.sring.tail
}

// offRecvs completes with WR_FLUSH_ERR the receives no QP holds: with the
// receive queue home, the default QP went to ERR (a probe or the peer's
// sends failed on it) and its flushes were hidden, waiting for the peer's
// notification to move the receives to the backup; the error surfaced
// instead. Those are the receives posted before its last reset, or all of
// them while it is still in ERR. What the default QP completed so far is
// collected first, its flushes still hidden.
func (c *Conn) offRecvs() {
	end := c.recvsOffEnd
	if c.defErr {
		end = c.rring.tail
	}
	if end <= c.rring.head {
		return
	}
	c.hideFlushes = true
	_ = c.drain(&c.def)
	c.hideFlushes = false
	for c.rring.head < end {
		id, _ := c.rring.headWRID()
		c.ready = append(c.ready, verbs.WC{WRID: id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: c.defQPN})
		_ = c.rring.Complete(false)
	}
	c.recvsOffEnd = 0
}

// backupToErr moves the backup QP to ERR (the error surfaced), so that
// what it holds flushes to the application.
func (c *Conn) backupToErr() {
	if !c.bakReady {
		return
	}
	if err := c.bak.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); errors.Is(err, verbs.EIO) {
		c.bakDead = true
	}
}

// refuse tells the peer that this side cannot fail over (its error
// surfaced), so that it surfaces at once instead of waiting for an
// answer.
func (c *Conn) refuse() { _ = c.sendCtrl(ctrlRefuse) }

// holds says which of the application's queues leg l holds: its sends
// (all outstanding ones on the default QP while defHolds; else, on the
// backup, those posted there: [head, bakFrom)) and its receives.
func (c *Conn) holds(l *Leg) (sends, recvs bool) {
	def := l == &c.def
	return def == c.defHolds, def != c.recvsOnBak
}

// sendEnd is where the sends leg l holds end in the ring.
func (c *Conn) sendEnd(l *Leg) uint64 {
	if l == &c.def {
		return c.sring.tail
	}
	return min(max(c.bakFrom, c.sring.head), c.sring.tail)
}

// retireWC retires from the rings the WR that a completion of leg l,
// about to reach the application, completes, so that no ring completes it
// again (completeGone); it reports whether the completion is of one the
// leg holds for the application. The opcode of an error completion is
// undefined: a leg with two CQs says the queue (drainCQ set the opcode);
// on one CQ the wr_id does, a send the leg holds first, else the oldest
// receive (receives complete in order). Where a send and a receive share
// the wr_id either may be retired: for a flush, all the application sees
// is the wr_id and the status.
func (c *Conn) retireWC(l *Leg, wc *verbs.WC) bool {
	sends, recvs := c.holds(l)
	if c.srq != nil {
		return c.retireSRQ(l, wc, sends)
	}
	if wc.Status == verbs.WCSuccess {
		switch {
		case isRecv(wc) && recvs && c.rring.Len() > 0:
			_ = c.rring.Complete(true)
		case !isRecv(wc) && sends:
			c.sring.completeSuccess(c.sendEnd(l))
		default:
			return false
		}
		return true
	}
	recvHead := func() bool {
		id, ok := c.rring.headWRID()
		return recvs && ok && id == wc.WRID
	}
	switch {
	case l.split() && isRecv(wc):
		if !recvHead() {
			return false
		}
	case l.split():
		return sends && c.sring.retireWRID(c.sendEnd(l), wc.WRID)
	case sends && c.sring.retireWRID(c.sendEnd(l), wc.WRID):
		return true
	case !recvHead():
		return false
	}
	_ = c.rring.Complete(false)
	return true
}

// retireSRQ is retireWC on a QP of an SRQ: its receives are the
// group's. An error completion is of a send the leg holds when its wr_id
// says so (on a leg with two CQs, the CQ says), else of a receive.
func (c *Conn) retireSRQ(l *Leg, wc *verbs.WC, sends bool) bool {
	if wc.Status == verbs.WCSuccess {
		if isRecv(wc) {
			return c.srqRecvDone(wc)
		}
		if !sends {
			return false
		}
		c.sring.completeSuccess(c.sendEnd(l))
		return true
	}
	if !(l.split() && isRecv(wc)) && sends && c.sring.retireWRID(c.sendEnd(l), wc.WRID) {
		return true
	}
	if l.split() && !isRecv(wc) {
		return false
	}
	return c.srqRecvDone(wc)
}

// srqRecvDone retires from the group the SRQ receive a completion of
// this QP names; a successful one counts towards this QP's receive
// counter (the handshake's).
func (c *Conn) srqRecvDone(wc *verbs.WC) bool {
	if !c.srq.completed(wc.WRID) {
		return false
	}
	if wc.Status == verbs.WCSuccess {
		c.rring.completed++
	}
	return true
}

// defDied: the default device is dead (DEVICE_FATAL, or a verb refused
// with EIO). Once the error surfaced, what its QP held completes from the
// rings.
func (c *Conn) defDied() {
	c.defDead = true
	if c.m.SQ == fsm.SQSurfaced {
		c.completeGone(&c.def)
	}
}

// completeGone: leg l's device died after the error surfaced. A dead
// device may make no completion for the WRs its QP held (a ConnectX after
// a fatal error writes none to user CQs; rdmavt flushes them): what it did
// complete is collected first, then every WR it still holds for the
// application completes here with WR_FLUSH_ERR, in posting order, as a
// flush of the QP would have, and whatever it reports later is hidden.
func (c *Conn) completeGone(l *Leg) {
	gone := &c.defGone
	if l == &c.bak {
		gone = &c.bakGone
	}
	if *gone || l.QP == nil || c.laneOut {
		return // (after Lane the rings do not know what the QPs hold)
	}
	sends, recvs := c.holds(l)
	if sends || recvs {
		_ = c.drain(l)
	}
	*gone = true
	if sends {
		end := c.sendEnd(l)
		for i := c.sring.head; i < end; i++ {
			w, _ := c.sring.wr(i)
			c.ready = append(c.ready, verbs.WC{WRID: w.WRID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCOpcodeFor(w.Opcode), QPNum: c.defQPN})
		}
		c.sring.retire(end)
	}
	if recvs {
		c.rring.Outstanding(func(w *verbs.RecvWR) bool {
			c.ready = append(c.ready, verbs.WC{WRID: w.WRID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: c.defQPN})
			return true
		})
		for c.rring.Len() > 0 {
			_ = c.rring.Complete(false)
		}
	}
}
