package replica

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
)

func sampleMessages() []message {
	qp := store.QPEntry{Key: qpOn(1, 1), Value: backup(1), Owner: owner(1), Version: 1 << 40}.Record()
	mr := store.MREntry{Key: store.MRKey{LID: 3, RKey: 4}, Value: store.MRBackup{RKey: 5, Addr: 6, Length: 7}, Owner: owner(2), Version: 9}.Record()
	tomb := store.Tombstone{Ref: store.MRRef(store.MRKey{RKey: 1}), Owner: store.Owner{Node: "n", PID: -1}, Version: ^uint64(0)}.Record()
	mb := backup(2)
	mb.MailboxAddr, mb.MailboxRKey = 0x7f0000001000, 0x1234
	qpm := store.QPEntry{Key: qpOn(2, 3), Value: mb, Owner: owner(1), Version: 1<<40 + 1}.Record()
	refs := []store.Ref{store.QPRef(qpOn(2, 2)), store.MRRef(store.MRKey{LID: 1})}
	return []message{
		{Type: msgPush, From: "node1", WrittenAt: 1700000000000000000, Records: []store.Record{qp, mr, tomb, qpm}},
		{Type: msgPull, From: "a", ID: 42, Refs: refs},
		{Type: msgPulled, From: "b", ID: 42, Records: []store.Record{qp}},
		{Type: msgPulled, From: "b", ID: 43, Records: []store.Record{}},
		{Type: msgDigests, From: "c", Digests: []store.Digest{{Origin: "node1", Count: 3, Hash: 0xdeadbeef}, {Origin: "", Count: 0}}},
		{Type: msgStamps, From: "d", Origins: []string{"node1", "node2"}, Stamps: []store.Stamp{qp.Stamp, tomb.Stamp}},
		{Type: msgWant, From: "e", Refs: refs},
		{Type: msgRepair, From: "f", Records: []store.Record{mr, tomb}},
		{Type: msgDescribe, From: "g", ID: 7, Route: Route{GID: nodeGID(2), LID: 102}},
		{Type: msgDescribed, From: "h", ID: 7, HCA: sampleHCA()},
		{Type: msgDescribed, From: "h", ID: 8, HCA: &HCA{Name: "x"}},
		{Type: msgDescribed, From: "i", ID: 9, Reason: "no adapter holds LID 5"},
	}
}

// TestCodecMailbox: a QP backup with a mailbox travels as tag 5 and
// comes back whole; one without stays tag 1 (which a node that knows no
// mailbox reads); a tag-5 record whose mailbox is zero is refused.
func TestCodecMailbox(t *testing.T) {
	m := sampleMessages()[0]
	got, _ := roundTrip(t, m)
	for i, r := range m.Records {
		if got.Records[i].QP != r.QP {
			t.Fatalf("record %d: %+v, sent %+v", i, got.Records[i].QP, r.QP)
		}
	}
	one := func(r store.Record) []byte {
		b, err := encode(message{Type: msgPulled, From: "b", ID: 1, Records: []store.Record{r}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain, mbox := one(m.Records[0]), one(m.Records[3])
	// the same message up to the record's tag, which differs
	at := 0
	for at < len(plain) && plain[at] == mbox[at] {
		at++
	}
	if plain[at] != 1 || mbox[at] != tagQPMbox {
		t.Fatalf("tags %d and %d, want 1 and %d", plain[at], mbox[at], tagQPMbox)
	}
	zero := bytes.Clone(mbox)
	clear(zero[len(zero)-12:])
	if _, err := decode(zero); !errors.Is(err, errDecode) {
		t.Fatalf("a tag-5 record without a mailbox decoded: %v", err)
	}
}

// roundTrip encodes m and decodes it back; b is the encoding.
func roundTrip(t *testing.T, m message) (got message, b []byte) {
	t.Helper()
	b, err := encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = decode(b); err != nil {
		t.Fatal(err)
	}
	return got, b
}

func sampleHCA() *HCA {
	return &HCA{Name: "mlx5_0", GUID: 0x0002c90300a1b2c3, APM: true, Ports: []HCAPort{
		{Num: 1, State: verbs.PortActive, LinkLayer: verbs.LinkLayerInfiniBand, LID: 101, LMC: 1, GIDs: []verbs.GID{nodeGID(1), {}, nodeGID(3)}},
		{Num: 2, State: verbs.PortDown, LinkLayer: verbs.LinkLayerInfiniBand, LID: 0},
	}}
}

func TestCodecRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		b, err := encode(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(b)
		if err != nil {
			t.Fatalf("type %d: %v", m.Type, err)
		}
		again, _ := encode(got)
		if !bytes.Equal(again, b) {
			t.Fatalf("type %d does not round-trip", m.Type)
		}
		// Every truncation is refused.
		for i := range len(b) {
			if _, err := decode(b[:i]); !errors.Is(err, errDecode) {
				t.Fatalf("type %d truncated to %d bytes: %v", m.Type, i, err)
			}
		}
		if _, err := decode(append(b, 0)); !errors.Is(err, errDecode) {
			t.Fatalf("type %d with a trailing byte: %v", m.Type, err)
		}
	}
	bad, _ := encode(sampleMessages()[0])
	bad[2] = codecVersion + 1
	if _, err := decode(bad); !errors.Is(err, errDecode) {
		t.Fatalf("unknown codec version: %v", err)
	}
	if _, err := encode(message{Type: 99}); err == nil {
		t.Fatal("encoded an unknown type")
	}
	// A count larger than the message could hold is refused before
	// allocating.
	huge := append(header(msgWant), 0xff, 0xff, 0xff, 0xff)
	if _, err := decode(huge); !errors.Is(err, errDecode) {
		t.Fatalf("huge count: %v", err)
	}
}

func TestCodecDescribe(t *testing.T) {
	m := message{Type: msgDescribed, From: "n", ID: 1, HCA: sampleHCA()}
	got, b := roundTrip(t, m)
	if !reflect.DeepEqual(got.HCA, m.HCA) {
		t.Fatalf("described %+v, decoded %+v", m.HCA, got.HCA)
	}
	// The found flag and the APM flag are 0 or 1, nothing else.
	flag := len(b) - len(encodeHCAForTest(t, *m.HCA)) - 1
	for _, at := range []int{flag, flag + 1 + 1 + len("mlx5_0") + 8} {
		bad := bytes.Clone(b)
		bad[at] = 2
		if _, err := decode(bad); !errors.Is(err, errDecode) {
			t.Fatalf("flag byte %d set to 2: %v", at, err)
		}
	}
	// Too many ports or GIDs for the bytes left are refused.
	h, _ := appendHCA(nil, HCA{Name: "x", Ports: []HCAPort{{Num: 1}}})
	h[1+1+8+1] = 200
	if _, err := decode(append(append(header(msgDescribed), 0, 0, 0, 0, 0, 0, 0, 1, 1), h...)); !errors.Is(err, errDecode) {
		t.Fatalf("200 ports in a few bytes: %v", err)
	}
	if _, err := encode(message{Type: msgDescribed, HCA: &HCA{Name: "x", Ports: make([]HCAPort, 256)}}); err == nil {
		t.Fatal("encoded 256 ports")
	}
}

func encodeHCAForTest(t *testing.T, h HCA) []byte {
	t.Helper()
	b, err := appendHCA(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeMessage: the decoder never panics, and what it accepts
// re-encodes to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		b, err := encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("IR"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b)
		if err != nil {
			return
		}
		e, err := encode(m)
		if err != nil || !bytes.Equal(e, b) {
			t.Fatalf("%x -> %+v -> %x, %v", b, m, e, err)
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []nodeMeta{{}, {GIDs: []verbs.GID{nodeGID(1)}, LIDs: []uint16{1, 2}}} {
		b, err := encodeMeta(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		e, err := encodeMeta(m)
		if err != nil || !bytes.Equal(e, b) {
			t.Fatalf("%x -> %+v -> %x, %v", b, m, e, err)
		}
	})
}

// header is a message header of type t from and to "" (no names), sent
// at time 0 with number 0.
func header(t msgType) []byte {
	return append([]byte{'I', 'R', codecVersion, byte(t), 0, 0}, make([]byte, 16)...)
}
