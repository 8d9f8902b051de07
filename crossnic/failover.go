package crossnic

import (
	"fmt"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// fault starts a failover from the Default state.
func (c *Conn) fault(reason string) {
	c.stats.Faults++
	if c.hs != nil {
		c.faultAt = c.hs.clock.Now()
	}
	if c.bakReady && !c.bakCtrl {
		// A second fault before the backup was purged after a switch
		// back: the peer's answer would consume one of the application's
		// receives there, or a stale one. The error surfaces instead.
		reason = "the backup QP is not purged since the last switch back: " + reason
	}
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFault, ReplaySafe: !c.sring.AtomicOutstanding(),
		BackupReady: c.bakReady && c.bakCtrl, Reason: reason}))
}

// act performs the machine's actions in order.
func (c *Conn) act(acts []fsm.CNAction) {
	for _, a := range acts {
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
			err = c.rewind(a.PeerRecv)
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
	// The sends were all on the default QP (after a switch back too: its
	// fence drained the backup), so none is on the backup now: if the
	// error surfaces before the replay, every outstanding WR is flushed
	// to the application here (surfaceHeld), none is left waiting for a
	// flush the backup will never give.
	c.bakFrom = c.sring.head
	// A dead device refuses the modify (EIO); its QPs flushed already.
	_ = c.def.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
	_ = c.drain(&c.def)
}

// repostRecvs moves the outstanding receives to the backup QP, after the
// control receive already there.
func (c *Conn) repostRecvs() error {
	var err error
	c.rring.Outstanding(func(w *verbs.RecvWR) bool {
		if err = c.postRecvBackup(w); err != nil {
			return false
		}
		c.stats.RecvsMoved++
		return true
	})
	return err
}

// sendCtrl sends a notification or acknowledgement carrying the receive
// counter to the peer's backup QP.
func (c *Conn) sendCtrl(k ctrlKind) error {
	_ = c.drain(&c.def) // the counter must include every receive already completed
	_, err := c.bak.QP.PostSend([]verbs.SendWR{{WRID: ctrlSendWRID, Opcode: verbs.WRRDMAWriteWithImm,
		ImmData: encodeCtrl(k, c.rring.Completed())}})
	if err != nil {
		return fmt.Errorf("crossnic: send control message on the backup QP: %w", err)
	}
	return nil
}

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
	return c.replayTail()
}

// replayTail posts on the backup every recorded WR not posted there yet.
// An inline WR is sent from the copy taken when it was posted, not from
// the application's memory, which it may have reused since.
func (c *Conn) replayTail() error {
	start := max(c.bakFrom, c.sring.head)
	for i := start; i < c.sring.tail; i++ {
		w, inline := c.sring.wr(i)
		if err := c.keys.Translate(&c.one[0], c.sges, w); err != nil {
			return err
		}
		if w.SendFlags&verbs.SendInline != 0 && len(inline) > 0 {
			if err := c.fromCopy(&c.one[0], i, inline); err != nil {
				return err
			}
		}
		if _, err := c.bak.QP.PostSend(c.one[:]); err != nil {
			return fmt.Errorf("crossnic: replay WR %d on the backup QP: %w", w.WRID, err)
		}
		c.stats.Replayed++
		c.bakFrom = i + 1
	}
	return nil
}

// fromCopy points the inline WR w (ring index i) at a copy of inline,
// the payload recorded when it was posted, in the staging area (a
// provider reads inline data at post time from the address in the SGE;
// the registration makes the copy addressable on the backup).
func (c *Conn) fromCopy(w *verbs.SendWR, i uint64, inline []byte) error {
	if c.stage == nil {
		if err := c.stageInline(); err != nil {
			return err
		}
	}
	off := c.sring.inlineAt(i)
	copy(c.stageBuf[off:], inline)
	c.sges = append(c.sges[:0], verbs.SGE{Addr: c.stage.Addr() + uint64(off), Length: uint32(len(inline)), LKey: c.stage.LKey()})
	w.SGList = c.sges[:1]
	return nil
}

// stageInline makes the staging area, the size of the send ring's inline
// copies, on the backup device, the first time a replay needs it. Its
// memory comes from the backup PD's allocator when the PD has one: a real
// device registers only memory outside the Go heap (the ring's copies are
// on it).
func (c *Conn) stageInline() error {
	pd := c.bak.QP.PD()
	n := len(c.sring.inline)
	buf := []byte(nil)
	a, alloc := pd.(verbs.MemAllocator)
	if alloc {
		b, err := a.AllocMem(n)
		if err != nil {
			return fmt.Errorf("crossnic: allocate the inline copies' staging area on the backup: %w", err)
		}
		buf = b
	} else {
		buf = make([]byte, n)
	}
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		if alloc {
			_ = a.FreeMem(buf)
		}
		return fmt.Errorf("crossnic: register the inline copies on the backup: %w", err)
	}
	c.stage, c.stageBuf = mr, buf
	return nil
}

// surfaceHeld: the error reaches the application. While the default QP
// still holds every WR and every receive (the fault was caught before its
// flush) its own completions say what happened. Otherwise WRs no QP holds
// (recorded during the handshake, or held for a switch) complete with
// WR_FLUSH_ERR here, and both QPs go to ERR so the WRs and receives they
// hold flush to the application too: the QP is dead in both directions,
// as a plain QP in error is, or the peer would go on sending into
// receives the application no longer posts (a default QP reset for a
// switch back may be healthy, and a surfaced Conn posts new receives
// there, not on the backup). Nothing is lost, nothing completes twice.
func (c *Conn) surfaceHeld() {
	if c.defHolds && c.m.RQ != fsm.RQFallback {
		return
	}
	if !c.defHolds {
		for i := max(c.bakFrom, c.sring.head); i < c.sring.tail; i++ {
			w, _ := c.sring.wr(i)
			c.ready = append(c.ready, verbs.WC{WRID: w.WRID, Status: verbs.WCWRFlushErr, QPNum: c.defQPN})
		}
		c.bakFrom = c.sring.tail
	}
	if c.bakReady {
		_ = c.bak.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
	}
	_ = c.def.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
}
