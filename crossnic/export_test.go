package crossnic

// MailboxNotifyForTest writes into c's inbox, as the peer's HCA would, a
// fallback notification record with record number seq and the peer's
// receive counter counter.
func (c *Conn) MailboxNotifyForTest(seq uint32, counter uint64) {
	r := mboxRec{kind: ctrlNotify, seq: seq, counter: counter}
	var b [mboxRecLen]byte
	r.encode(b[:])
	c.mbox.store(0, b[:])
}

// InboxForTest decodes the record in c's inbox: its kind ("notify",
// "ack", "refuse") and the seq of this side's record it answers; ok is
// false when none is there whole.
func (c *Conn) InboxForTest() (kind string, seen uint32, ok bool) {
	var b [mboxRecLen]byte
	c.mbox.load(b[:], 0)
	r, err := decodeMboxRec(b[:])
	if err != nil {
		return "", 0, false
	}
	return [...]string{ctrlRefuse: "refuse", ctrlNotify: "notify", ctrlAck: "ack"}[r.kind], r.seen, true
}

// UnwatchedForTest makes c take its peer for one that does not read its
// inbox (no Conn there yet): nothing is asked through the mailbox until
// the peer's next notification or acknowledgement says otherwise. The
// tests of what a switch back does when it cannot ask (the error
// surfaces: ErrSwitchNotifyLost) reach that state with it.
func (c *Conn) UnwatchedForTest() { c.mbox.watched = false }
