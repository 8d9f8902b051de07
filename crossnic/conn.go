package crossnic

import (
	"errors"
	"fmt"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// Leg is one QP of a protected connection with the CQ it completes into:
// CQ for both its queues, or, when RecvCQ is set and differs, CQ for its
// send queue and RecvCQ for its receive queue. The opcode of an error
// completion is undefined in verbs; on a leg with two CQs the Conn gives
// error completions polled from RecvCQ the opcode WCRecv and those from
// CQ a send opcode, so a caller can route the Conn's output by opcode.
type Leg struct {
	Ctx    verbs.Context
	QP     verbs.QP
	CQ     verbs.CQ
	RecvCQ verbs.CQ
}

// split reports whether the leg's queues complete into two CQs.
func (l *Leg) split() bool { return l.RecvCQ != nil && l.RecvCQ != l.CQ }

// Conn is one protected RC QP as the application sees it: its WRs go to the
// default leg while it is healthy and, after a fault, are replayed and
// continued on the backup leg (another HCA of the same host, connected to
// the peer's backup QP). It is driven by the application's own calls
// (PostSend, PostRecv, Poll) and by HandleEvent; it starts no goroutines
// and is not safe for concurrent use.
//
// The application sees only what plain verbs would have shown without the
// fault: every signaled WR completes exactly once, in posting order, with
// the default QP's number; flush errors of WRs that are replayed never
// reach it. When replay is impossible (an atomic outstanding, no backup,
// the backup failing too) or the error is the application's own (one any
// path would report again: errorIsFault), errors reach it exactly as
// verbs report them, and every WR and receive it posted completes once,
// from the Conn's rings where a dead HCA completes nothing more.
type Conn struct {
	m         fsm.CrossNIC
	def, bak  Leg
	defQPN    uint32
	peerQPN   uint32
	keys      *KeyMap
	sring     *SendRing
	rring     *RecvRing
	ready     []verbs.WC  // completions due to the application, in order
	buf       []verbs.WC  // one poll's batch
	pend      []pendingWC // polled, not handled yet, in poll order (see handlePending)
	pendHead  int         // the first not handled
	pendDepth int         // handlePending calls under way (nested drains)
	sges      []verbs.SGE
	one       [1]verbs.SendWR // a single WR to post, without allocating
	ctrl      [2]verbs.SendWR // a control message and its follower (sendCtrl)
	schain    sendChain       // a replay's or a release's chain (chain.go)
	rchain    recvChain       // the chain of receives moved to the backup
	bakFrom   uint64          // ring WRs posted on the backup start here
	// replayHeld: WRs due on the backup wait for ReleaseReplay
	replayHeld bool
	bakReady   bool
	// bakCtrl: the backup QP's control receives are still at the head of
	// its receive queue (posted before the first fault or at the last
	// purge, none consumed since). A fallback handshake is started only
	// then: the peer's answer and announcement consume those receives,
	// never one of the application's.
	bakCtrl  bool
	defHolds bool // the default QP holds the outstanding WRs (not flushed by us)
	// defDead: the default device is known dead (DEVICE_FATAL, or a verb
	// refused with EIO); bakDead the same of the backup's. A dead device
	// may never complete what its QP held: a ConnectX after a fatal error
	// writes no completion to user CQs (completeGone).
	defDead, bakDead bool
	// defGone, bakGone: that leg's device died after the error surfaced,
	// and the WRs its QP held completed from the rings (completeGone):
	// whatever it reports later was completed already and is hidden.
	defGone, bakGone bool
	// faultWC is the error completion of the default QP that started the
	// current fault (when faultWCSet): the status the application gets
	// for that WR if the error surfaces before anything was replayed.
	faultWC    verbs.WC
	faultWCSet bool
	// recvsOffEnd: the receives before it in the receive ring (from its
	// head) were on a default QP that went to ERR before its last reset
	// while the receive queue was home, their flushes hidden, or that a
	// reset which then failed discarded (the peer's notification moves
	// them to the backup, a later reset posts them again); surfacing
	// completes them (offRecvs).
	recvsOffEnd uint64
	hideFlushes bool // the default QP's errors in a drain are of WRs completed otherwise: hidden
	// recvsOnBak: the outstanding receives are posted on the backup QP
	// (they moved there), not the default; the machine's receive state
	// says so a step before the move is done.
	recvsOnBak bool
	laneOut    bool // its traffic was handed to another data path (Lane)
	// srq: the QP receives through the application's SRQ, which the
	// group protects (srq.go); the receive ring then only counts this
	// QP's receives. srqAnn: the peer's announcement is the next message
	// on the backup QP (it follows a notification or acknowledgement).
	srq      *SRQGroup
	srqAnn   bool
	stats    ConnStats
	read     MemReader // copies inline payloads of WRs posted through the Conn
	stage    verbs.MR  // the staging area of replayed inline copies, registered on the backup
	stageBuf []byte    // its memory (from the backup PD's allocator when it has one)

	// hs bounds the fallback handshake (BoundHandshake, or recovery's)
	hs *handshakeBound
	// recovery (switch back); nil rec: traffic stays on the backup
	rec       *Recovery
	defAttr   verbs.QPAttr
	bakAttr   verbs.QPAttr
	defUsable bool
	probing   bool
	probesOut int   // probes posted on the default QP and not completed (0 or 1)
	roomHeld  bool  // holds its share of Recovery.Room
	defErr    bool  // the default QP completed a WR in error, or the Conn moved it to ERR, since its last reset
	purgeErr  error // why the last purge of the backup failed (retried)
	nextPurge time.Duration
	nextProbe time.Duration
	faultAt   time.Duration
	// notifyWaits: HandshakeTimeouts the outstanding switch-back
	// notification has been waited for (see Tick)
	notifyWaits int
	fenceIdx    uint64
	holdFrom    uint64
	holdAt      time.Duration
	bakDirty    bool // stale receives wait on the backup QP
	// collecting: the receives are moving home and the backup's last
	// data completions are being collected (repostRecvsDefault)
	collecting bool
	// peerSent: the receive-consuming sends the peer had completed when it
	// switched its sends home (its switch-back notification says): the
	// receive counter the collecting drain stops at
	peerSent uint64
	resetErr error
	// ownPSN is the send PSN this side drew at its last fallback
	// handshake and announced to the peer; peerPSN the peer's (when
	// peerPSNSet: its announcement arrived since). Every reset of the
	// default QP until the next handshake, and the purge of the backup,
	// connect with them: send PSN ownPSN, receive PSN peerPSN.
	ownPSN, peerPSN uint32
	psnSrc          func() uint32 // SetPSNSource (nil: crypto/rand)
	peerPSNSet      bool
	// annOwed: this side's notification went out and its announcement
	// waits for the peer's answer (announceOwed)
	annOwed bool
	// defPaired: the default QP was connected with ownPSN and peerPSN
	// (its responder at least: RTR) since the last handshake or paired
	// reset, so that its next reset takes fresh PSNs (pairedReset)
	defPaired bool
	// defLate: a reset of the default QP was put off (its port down), so
	// its connect comes late, after the peer's QP may have run the same
	// PSNs and been reset since (pairedReset pairs it)
	defLate bool
	// defInit: the default QP is reset and waits in INIT (its control
	// receive posted) for the peer's announcement before RTR
	defInit  bool
	probeErr error         // why the last probe failed
	probeAt  time.Duration // when the outstanding probe was posted
	// timeoutAsks: the paired resets asked for timed-out probes since a
	// probe was last answered, the last at askedAt (probeTimedOut backs
	// off)
	timeoutAsks int
	askedAt     time.Duration
	// unposted*: the error surfaced with WRs no QP holds; they complete
	// once the backup's older ones did (flushUnpostedDue)
	unpostedFW                  verbs.WC
	unpostedHaveFW, unpostedDue bool
	notifyAt                    time.Duration // when the switch-back notification was posted
	// notifyBound: how long one wait for the switch-back notification's
	// answer lasts (HandshakeTimeout, or the default QP's own give-up
	// time when longer: waitBound)
	notifyBound time.Duration
	// following: a follower held its sends on the backup after a probe
	// was answered (at followFrom; the last at probeOKAt), waiting for
	// the peer's sends to come home first (follow.go)
	following             bool
	followFrom, probeOKAt time.Duration
	// mbox: the control channel that consumes no receive (mailbox.go)
	mbox *mailbox
	// fillersOwed: zero-length SENDs the peer's answer through the
	// mailbox asked for, sent before the replay; fillersDue: those this
	// side asked the peer for, whose receive completions it hides
	fillersOwed uint32
	fillersDue  int
	// bakFence: a signaled zero-length WRITE posted on the backup
	// (postBakFence: behind the fillers, or behind the mailbox records
	// before a purge) has not completed yet; its completion says the
	// peer took everything posted before it
	bakFence bool
	// bakStale: the stale copies of receives at the head of the backup
	// QP's receive queue (moved home at the last switch back, not purged)
	bakStale int
	// resetHeld: the default QP is not reset while set (a step that
	// moves the receives off it is under way)
	resetHeld bool
}

// ConnStats counts what a Conn did.
type ConnStats struct {
	Faults        int
	Replayed      int // WRs posted on the backup: replayed at the handshake, or posted there since
	Delivered     int // outstanding WRs the peer's counter proved executed
	RecvsMoved    int // receive WRs reposted on the backup
	Synthesized   int // completions given for delivered signaled WRs
	HiddenFlushes int // default-QP flush completions kept from the application
	Probes        int
	SwitchBacks   int
	BackupResets  int
	ResetFailures int // resets of the default QP for a switch back that failed (retried)
	ProbeFailures int // probes of the default path that completed in error
	ResetsSkipped int // resets of the default QP not done: the peer's sends arrive on it
	// ResetsPaired counts the resets of the default QP without a
	// handshake that took fresh PSNs through the mailbox, on both ends:
	// those this side asked for (askReset) and those the peer's request
	// made (onMailboxAnnounce).
	ResetsPaired int
	// BackupCompletions counts the successful completions of application
	// WRs delivered from the backup leg (synthesized ones not included):
	// the first one ends "fault to first good completion on the backup".
	BackupCompletions int
	// SwitchPause is the virtual time application WRs were last held
	// during a switch back (from the fence to their release).
	SwitchPause time.Duration
	// FollowHolds counts probes answered while this side, switching
	// back second, waited for the peer's sends to come home (follow.go).
	FollowHolds int
	// MailboxHandshakes counts fallback handshakes carried by the
	// mailbox (mailbox.go): a second fault while only one direction of
	// a switch back was home.
	MailboxHandshakes int
	// Fillers counts the zero-length SENDs posted ahead of a replay for
	// the receives the peer's answer through the mailbox said precede
	// the ones it moved to its backup.
	Fillers int
	// The receive counters of the last switch back: Notified, the
	// receive-consuming sends this side had completed when its
	// notification went out (what it carried); PeerSent, what the
	// peer's carried; CollectedTo, this side's receive counter once the
	// backup's data completions were collected, before the receives
	// moved home (PeerSent unless a message was lost or taken twice).
	Notified, PeerSent, CollectedTo uint64
}

// NewConn protects def with bak. Both QPs must be connected (RTS) to the
// peer's default and backup QPs; keys translates the default HCA's keys to
// the backup's (local lkeys, and the peer's rkeys through a Directory).
// The backup QP needs a receive posted for the peer's control message
// before any fault, which may come before this side has a Conn: whoever
// connects the backup QP posts it with PostControlRecv (Shadow does when
// it connects one); NewConn does not post another.
func NewConn(def, bak Leg, keys *KeyMap, sqSigAll bool) (*Conn, error) {
	attr, init, err := def.QP.Query(verbs.QPAttrCap | verbs.QPAttrDestQPN)
	if err != nil {
		return nil, fmt.Errorf("crossnic: protect QP: %w", err)
	}
	return newConn(def, bak, keys, sqSigAll, init.Cap, attr.DestQPN)
}

// newConn is NewConn with the default QP's capabilities and remote QP
// number given (a dead device cannot be queried).
func newConn(def, bak Leg, keys *KeyMap, sqSigAll bool, qc verbs.QPCap, peerQPN uint32) (*Conn, error) {
	c := &Conn{def: def, bak: bak, defQPN: def.QP.QPN(), peerQPN: peerQPN, keys: keys, defHolds: true,
		buf: make([]verbs.WC, 64), sges: make([]verbs.SGE, 0, max(qc.MaxSendSGE, qc.MaxRecvSGE, 1)), mbox: &mailbox{}}
	var err error
	if c.sring, err = NewSendRing(qc, sqSigAll); err != nil {
		return nil, err
	}
	rc := qc
	rc.MaxRecvWR = max(rc.MaxRecvWR, 1) // a QP on an SRQ has no receive queue: the ring only counts
	if c.rring, err = NewRecvRing(rc); err != nil {
		return nil, err
	}
	c.bakReady = bak.QP != nil
	c.bakCtrl = c.bakReady // the caller posted it (PostControlRecv)
	return c, nil
}

// PostControlRecv posts on a backup QP the receives that the peer's
// control messages at a failover consume: its fallback notification (or
// acknowledgement) and the announcement of its starting PSN that follows
// it. Post them once, when the backup QP is connected and before any
// fault (the QP needs room for two receives beyond the application's); a
// Conn posts the next ones itself when it purges the backup after a
// switch back.
func PostControlRecv(bak verbs.QP) error {
	if err := postCtrlRecvs(bak, ctrlRecvs); err != nil {
		return fmt.Errorf("crossnic: post the control receives on backup QP %#x: %w", bak.QPN(), err)
	}
	return nil
}

// postCtrlRecvs posts n control receives on qp.
func postCtrlRecvs(qp verbs.QP, n int) error {
	var wrs [ctrlRecvs]verbs.RecvWR
	for i := range wrs[:n] {
		wrs[i].WRID = ctrlRecvWRID
	}
	_, err := qp.PostRecv(wrs[:n])
	return err
}

// MapLKey adds the backup lkey of a region registered after the Conn was
// built, so WRs using it can be replayed and posted on the backup.
func (c *Conn) MapLKey(defLKey, bakLKey uint32) {
	if c.keys.LKeys == nil {
		c.keys.LKeys = map[uint32]uint32{}
	}
	c.keys.LKeys[defLKey] = bakLKey
}

// Surface gives up protection, for a QP whose outstanding WRs the caller
// knows cannot be replayed: the error surfaces as plain verbs report it.
// From now on WRs go to the default QP and its completions reach the
// application as they are; a peer's fallback notification is refused, so
// the peer surfaces too instead of waiting for an answer.
func (c *Conn) Surface(reason string) {
	if c.m.SQ == fsm.SQSurfaced {
		return
	}
	// The machine has no event for a cause outside it; its final state is
	// set directly, as its own surfacing does.
	c.m.SQ, c.m.Reason = fsm.SQSurfaced, reason
	c.surfaceHeld()
}

// State returns the send- and receive-queue states.
func (c *Conn) State() (fsm.SQState, fsm.RQState) { return c.m.SQ, c.m.RQ }

// Reason says why the connection surfaced its error, if it did.
func (c *Conn) Reason() string { return c.m.Reason }

// Stats returns the counters.
func (c *Conn) Stats() ConnStats { return c.stats }

// PostSend posts send WRs: on the default QP in Default state, recorded
// for a rewind; on the backup QP, keys translated, in Fallback; recorded
// only while the fallback handshake is under way (they are replayed after
// it, in order). Errors the application caused (EINVAL, ENOMEM) return as
// from ibv_post_send; a post refused by a failed device starts a failover.
func (c *Conn) PostSend(wrs []verbs.SendWR) (int, error) {
	for i := range wrs {
		if err := c.postOne(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

func (c *Conn) postOne(wr *verbs.SendWR) error {
	if c.m.SQ != fsm.SQDefault && c.m.SQ != fsm.SQSurfaced && !Replayable(wr.Opcode) {
		// Away from the default QP, a WR naming the default device's keys
		// or state cannot be carried: the error surfaces, and the WR goes
		// where a surfaced Conn sends WRs.
		c.Surface(fmt.Sprintf("WR %d is a %v, which the backup QP cannot carry", wr.WRID, wr.Opcode))
	}
	switch c.m.SQ {
	case fsm.SQSurfaced:
		if !c.defHolds && c.sring.Len() > 0 && !c.laneOut {
			// Older sends are on the backup or on no QP, their
			// completions not all polled: on the default QP this one
			// would complete before them. It is recorded and flushes
			// after them, as on a plain QP in error (flushUnposted).
			if err := c.record(wr); err != nil {
				return err
			}
			if !c.unpostedDue {
				c.unpostedDue, c.unpostedHaveFW = true, false
			}
			return nil
		}
		_, err := c.post1(c.def.QP, wr)
		if errors.Is(err, verbs.EIO) {
			c.defDied()
		}
		return err
	case fsm.SQDefault:
		if c.sring.Len() >= len(c.sring.recs) {
			return verbs.Errorf("ibv_post_send", verbs.ENOMEM, "send queue full")
		}
		if err := c.record(wr); err != nil {
			return err
		}
		_, err := c.post1(c.def.QP, wr)
		if err == nil {
			return nil
		}
		c.sring.dropLast()
		if !errors.Is(err, verbs.EIO) {
			return err // the application's own mistake, as plain verbs report it
		}
		// The default device refused it: fail over, and the WR goes with
		// the others; if replay is impossible the post fails as it would
		// without ibpath.
		c.defDead = true
		c.fault(fmt.Sprintf("ibv_post_send on the default QP: %v", err), nil)
		if c.m.SQ == fsm.SQSurfaced {
			return err
		}
		return c.postOne(wr)
	case fsm.SQAwaitAck, fsm.SQWaitDrained, fsm.SQWaitNotify:
		return c.record(wr) // replayed, or released, later
	}
	// Fallback and WaitSignaled: on the backup.
	if err := c.record(wr); err != nil {
		return err
	}
	if err := c.replayTail(); err != nil {
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: err.Error()}))
		return nil
	}
	if c.m.SQ == fsm.SQWaitSignaled && (c.sring.sigAll || wr.SendFlags&verbs.SendSignaled != 0) {
		c.fencePosted()
	}
	return nil
}

// record copies a WR posted through the Conn into the send ring, its
// inline payload through the Conn's MemReader. Errors are those of
// ibv_post_send (nothing was posted).
func (c *Conn) record(wr *verbs.SendWR) error {
	if wr.SendFlags&verbs.SendInline != 0 && c.read == nil && sgeBytes(wr.SGList) > 0 {
		return verbs.Errorf("ibv_post_send", verbs.EINVAL, "inline WR %d: no memory reader to copy its payload for a replay", wr.WRID)
	}
	err := c.sring.Record(wr, c.read)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrRingFull):
		return verbs.Errorf("ibv_post_send", verbs.ENOMEM, "send queue full")
	}
	return verbs.Errorf("ibv_post_send", verbs.EINVAL, "%v", err)
}

// SetMemReader gives the Conn the reader of local memory through which it
// copies the inline payload of each IBV_SEND_INLINE WR posted through it
// (a replay sends the copy: the application may reuse the memory as soon
// as the post returns). Without one, such WRs are refused with EINVAL.
func (c *Conn) SetMemReader(read MemReader) { c.read = read }

// Close releases what the Conn registered on the backup device, and its
// share of Recovery.Room. The QPs and CQs of its legs are the caller's.
func (c *Conn) Close() error {
	if c.roomHeld {
		c.rec.Room.Give()
		c.roomHeld = false
	}
	merr := c.closeMailbox()
	if merr != nil {
		merr = fmt.Errorf("crossnic: release the mailbox: %w", merr)
	}
	if c.stage == nil {
		return merr
	}
	mr, buf := c.stage, c.stageBuf
	c.stage, c.stageBuf = nil, nil
	if err := deregBackup(mr, buf); err != nil {
		return errors.Join(merr, fmt.Errorf("crossnic: release the inline copies' staging area: %w", err))
	}
	return merr
}

// regBackup registers n bytes on the backup PD pd with access: memory
// from the PD's allocator when it has one (a real device registers only
// memory outside the Go heap), else from the Go heap.
func regBackup(pd verbs.PD, n int, access verbs.AccessFlags) (verbs.MR, []byte, error) {
	a, alloc := pd.(verbs.MemAllocator)
	var buf []byte
	if alloc {
		b, err := a.AllocMem(n)
		if err != nil {
			return nil, nil, fmt.Errorf("allocate %d bytes on the backup: %w", n, err)
		}
		buf = b
	} else {
		buf = make([]byte, n)
	}
	mr, err := pd.RegMR(buf, access)
	if err != nil {
		if alloc {
			_ = a.FreeMem(buf)
		}
		return nil, nil, fmt.Errorf("register %d bytes on the backup: %w", n, err)
	}
	return mr, buf, nil
}

// deregBackup releases what regBackup made.
func deregBackup(mr verbs.MR, buf []byte) error {
	pd := mr.PD()
	if err := mr.Dereg(); err != nil {
		return fmt.Errorf("deregister: %w", err)
	}
	if a, ok := pd.(verbs.MemAllocator); ok {
		if err := a.FreeMem(buf); err != nil {
			return fmt.Errorf("free: %w", err)
		}
	}
	return nil
}

// post1 posts one WR through the Conn's own one-element array.
func (c *Conn) post1(qp verbs.QP, wr *verbs.SendWR) (int, error) {
	c.one[0] = *wr
	return qp.PostSend(c.one[:])
}

// PostRecv posts receive WRs on the queue's current QP, recorded so they
// can move at a failover.
func (c *Conn) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if c.srq != nil {
		// the QP has no receive queue: the provider refuses, as without ibpath
		return c.def.QP.PostRecv(wrs)
	}
	for i := range wrs {
		if c.m.SQ == fsm.SQSurfaced {
			if err := c.postRecvSurfaced(&wrs[i]); err != nil {
				return i, err
			}
			continue
		}
		if err := c.recordRecv(&wrs[i]); err != nil {
			return i, err
		}
		var err error
		switch {
		case c.m.RQ == fsm.RQFallback:
			err = c.postRecvBackup(&wrs[i])
		case c.recvsOffEnd != 0 && !c.recvsOnBak:
			// The older receives are on no QP (a failed default QP's
			// flushes hidden, or a reset that failed discarded them):
			// this one joins them, to move where they go.
			c.recvsOffEnd = c.rring.tail
		default:
			_, err = c.def.QP.PostRecv(wrs[i : i+1])
			if errors.Is(err, verbs.EIO) {
				c.defDead = true
				err = nil // the default died: the receive moves with the others
			}
		}
		if err != nil {
			c.rring.dropLast() // not posted: the application was told
			return i, err
		}
	}
	return len(wrs), nil
}

// postRecvSurfaced posts a receive after the error surfaced. On a plain
// QP in error receives flush in posting order; older ones may still be on
// the backup, their flushes not polled yet. The new one then goes there
// too, recorded, so that its flush follows theirs (on the default QP it
// would overtake them). Otherwise it goes to the default QP, which holds
// any older ones, as plain verbs would post it. After Lane the rings do
// not know what the QPs hold: it passes through.
func (c *Conn) postRecvSurfaced(w *verbs.RecvWR) error {
	if c.recvsOnBak && c.rring.Len() > 0 && c.bakReady && !c.bakGone && !c.laneOut {
		if err := c.recordRecv(w); err != nil {
			return err
		}
		err := c.postRecvBackup(w)
		if err == nil {
			return nil
		}
		c.rring.dropLast() // the backup refused it (its device died): the default QP flushes it
	}
	_, err := c.def.QP.PostRecv([]verbs.RecvWR{*w})
	if errors.Is(err, verbs.EIO) {
		c.defDied()
	}
	return err
}

// recordRecv copies a receive posted through the Conn into the receive
// ring. Errors are those of ibv_post_recv (nothing was posted).
func (c *Conn) recordRecv(w *verbs.RecvWR) error {
	err := c.rring.Record(w)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrRingFull):
		return verbs.Errorf("ibv_post_recv", verbs.ENOMEM, "receive queue full")
	}
	return verbs.Errorf("ibv_post_recv", verbs.EINVAL, "%v", err)
}

func (c *Conn) postRecvBackup(w *verbs.RecvWR) error {
	r, err := c.keys.TranslateRecv(c.sges, w)
	if err != nil {
		return err
	}
	_, err = c.bak.QP.PostRecv([]verbs.RecvWR{r})
	return err
}
