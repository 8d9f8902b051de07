package crossnic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// The mailbox is a control channel that consumes no receive: each side
// registers a small region on its backup device, and the peer writes its
// control records there with a plain RDMA WRITE on the backup QP, which
// executes at the responder without a receive or a completion. The owner
// reads its inbox when it polls (Poll, Tick). When both ends have one it
// carries every fallback handshake after a connection's first (which
// goes through the control receives: their completion wakes a peer
// with no Conn, a record wakes nothing), including where the
// receive-based one cannot: a second fault while one direction of a switch back is
// home and the other is not (the backup's receive queue holds the
// application's live receives on one side and stale copies on the
// other), and a switch-back notification whose fate is unknown
// (docs/CROSSNIC.md, "The mailbox").
//
// A record is 32 bytes, little endian:
//
//	0  version u8 (mboxVersion)
//	1  kind u8 (ctrlNotify, ctrlAck, ctrlRefuse, or ctrlAnnounce: a
//	   reset of the default QP paired through the mailbox, resetpair.go)
//	2  flags u8: mboxSwitchDone (notify): the writer's last switch-back
//	   notification completed, so the reader took it; mboxAnswer
//	   (announce): the announcement answers the reader's; mboxTookNotify
//	   (announce): the writer's receives were on the default QP it reset,
//	   where the reader's sends came home; mboxPrevOther (any): the
//	   writer's record seq-1 went to the other slot
//	3  reserved u8, zero
//	4  seq u32: the writer's record number, from 1
//	8  seen u32: the last seq of the reader's records the writer handled
//	12 psn u32: the writer's announced send PSN (notify, ack, announce)
//	16 counter u64: the writer's completed receives (notify, ack)
//	24 fillers u32: receives at the head of the writer's backup queue
//	   that precede the ones it moved there (ack): the reader sends that
//	   many zero-length SENDs first, and the writer hides their
//	   completions
//	28 crc u32: CRC-32C of bytes 0-27
//
// The region holds two slots of 64 bytes, each an inbox, where the peer
// writes, then an outbox, the source of this side's writes to the
// peer's inbox of the same slot. Slot 0 carries the handshake (notify,
// ack, refuse), slot 1 the announcements of paired resets
// (resetpair.go), so that neither kind overwrites a record of the other
// the reader has not read yet. (A peer whose region is slot 0 alone, an
// earlier version, refuses the write to slot 1 with a remote access
// error: the backup QP fails, and the error surfaces.) The seq numbers one sequence across the two slots: the
// reader handles what is new in them oldest first. A record whose crc
// does not match (a write torn by the read, or the peer's outbox
// rewritten while its HCA read it) is waited for until it is whole; one
// whose seq is not newer than the last handled is old.
const (
	mboxRecLen  = 32
	mboxSlots   = 2
	mboxLen     = 2 * mboxSlots * mboxRecLen
	mboxVersion = 2
	// mboxSwitchDone: the flag of a notification whose writer's sends
	// were home (its switch-back notification completed)
	mboxSwitchDone = 1
	// mboxAnswer: the flag of an announcement that answers the reader's
	// (a paired reset: resetpair.go)
	mboxAnswer = 2
	// mboxTookNotify: the flag of a request for a paired reset whose
	// writer had taken the reader's switch-back notification: the
	// reader's sends use the QP reset under them (resetpair.go)
	mboxTookNotify = 4
	// mboxPrevOther: the flag of a record whose predecessor (seq-1) went
	// to the other slot. A WRITE carries its outbox slot as it is when
	// the HCA reads it, not as it was when posted: a WRITE of slot 1
	// still queued behind the application's WRs when the writer rewrites
	// that outbox carries the newer record, ahead of a record of slot 0
	// posted between the two. The reader handles a record so flagged
	// only once the other slot holds seq-1 or later (checkMailbox).
	mboxPrevOther = 8
)

var mboxCRC = crc32.MakeTable(crc32.Castagnoli)

// Mailbox is where a side's peer writes its control records: the address
// and rkey of the inbox on the peer's backup device (Conn.OpenMailbox
// gives this side's, for the peer's SetPeerMailbox).
type Mailbox struct {
	Addr uint64
	RKey uint32
}

// mboxRec is one decoded record.
type mboxRec struct {
	kind    ctrlKind
	flags   uint8
	seq     uint32
	seen    uint32
	psn     uint32
	counter uint64
	fillers uint32
}

// encode writes r into b (mboxRecLen bytes).
func (r *mboxRec) encode(b []byte) {
	b[0], b[1], b[2], b[3] = mboxVersion, byte(r.kind), r.flags, 0
	binary.LittleEndian.PutUint32(b[4:], r.seq)
	binary.LittleEndian.PutUint32(b[8:], r.seen)
	binary.LittleEndian.PutUint32(b[12:], r.psn)
	binary.LittleEndian.PutUint64(b[16:], r.counter)
	binary.LittleEndian.PutUint32(b[24:], r.fillers)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], mboxCRC))
}

// errMboxTorn: the record's crc does not match (or nothing was written).
var errMboxTorn = errors.New("crossnic: mailbox record incomplete")

// decodeMboxRec decodes b (mboxRecLen bytes). A record that is not whole
// yet is errMboxTorn; one that is whole but no record of this version (a
// peer of another version, or memory someone else wrote) is another error.
func decodeMboxRec(b []byte) (mboxRec, error) {
	if binary.LittleEndian.Uint32(b[28:]) != crc32.Checksum(b[:28], mboxCRC) {
		return mboxRec{}, errMboxTorn
	}
	r := mboxRec{kind: ctrlKind(b[1]), flags: b[2], seq: binary.LittleEndian.Uint32(b[4:]), seen: binary.LittleEndian.Uint32(b[8:]),
		psn: binary.LittleEndian.Uint32(b[12:]), counter: binary.LittleEndian.Uint64(b[16:]), fillers: binary.LittleEndian.Uint32(b[24:])}
	switch {
	case b[0] != mboxVersion:
		return mboxRec{}, fmt.Errorf("crossnic: mailbox record of version %d (this side speaks %d)", b[0], mboxVersion)
	case b[2]&^(mboxSwitchDone|mboxAnswer|mboxTookNotify|mboxPrevOther) != 0 || b[3] != 0 || r.psn&^ctrlPSNMask != 0:
		return mboxRec{}, fmt.Errorf("crossnic: mailbox record with reserved bits set")
	case r.kind != ctrlNotify && r.kind != ctrlAck && r.kind != ctrlRefuse && r.kind != ctrlAnnounce:
		return mboxRec{}, fmt.Errorf("crossnic: mailbox record of kind %d", r.kind)
	case r.seq == 0:
		// a zeroed inbox has a matching crc only by chance; seq 0 is
		// never written
		return mboxRec{}, errMboxTorn
	}
	return r, nil
}

// mailbox is a Conn's side of the channel.
type mailbox struct {
	mr   verbs.MR
	buf  []byte // mboxLen bytes: per slot, the inbox then the outbox
	peer Mailbox
	// peerSet: SetPeerMailbox gave the peer's inbox
	peerSet bool
	// unfenced: a record was written since the last backup fence
	// (postBakFence) was posted: records are unsignaled, so nothing
	// else says the peer took it
	unfenced bool
	// seq: the last record this side wrote; seen: the last of the
	// peer's it handled
	seq, seen uint32
	// lastSlot: the slot record seq went to
	lastSlot int
	// via: the peer's notification being handled came through the
	// mailbox: the answer goes back the same way
	via bool
	// awaiting: this side's notification went through the mailbox and
	// waits for the answer to record seq
	awaiting bool
	// switchDone: this side's sends were home when it faulted (its
	// notification says so: mboxSwitchDone)
	switchDone bool
	// use: this side's notification of the current fault goes through
	// the mailbox (whenever it can: the control receives then take
	// fillers like any receive ahead of the moved ones)
	use bool
	// watched: the peer reads its inbox without being woken. A side
	// with no Conn (its QP never failed over, or was given back to the
	// application after a switch back) reads it only when the caller
	// asks (Shadow.MailboxPending); a record there wakes nothing. So a
	// first failover notifies through the control receives, whose
	// completion wakes the peer, and this side takes the peer for
	// watching once it had a handshake with it: the peer had a Conn
	// then, and keeps reading (the Conn's Poll and Tick, and after its
	// give-back the caller's MailboxPending).
	watched bool
	// in: where the inbox slots are read into; seqs: a slot's seq field
	// (kept here: a local array passed to verbs.DeviceMem would be
	// allocated on every poll)
	in   [mboxSlots * mboxRecLen]byte
	seqs [4]byte
	// resetAsk: this side's announcement of a paired reset (askReset)
	// is record resetAsk, and waits for the peer's
	resetAsk uint32
	// deferred: the peer's announcement of a paired reset, read before
	// the announcement of the last handshake it follows was, or while
	// this side's default port was down (onMailboxAnnounce)
	deferred    mboxRec
	deferredSet bool
	// deferredPath: deferred waits for the port, not the announcement
	deferredPath bool
	// owned: OpenMailbox made it, and Close releases it; the Shadow's
	// mailboxes outlive the Conns it builds (their seq and seen carry
	// on from one failover of the QP to the next)
	owned bool
}

// attach makes m, which a Conn of the same QP used before (or none
// did), this Conn's: what a failover left of the last handshake goes.
func (m *mailbox) attach() *mailbox {
	m.via, m.awaiting, m.switchDone, m.use = false, false, false, false
	m.resetAsk, m.deferredSet = 0, false
	return m
}

// OpenMailbox registers this side's mailbox on the backup device and
// returns its inbox, for the peer's SetPeerMailbox. With both inboxes
// known every fallback handshake after the first goes through the
// mailbox, and the purge
// of the backup carries its streams on; both ends must have one or
// neither (the purge's PSNs follow it). Without, the handshake goes
// through the control receives, and a second fault in the middle of a
// switch back surfaces the error. A QP on an SRQ has no use for it (the
// SRQ path does not take it). Calling it again returns the same inbox.
func (c *Conn) OpenMailbox() (Mailbox, error) {
	if c.mbox.mr != nil {
		return c.mbox.inbox(), nil
	}
	if c.bak.QP == nil {
		return Mailbox{}, fmt.Errorf("crossnic: open the mailbox: no backup QP")
	}
	m, err := newMailbox(c.bak.QP.PD())
	if err != nil {
		return Mailbox{}, fmt.Errorf("crossnic: open the mailbox: %w", err)
	}
	c.mbox.mr, c.mbox.buf, c.mbox.owned = m.mr, m.buf, true
	return c.mbox.inbox(), nil
}

// newMailbox registers a mailbox on the backup PD pd.
func newMailbox(pd verbs.PD) (*mailbox, error) {
	mr, buf, err := regBackup(pd, mboxLen, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return nil, err
	}
	return &mailbox{mr: mr, buf: buf}, nil
}

// inbox is where the peer writes to m.
func (m *mailbox) inbox() Mailbox { return Mailbox{Addr: m.mr.Addr(), RKey: m.mr.RKey()} }

// pending reports whether an inbox slot holds a record newer than the
// last handled (whole or not yet): one load per slot.
func (m *mailbox) pending() bool {
	if m.mr == nil {
		return false
	}
	for i := range mboxSlots {
		if m.newer(m.slotSeq(i)) {
			return true
		}
	}
	return false
}

// slotSeq loads the seq field of inbox slot i.
func (m *mailbox) slotSeq(i int) uint32 {
	m.load(m.seqs[:], inboxOff(i)+4)
	return binary.LittleEndian.Uint32(m.seqs[:])
}

// inboxOff and outboxOff are the offsets of slot i's inbox and outbox
// in the region.
func inboxOff(i int) int  { return 2 * i * mboxRecLen }
func outboxOff(i int) int { return inboxOff(i) + mboxRecLen }

// newer reports whether seq is after the last record handled.
func (m *mailbox) newer(seq uint32) bool { return int32(seq-m.seen) > 0 }

// predecessorMissing: r's predecessor (seq-1) went to the other slot
// (r's flag says so), is not handled yet, and that slot holds neither it
// nor a later record: r waits for it.
func (m *mailbox) predecessorMissing(r mboxRec) bool {
	return r.flags&mboxPrevOther != 0 && m.newer(r.seq-1) && int32(m.slotSeq(1-slot(r.kind))-(r.seq-1)) < 0
}

// slot is the inbox slot a record of kind k goes to.
func slot(k ctrlKind) int {
	if k == ctrlAnnounce {
		return 1
	}
	return 0
}

// load copies len(dst) bytes of the mailbox from offset off: through the
// region's verbs.DeviceMem when it has one (the simulator), else with
// plain loads, the device's view.
func (m *mailbox) load(dst []byte, off int) {
	if d, ok := m.mr.(verbs.DeviceMem); ok {
		d.LoadMem(dst, off)
		return
	}
	copy(dst, m.buf[off:])
}

// store copies src into the mailbox at offset off (load's counterpart).
func (m *mailbox) store(off int, src []byte) {
	if d, ok := m.mr.(verbs.DeviceMem); ok {
		d.StoreMem(off, src)
		return
	}
	copy(m.buf[off:], src)
}

// release deregisters m and frees its memory.
func (m *mailbox) release() error {
	mr, buf := m.mr, m.buf
	if mr == nil {
		return nil
	}
	m.mr, m.buf = nil, nil
	return deregBackup(mr, buf)
}

// SetPeerMailbox gives the peer's inbox (its OpenMailbox), to which this
// side writes its records.
func (c *Conn) SetPeerMailbox(m Mailbox) error {
	if m.Addr == 0 && m.RKey == 0 {
		return fmt.Errorf("crossnic: the peer's mailbox: no address")
	}
	c.mbox.peer, c.mbox.peerSet = m, true
	return nil
}

// Mailboxed reports whether the Conn's handshakes can go through the
// mailbox: both ends have one (the QP not on an SRQ). A QP given back
// after a switch back with one is notified of the peer's next fault
// there (Shadow.MailboxPending).
func (c *Conn) Mailboxed() bool { return c.mboxUsable() }

// mboxUsable reports whether the mailbox carries a handshake: both
// inboxes known, the QP not on an SRQ.
func (c *Conn) mboxUsable() bool {
	return c.mbox.mr != nil && c.mbox.peerSet && c.srq == nil
}

// writeRecord writes r (its seq and seen filled in here) to the peer's
// inbox with an RDMA WRITE on the backup QP.
func (c *Conn) writeRecord(r mboxRec) error {
	i := slot(r.kind)
	if c.mbox.seq != 0 && c.mbox.lastSlot != i {
		r.flags |= mboxPrevOther
	}
	// (a seq whose post failed is not reused: an earlier WRITE of the
	// slot may still carry it)
	c.mbox.seq++
	c.mbox.lastSlot = i
	r.seq, r.seen = c.mbox.seq, c.mbox.seen
	var out [mboxRecLen]byte
	r.encode(out[:])
	c.mbox.store(outboxOff(i), out[:])
	_, err := c.bak.QP.PostSend([]verbs.SendWR{{WRID: ctrlSendWRID, Opcode: verbs.WRRDMAWrite,
		SGList:     []verbs.SGE{{Addr: c.mbox.mr.Addr() + uint64(outboxOff(i)), Length: mboxRecLen, LKey: c.mbox.mr.LKey()}},
		RemoteAddr: c.mbox.peer.Addr + uint64(inboxOff(i)), RKey: c.mbox.peer.RKey}})
	if err != nil {
		return fmt.Errorf("crossnic: write the %v record to the peer's mailbox: %w", r.kind, err)
	}
	c.mbox.unfenced = true
	return nil
}

// checkMailbox handles a record the peer wrote since the last check.
func (c *Conn) checkMailbox() {
	if c.mbox.mr == nil {
		return
	}
	if c.mbox.deferredSet && (c.mbox.deferredPath && c.pathUp() || !c.mbox.deferredPath && c.peerPSNSet) {
		c.mbox.deferredSet = false
		c.onMailboxAnnounce(c.mbox.deferred)
	}
	if !c.mbox.pending() {
		return // nothing new (the common case: a load per slot)
	}
	in := c.mbox.in[:]
	for i := range mboxSlots {
		c.mbox.load(in[i*mboxRecLen:(i+1)*mboxRecLen], inboxOff(i))
	}
	var recs [mboxSlots]mboxRec
	n := 0 // recs[:n] are new, whole records
	for i := range mboxSlots {
		b := in[i*mboxRecLen : (i+1)*mboxRecLen]
		if !c.mbox.newer(binary.LittleEndian.Uint32(b[4:])) {
			continue // old, or never written
		}
		r, err := decodeMboxRec(b)
		if err == nil && slot(r.kind) != i {
			err = fmt.Errorf("crossnic: mailbox record of kind %d in slot %d", r.kind, i)
		}
		switch {
		case errors.Is(err, errMboxTorn):
			return // not whole yet: the next check sees it, before anything newer
		case err != nil:
			c.mbox.seen = binary.LittleEndian.Uint32(b[4:])
			if c.m.SQ != fsm.SQSurfaced {
				c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: err.Error()}))
			}
			return
		}
		recs[n] = r
		n++
	}
	if n == 2 && int32(recs[1].seq-recs[0].seq) < 0 {
		recs[0], recs[1] = recs[1], recs[0] // the older first
	}
	for _, r := range recs[:n] {
		if !c.mbox.newer(r.seq) {
			continue // handled already (by a check nested in the handling of the first)
		}
		if c.mbox.predecessorMissing(r) {
			return // its predecessor, in the other slot, has not landed yet: the next check
		}
		c.mbox.seen = r.seq
		c.mbox.watched = true // (it had a Conn to write this)
		c.onMailbox(r)
	}
}

// onMailbox handles the peer's record r.
func (c *Conn) onMailbox(r mboxRec) {
	switch r.kind {
	case ctrlNotify:
		c.onMailboxNotify(r)
	case ctrlAnnounce:
		c.onMailboxAnnounce(r)
	case ctrlAck, ctrlRefuse:
		if c.m.SQ != fsm.SQAwaitAck || !c.mbox.awaiting || r.seen != c.mbox.seq {
			return // the answer to a notification this side no longer waits for
		}
		c.mbox.awaiting = false
		if r.kind == ctrlRefuse {
			c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault, Reason: "the peer cannot fail over (its error surfaced, or its switch back had gone too far)"}))
			return
		}
		c.stats.MailboxHandshakes++
		c.peerPSNSet = false
		c.fillersOwed = r.fillers
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNPeerAck, PeerRecv: r.counter}))
		if c.m.SQ != fsm.SQSurfaced {
			c.peerAnnounced(r.psn)
		}
	}
}

// onMailboxNotify handles the peer's fallback notification through the
// mailbox. The peer's sends had come home and its default path failed
// again; its receives are on its backup now, behind r.fillers receives
// (stale copies, if this side's switch-back notification had brought
// them home) for which this side sends fillers before anything else
// goes there. What this side does depends on where its own sends are:
//
//   - on the backup (fallback, wait-signaled, wait-drained: nothing of
//     its switch back on the default QP yet). Its receives are home. Its
//     default QP goes to ERR first, so that no packet of the peer's old
//     stream lands in a receive from then on, and what it completed is
//     collected (the counter counts it; no reset of the default QP
//     happens in between, which would post the receives there again).
//     The receives move to the backup, behind the stale copies of the
//     last switch back, and the answer says how many precede them. The
//     peer's fillers are none here: its receives were live on its
//     backup, this side's sends landing in them.
//   - switching back, its notification posted on the default QP
//     (wait-notify). Whether the peer took it only the peer knew, and
//     its fillers say what it did about it: the held WRs go to the
//     backup behind them, then as above.
//   - home too (both directions came home, neither purged yet): a
//     failover as from the peer's first notification, the fillers
//     before the replay.
//   - waiting for the answer to its own notification through the
//     mailbox (both faulted): the peer's notification is the answer.
//
// Anything else is refused: the error surfaces on both sides. In every
// case the default QP is reset and connected with the two announced
// PSNs, as after any handshake.
func (c *Conn) onMailboxNotify(r mboxRec) {
	if !c.mbox.peerSet {
		c.Surface("the peer's fallback notification came through the mailbox, and this side does not know the peer's to answer")
		return
	}
	prior := c.m.SQ
	switch prior {
	case fsm.SQSurfaced:
		_ = c.answerMailbox(ctrlRefuse)
		return
	case fsm.SQAwaitAck:
		if !c.mbox.awaiting {
			c.refuseMailbox("the peer's fallback notification came through the mailbox during a handshake through the control receives")
			return
		}
		c.mbox.awaiting = false
		c.stats.MailboxHandshakes++
		c.fillersOwed = r.fillers
		c.peerPSNSet = false
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNPeerNotify, PeerRecv: r.counter}))
		if c.m.SQ != fsm.SQSurfaced {
			c.peerAnnounced(r.psn)
		}
		return
	case fsm.SQDefault:
		// (the machine's failover flushes the default QP first) What
		// the default QP completed counts against the peer's counter.
		_ = c.drain(&c.def)
		if c.m.SQ != fsm.SQDefault && c.m.SQ != fsm.SQSurfaced {
			c.onMailboxNotify(r) // the drain found a fault of this side's: its handshake is under way
			return
		}
		if c.unfollowable(r.counter) {
			_ = c.answerMailbox(ctrlRefuse)
			return
		}
	case fsm.SQWaitNotify:
		c.fillersOwed = r.fillers
		c.resetHeld = true // peerFellBackAgain resets it once the receives moved
		c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFault, ReplaySafe: true, BackupReady: true,
			Reason: "the peer fell back again through the mailbox during the switch back"}))
		c.resetHeld = false
		if c.m.SQ == fsm.SQSurfaced {
			_ = c.answerMailbox(ctrlRefuse)
			return
		}
	default: // fallback, wait-signaled, wait-drained
		if r.fillers != 0 {
			c.refuseMailbox(fmt.Sprintf("the peer's fallback notification through the mailbox asks for %d fillers while this side's sends use the backup", r.fillers))
			return
		}
	}
	if c.m.SQ != fsm.SQDefault {
		c.resetHeld = true
		c.defaultToErr()
		_ = c.drain(&c.def)
		c.resetHeld = false
		switch {
		case c.m.SQ == fsm.SQSurfaced:
			_ = c.answerMailbox(ctrlRefuse)
			return
		case c.m.RQ != fsm.RQDefault && r.flags&mboxSwitchDone != 0:
			// The peer's switch-back notification completed, and this
			// side has not seen it.
			c.refuseMailbox("the peer's fallback notification came through the mailbox before its switch-back notification")
			return
		}
	}
	if prior != fsm.SQWaitNotify {
		c.fillersOwed = r.fillers // (in wait-notify the held WRs took them to the backup)
	}
	c.peerPSNSet = false
	c.newHandshakePSN()
	c.mbox.via = true
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNPeerNotify, PeerRecv: r.counter}))
	c.mbox.via = false
	if c.m.SQ == fsm.SQSurfaced {
		return
	}
	c.stats.MailboxHandshakes++
	c.peerFellBackAgain(prior)
	if c.m.SQ != fsm.SQSurfaced {
		c.peerAnnounced(r.psn)
	}
}

// refuseMailbox answers the peer's notification with a refusal and
// surfaces the error here too, for reason.
func (c *Conn) refuseMailbox(reason string) {
	_ = c.answerMailbox(ctrlRefuse)
	c.Surface(reason)
}

// answerMailbox writes this side's answer to the peer's notification:
// a refusal, or an acknowledgement with the receive counter, this side's
// PSN and the fillers the peer sends first (the receives ahead of the
// ones just moved to the backup: the stale copies of the last switch
// back, and the control receives if they are still there).
func (c *Conn) answerMailbox(k ctrlKind) error {
	r := mboxRec{kind: k}
	if k == ctrlAck {
		n := c.fillersAhead()
		r.psn, r.counter, r.fillers = c.ownPSN, c.rring.Completed(), uint32(n)
		c.fillersDue += n
	}
	return c.writeRecord(r)
}

// notifyMailbox writes this side's fallback notification: its receive
// counter and its PSN (the announcement travels in the record).
func (c *Conn) notifyMailbox() error {
	if c.m.RQ == fsm.RQDefault {
		// The peer's switch-back notification was in the default QP's
		// CQ: the flush before this collected it, and it brought the
		// receives home, onto a QP now in ERR. They go to the backup,
		// behind the stale copies it left there. (The machine moved the
		// receive queue to the backup at the fault; the notification
		// moved it back, and the machine has no event for this.)
		c.m.RQ = fsm.RQFallback
		if err := c.repostRecvs(); err != nil {
			return err
		}
	}
	c.mbox.awaiting = true
	n := c.fillersAhead()
	c.fillersDue += n
	r := mboxRec{kind: ctrlNotify, psn: c.ownPSN, counter: c.rring.Completed(), fillers: uint32(n)}
	if c.mbox.switchDone {
		r.flags = mboxSwitchDone
	}
	return c.writeRecord(r)
}

// fillersAhead is how many receives precede the ones moved to the
// backup QP (the stale copies of the last switch back, and the control
// receives if they are still there), and forgets them: the peer's
// fillers consume them.
func (c *Conn) fillersAhead() int {
	n := c.bakStale
	if c.bakCtrl {
		n += ctrlRecvs
	}
	c.bakStale, c.bakCtrl = 0, false
	return n
}

// postFillers sends, ahead of the replay, the zero-length SENDs the
// peer's answer asked for: each consumes one receive ahead of the ones
// the peer moved to its backup.
func (c *Conn) postFillers() error {
	if c.fillersOwed == 0 {
		return nil
	}
	for c.fillersOwed > 0 {
		ch := &c.schain
		ch.start(cap(c.sges))
		for k := uint32(0); k < c.fillersOwed && !ch.full(); k++ {
			w, _ := ch.next()
			*w = verbs.SendWR{WRID: ctrlSendWRID, Opcode: verbs.WRSend}
			ch.keep()
		}
		n, err := c.bak.QP.PostSend(ch.wrs)
		c.fillersOwed -= uint32(n)
		c.stats.Fillers += n
		if err != nil {
			return fmt.Errorf("crossnic: send the fillers the peer asked for on the backup QP: %w", err)
		}
	}
	// A signaled zero-length WRITE behind them: its completion says the
	// peer took them all (a switch back with nothing else outstanding
	// waits for it: switchIfIdle; so does the purge: purgeBackup).
	if err := c.postBakFence(); err != nil {
		return fmt.Errorf("crossnic: post the fillers' fence on the backup QP: %w", err)
	}
	return nil
}

// postBakFence posts a signaled zero-length WRITE on the backup QP (wr_id
// probeWRID): RC completes it after everything posted before it, so its
// completion says the peer took the mailbox records and fillers written
// so far.
func (c *Conn) postBakFence() error {
	if _, err := c.bak.QP.PostSend([]verbs.SendWR{{WRID: probeWRID, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled}}); err != nil {
		return err
	}
	c.bakFence, c.mbox.unfenced = true, false
	return nil
}

// closeMailbox releases the mailbox's registration and memory, when
// the Conn opened it (the Shadow releases its own: DestroyQP).
func (c *Conn) closeMailbox() error {
	if !c.mbox.owned {
		return nil
	}
	return c.mbox.release()
}

// mboxFault reports whether a fault of the default QP fails over through
// the mailbox: both inboxes are known (then every handshake after the
// first goes through it, the control receives ahead taking fillers like
// any other receive), the peer watches its own (a handshake was had with it), this
// side's sends are home, and its receives are home (they move to the
// backup behind the stale copies there) or on the backup with nothing
// ahead of them.
func (c *Conn) mboxFault() bool {
	return c.mboxUsable() && c.mbox.watched && c.m.SQ == fsm.SQDefault && (c.m.RQ == fsm.RQDefault || c.bakStale == 0)
}

// aheadFlush reports whether an error completion of the backup QP is the
// flush of a receive ahead of those moved there (a filler was due for
// it): they flush first, in order. On a leg with one CQ a completion
// that names none of the sends the backup holds is taken for one (the
// opcode of an error completion is undefined).
func (c *Conn) aheadFlush(wc *verbs.WC) bool {
	switch {
	case c.fillersDue == 0:
		return false
	case c.bak.split():
		return isRecv(wc)
	case wc.WRID == ctrlRecvWRID:
		return true
	case ownWRID(wc.WRID):
		return false // (a control message, or a fence on the backup)
	}
	sends, _ := c.holds(&c.bak)
	return !sends || !c.sring.hasWRID(c.sendEnd(&c.bak), wc.WRID)
}

// purgePSNs are the PSNs the purge connects the backup QP with: where its
// two streams stand (ibv_query_qp reports
// the live PSNs: docs/SIMULATOR.md rule 97), so that the peer, which
// purges its own later, finds the stream where it left it, and a record
// or a notification through the mailbox crosses the window in which one
// backup is purged and the other not. Nothing of this side's is in
// flight on the backup then (its switch-back fence drained it, and the
// fence behind the fillers or the one the purge posts behind the
// mailbox records: postBakFence, purgeBackup), and the peer's sends are
// home: a packet delayed across
// the purge carries a PSN before the one expected, a duplicate
// acknowledged without effect.
//
// A backup QP whose last purge failed after its reset lost its PSNs: it
// takes the last handshake's, as the peer's does after a handshake.
func (c *Conn) purgePSNs() (rq, sq uint32, err error) {
	a, _, err := c.bak.QP.Query(verbs.QPAttrRQPSN | verbs.QPAttrSQPSN | verbs.QPAttrState)
	if err != nil {
		return 0, 0, fmt.Errorf("query the backup QP's PSNs: %w", err)
	}
	if a.QPState != verbs.QPSReset && a.QPState != verbs.QPSInit {
		return a.RQPSN & ctrlPSNMask, a.SQPSN & ctrlPSNMask, nil
	}
	if !c.peerPSNSet {
		return 0, 0, errors.New("no starting PSN from the peer since the last handshake")
	}
	return c.peerPSN, c.ownPSN, nil
}

// switchLost: the switch-back notification on the default QP failed, or
// got no answer; the peer may have taken it (its receives home then,
// behind stale copies on its backup). With the mailbox this side asks
// the peer, with a fallback notification through it: the answer's
// fillers precede the held WRs, which the fsm keeps until the answer
// (await-ack). It reports false without the mailbox: the caller
// surfaces the error (ErrSwitchNotifyLost).
func (c *Conn) switchLost(reason string) bool {
	if c.m.SQ != fsm.SQWaitNotify || !c.bakReady || !c.mboxUsable() || !c.mbox.watched || c.m.RQ == fsm.RQFallback && c.bakStale != 0 {
		return false
	}
	c.defaultToErr() // (in ERR the notification cannot arrive later)
	c.stats.Faults++
	c.newHandshakePSN()
	if c.hs != nil {
		c.faultAt = c.hs.clock.Now()
	}
	c.mbox.switchDone, c.mbox.use = false, true
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNFault, ReplaySafe: true, BackupReady: true, Mailbox: true,
		Reason: "the switch-back notification was lost: " + reason}))
	return true
}
