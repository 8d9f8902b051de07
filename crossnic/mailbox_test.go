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

// binaryPutCRC reseals b after a field was changed.
func binaryPutCRC(b []byte) {
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], mboxCRC))
}
