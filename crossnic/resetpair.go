package crossnic

import (
	"fmt"

	"github.com/ibpath/ibpath/fsm"
)

// A reset of the default QP without a handshake (a probe failed while
// this side's sends run on the backup) is paired through the mailbox:
// both ends reset their default QPs and connect them with send PSNs drawn
// for it, so that no packet sent before the reset is taken after it
// (docs/CROSSNIC.md, "Reset PSNs"). The side whose QP failed resets it to
// INIT, draws its PSN and writes it to the peer as an announcement
// (askReset); the peer moves its own default QP to ERR, resets it, draws
// its PSN, connects with the two, and answers with an announcement of its
// own (flag mboxAnswer), which connects the asking side. Two requests
// that cross are each the other's answer.
//
// A QP that carries the peer's sends (they came home onto it) is paired
// too: the request says so (flag mboxTookNotify), and the peer, whose
// sends lost their QP, fails over through the mailbox instead of
// answering; that handshake's announcements connect both ends. (Carrying
// the two streams on instead let a packet sent before the reset be taken
// after it.)

// pairedReset reports whether the reset of the default QP about to be
// done is paired: it was connected since the last handshake or paired
// reset, or its connect was put off. Otherwise it was never connected
// with the PSNs announced last, and is connected with them (or waits in
// INIT for the peer's, a handshake under way).
//
// A Conn with recovery has a mailbox at both ends (EnableRecovery), and
// resets its default QP only on the backup (SQFallback), after a
// handshake the peer answered: the peer has a Conn, which reads its
// inbox.
//
// A connect put off (defLate: this side's port was down when the
// handshake's announcement came) is paired because the peer's QP may
// have run the announced PSNs meanwhile and been reset since (its probe
// timed out): connected with them late, this side's QP took a copy of
// the peer's probe, sent by the incarnation that had ended, by its PSN
// alone (switch-back schedule 6177).
func (c *Conn) pairedReset() bool {
	return (c.defPaired || c.defLate) && c.peerPSNSet
}

// askReset draws this side's PSN for the paired reset of the default QP,
// now in INIT, and writes it to the peer's mailbox; the QP waits in INIT
// for the answer.
func (c *Conn) askReset() {
	c.newHandshakePSN()
	c.peerPSNSet, c.defPaired = false, false
	r := mboxRec{kind: ctrlAnnounce, psn: c.ownPSN}
	if c.m.RQ == fsm.RQDefault {
		r.flags = mboxTookNotify
	}
	if err := c.writeRecord(r); err != nil {
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: err.Error()}))
		return
	}
	c.mbox.resetAsk = c.mbox.seq
	c.stats.ResetsPaired++
}

// onMailboxAnnounce handles the peer's announcement through the mailbox:
// the answer to this side's request, or the peer's own request.
func (c *Conn) onMailboxAnnounce(r mboxRec) {
	if r.flags&mboxAnswer != 0 {
		if c.mbox.resetAsk == 0 || int32(r.seen-c.mbox.resetAsk) < 0 {
			return // the answer to a request this side no longer waits for
		}
		c.mbox.resetAsk = 0
		c.peerAnnounced(r.psn)
		return
	}
	if c.rec != nil && !c.pathUp() && r.flags&mboxTookNotify == 0 {
		switch c.m.SQ {
		case fsm.SQFallback, fsm.SQWaitSignaled, fsm.SQWaitDrained:
			// This side's default port is down: its QP could not be
			// connected. The request (or the crossing) is handled once
			// the port is back, and the asking side waits for it (one
			// whose probe timed out keeps it outstanding meanwhile,
			// instead of asking again every ProbeTimeout).
			c.mbox.deferred, c.mbox.deferredSet, c.mbox.deferredPath = r, true, true
			return
		}
	}
	asked := c.mbox.resetAsk != 0
	if asked {
		ask := c.mbox.resetAsk
		c.mbox.resetAsk = 0
		if int32(r.seen-ask) < 0 {
			// Both asked, neither having read the other's request:
			// the peer's is the answer to this side's, and this
			// side's the answer to the peer's.
			c.peerAnnounced(r.psn)
			return
		}
		// The peer handled this side's request and asks anew (its
		// probe failed too): its answer, in the same slot, went unread.
		// This side answers the new one (its QP waits in INIT).
	}
	if r.flags&mboxTookNotify != 0 && c.m.SQ == fsm.SQWaitNotify {
		// The peer took this side's switch-back notification (its ACK
		// is what did not come yet) and reset the QP the held WRs were
		// to go on: the switch back is lost after the notification, the
		// peer's receives home. The handshake through the mailbox sorts
		// out where they stand.
		why := "the peer took the switch-back notification and reset its default QP (its request through the mailbox)"
		if !c.switchLost(why) {
			c.Surface(fmt.Sprintf("%s: %v", why, ErrSwitchNotifyLost))
		}
		return
	}
	switch c.m.SQ {
	case fsm.SQSurfaced, fsm.SQAwaitAck:
		// Surfaced: nothing comes home. A handshake under way: its
		// announcements connect both ends' default QPs.
		return
	case fsm.SQDefault:
		// The peer reset the QP this side's sends came home onto (flag
		// mboxTookNotify; without it, the peer's flush before its reset
		// did not find this side's notification, which completed here):
		// the default path is lost under this side's sends, which fail
		// over, and the handshake's announcements connect both QPs.
		c.fault("the peer reset its default QP under this side's sends (its request through the mailbox)", nil)
		return
	}
	if c.rec == nil {
		return // (only a Conn with recovery resets its default QP)
	}
	if !c.peerPSNSet && !asked {
		// The announcement of the last handshake precedes the request
		// on the backup QP: it may wait in the CQ yet. (A side that
		// asked itself forgot the peer's PSN for the answer.)
		_ = c.drain(&c.bak)
		if c.m.SQ == fsm.SQSurfaced || c.m.SQ == fsm.SQAwaitAck {
			return
		}
		if !c.peerPSNSet {
			c.mbox.deferred, c.mbox.deferredSet, c.mbox.deferredPath = r, true, false // checkMailbox takes it up once it came
			return
		}
	}
	// Fallback, wait-signaled, wait-drained, wait-notify. In wait-notify
	// the switch-back notification posted on the default QP was not
	// taken: the peer's receives were not home when it reset its QP
	// (its flush before the reset would have found the notification),
	// and its QP took nothing since. The held WRs go to the backup.
	prior := c.m.SQ
	c.newHandshakePSN()
	c.peerPSNSet, c.defPaired = false, false
	c.peerFellBackAgain(prior) // ERR; a switch back under way fails over to the backup; the reset
	if c.m.SQ == fsm.SQSurfaced {
		return
	}
	c.peerAnnounced(r.psn)
	c.stats.ResetsPaired++
	if err := c.writeRecord(mboxRec{kind: ctrlAnnounce, flags: mboxAnswer, psn: c.ownPSN}); err != nil {
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: err.Error()}))
	}
}
