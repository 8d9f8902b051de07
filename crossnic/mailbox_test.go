package crossnic

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// TestMailboxRecord: a record reads back as written; one with a byte
// changed anywhere (a write torn by the read) is incomplete, not a
// record; one of another version, with reserved bits, of an unknown
// kind or never written is refused. An announcement (a paired reset)
// reads back with its flags.
func TestMailboxRecord(t *testing.T) {
	want := mboxRec{kind: ctrlAck, seq: 7, seen: 3, psn: 0xabcdef, counter: 1<<40 + 5, fillers: 12}
	b := make([]byte, mboxRecLen)
	want.encode(b)
	got, err := decodeMboxRec(b)
	if err != nil || got != want {
		t.Fatalf("decoded %+v, %v: want %+v", got, err, want)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		if _, err := decodeMboxRec(c); !errors.Is(err, errMboxTorn) {
			t.Fatalf("byte %d changed: %v, want errMboxTorn", i, err)
		}
	}
	if _, err := decodeMboxRec(make([]byte, mboxRecLen)); err == nil {
		t.Fatal("a zeroed inbox decoded as a record")
	}
	for name, r := range map[string]mboxRec{
		"kind":    {kind: ctrlSwitch, seq: 1},
		"psn":     {kind: ctrlNotify, seq: 1, psn: 1 << 24},
		"seq 0":   {kind: ctrlNotify},
		"flag":    {kind: ctrlAnnounce, seq: 1, flags: 16},
		"refusal": {kind: ctrlRefuse + 5, seq: 1},
	} {
		r.encode(b)
		if _, err := decodeMboxRec(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	for _, ann := range []mboxRec{
		{kind: ctrlAnnounce, flags: mboxAnswer, seq: 2, seen: 9, psn: 0x123456},
		{kind: ctrlAnnounce, flags: mboxTookNotify, seq: 3, seen: 9, psn: 0x654321},
		{kind: ctrlAck, flags: mboxPrevOther, seq: 4, seen: 9, psn: 0x654321},
	} {
		ann.encode(b)
		if got, err := decodeMboxRec(b); err != nil || got != ann {
			t.Fatalf("announcement decoded %+v, %v: want %+v", got, err, ann)
		}
	}
	want.encode(b)
	b[0] = mboxVersion + 1
	binaryPutCRC(b)
	if _, err := decodeMboxRec(b); err == nil || errors.Is(err, errMboxTorn) {
		t.Fatalf("version %d: %v, want a version error", b[0], err)
	}
}

// TestMailboxPredecessorMissing: a record flagged mboxPrevOther waits
// until the other slot holds its predecessor or a later record, unless
// the predecessor was handled already; an unflagged record never waits.
func TestMailboxPredecessorMissing(t *testing.T) {
	ann := mboxRec{kind: ctrlAnnounce, flags: mboxPrevOther, seq: 6, psn: 1}
	for _, c := range []struct {
		name  string
		seen  uint32
		slot0 uint32 // the seq slot 0 holds (0: never written)
		r     mboxRec
		wait  bool
	}{
		{"predecessor not landed", 3, 2, ann, true},
		{"slot 0 never written", 0, 0, ann, true},
		{"predecessor landed", 3, 5, ann, false},
		{"predecessor overwritten by a later record", 3, 7, ann, false},
		{"predecessor handled", 5, 2, ann, false},
		{"not flagged", 3, 2, mboxRec{kind: ctrlAnnounce, seq: 6, psn: 1}, false},
		{"ack waiting for an announcement", 3, 2, mboxRec{kind: ctrlAck, flags: mboxPrevOther, seq: 6}, true},
	} {
		m := &mailbox{buf: make([]byte, mboxLen), seen: c.seen}
		if c.slot0 != 0 {
			var b [mboxRecLen]byte
			(&mboxRec{kind: ctrlAck, seq: c.slot0}).encode(b[:])
			m.store(inboxOff(0), b[:])
		}
		if c.r.kind == ctrlAck {
			// its predecessor went to slot 1
			m.store(inboxOff(0), make([]byte, mboxRecLen))
			var b [mboxRecLen]byte
			(&mboxRec{kind: ctrlAnnounce, seq: c.slot0}).encode(b[:])
			m.store(inboxOff(1), b[:])
		}
		if got := m.predecessorMissing(c.r); got != c.wait {
			t.Errorf("%s: waits %v, want %v", c.name, got, c.wait)
		}
	}
}

// binaryPutCRC reseals b after a field was changed.
func binaryPutCRC(b []byte) {
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], mboxCRC))
}
