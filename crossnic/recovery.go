package crossnic

import (
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
	// (default 1 s); past it the error surfaces.
	HandshakeTimeout time.Duration
}

// EnableRecovery turns on switching back: after a failover the default QP
// is reset and probed; when a probe succeeds, the next signaled WR becomes
// the fence on the backup QP, later WRs wait, and once the fence completed
// a notification on the default QP tells the peer to move its receives
// home before the held WRs are released there. A default QP whose device
// died cannot be reset: traffic then stays on the backup. The QP's connect
// attributes are taken from ibv_query_qp now (the simulator reports the
// initial PSNs; on hardware the shim keeps those of the application's own
// modifies instead).
func (c *Conn) EnableRecovery(r Recovery) error {
	if r.Clock == nil {
		return fmt.Errorf("crossnic: enable recovery: a clock is required")
	}
	if r.ProbeInterval <= 0 {
		r.ProbeInterval = 10 * time.Millisecond
	}
	if r.HandshakeTimeout <= 0 {
		r.HandshakeTimeout = time.Second
	}
	var err error
	if c.defAttr, _, err = c.def.QP.Query(verbs.QPAttrAV); err != nil {
		return fmt.Errorf("crossnic: enable recovery: query the default QP: %w", err)
	}
	if c.bakAttr, _, err = c.bak.QP.Query(verbs.QPAttrAV); err != nil {
		return fmt.Errorf("crossnic: enable recovery: query the backup QP: %w", err)
	}
	c.rec = &r
	return nil
}

// Tick does the timed work of recovery: probing the default QP and giving
// up on a handshake the peer never answers. Call it regularly (at least
// every ProbeInterval) once recovery is enabled.
func (c *Conn) Tick() {
	if c.rec == nil {
		return
	}
	now := c.rec.Clock.Now()
	switch c.m.SQ {
	case fsm.SQAwaitAck:
		if now-c.faultAt > c.rec.HandshakeTimeout {
			c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: "the peer did not answer the fallback notification"}))
		}
	case fsm.SQWaitSignaled:
		c.switchIfIdle()
	case fsm.SQFallback:
		if c.defUsable && !c.probing && now >= c.nextProbe {
			_, err := c.def.QP.PostSend([]verbs.SendWR{{WRID: probeWRID, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled}})
			if err == nil {
				c.probing = true
				c.stats.Probes++
			} else {
				c.nextProbe = now + c.rec.ProbeInterval
			}
		}
	}
	c.purgeBackup()
}

// resetQP takes a QP through RESET, INIT, RTR and RTS with its connect
// attributes (REMOTE_WRITE added: probes and notifications are zero-length
// WRITEs), and posts the control receive first on its empty queue.
func resetQP(qp verbs.QP, a verbs.QPAttr) error {
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState},
		{verbs.QPAttr{QPState: verbs.QPSInit, PKeyIndex: a.PKeyIndex, PortNum: a.PortNum,
			QPAccessFlags: a.QPAccessFlags | verbs.AccessRemoteWrite},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: a.AHAttr, PathMTU: a.PathMTU, DestQPN: a.DestQPN, RQPSN: a.RQPSN,
			MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: a.SQPSN, Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
			MaxRdAtomic: a.MaxRdAtomic},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
				verbs.QPAttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("reset QP %#x to %v: %w", qp.QPN(), s.attr.QPState, err)
		}
	}
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: ctrlRecvWRID}}); err != nil {
		return fmt.Errorf("post the control receive on QP %#x: %w", qp.QPN(), err)
	}
	return nil
}

// resetDefault makes the failed default QP usable again and schedules a
// probe. A device that died cannot be reset: traffic stays on the backup.
func (c *Conn) resetDefault() {
	if c.rec == nil {
		return
	}
	_ = c.drain(&c.def)
	c.probing = false
	if err := resetQP(c.def.QP, c.defAttr); err != nil {
		c.defUsable = false
		return
	}
	c.defUsable = true
	c.nextProbe = c.rec.Clock.Now() + c.rec.ProbeInterval
}

// switchIfIdle: with nothing outstanding on the backup there is nothing to
// fence, so a direction whose application posts nothing switches back
// without waiting for a signaled WR that may never come.
func (c *Conn) switchIfIdle() {
	if c.m.SQ != fsm.SQWaitSignaled || c.sring.Len() != 0 {
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

// releaseNotify tells the peer, on the default QP, that this side's sends
// are back there.
func (c *Conn) releaseNotify() error {
	_, err := c.def.QP.PostSend([]verbs.SendWR{{WRID: ctrlSwitchWRID, Opcode: verbs.WRRDMAWriteWithImm,
		SendFlags: verbs.SendSignaled, ImmData: encodeCtrl(ctrlSwitch, c.rring.Completed())}})
	if err != nil {
		return fmt.Errorf("crossnic: post the switch-back notification: %w", err)
	}
	return nil
}

// releaseHeld posts the held WRs on the default QP, in order.
func (c *Conn) releaseHeld() error {
	for i := max(c.holdFrom, c.sring.head); i < c.sring.tail; i++ {
		w, _ := c.sring.wr(i)
		if _, err := c.post1(c.def.QP, w); err != nil {
			return fmt.Errorf("crossnic: release WR %d on the default QP: %w", w.WRID, err)
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
// backup already produced are collected first, so no receive moves twice.
func (c *Conn) repostRecvsDefault() error {
	_ = c.drain(&c.bak)
	var err error
	c.rring.Outstanding(func(w *verbs.RecvWR) bool {
		_, err = c.def.QP.PostRecv([]verbs.RecvWR{*w})
		return err == nil
	})
	c.bakDirty = true
	return err
}

// purgeBackup resets the backup QP once both queues are home, so that no
// stale receive waits there for the next failover's notification.
func (c *Conn) purgeBackup() {
	if c.rec == nil || !c.bakDirty || c.m.SQ != fsm.SQDefault || c.m.RQ != fsm.RQDefault {
		return
	}
	_ = c.drain(&c.bak)
	if err := resetQP(c.bak.QP, c.bakAttr); err != nil {
		c.bakReady = false
		return
	}
	c.bakDirty = false
	c.stats.BackupResets++
}
