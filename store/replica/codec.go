package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/store"
)

// Peer messages travel as memberlist user messages (encrypted and
// authenticated with the cluster key). Layout, big endian, no padding:
//
//	header:  magic "IR", codec version u8 (=2), type u8, from str, to str,
//	         sentAt i64 (unix ns at the sender), seq u64 (replay.go)
//	push:    writtenAt i64 (unix ns at the origin), records
//	pull:    id u64, refs
//	pulled:  id u64, records
//	digests: n u32 × (origin str, count u32, hash u64)
//	stamps:  n u32 × origin str, n u32 × stamp
//	want:    refs
//	repair:  records
//	describe:  id u64, route (GID[16], LID u16)
//	described: id u64, found u8 (0 or 1), then the hca when found, else
//	           the reason (str)
//
//	str:     len u8, bytes
//	ref:     kind u8 (1 QP, 2 MR), GID[16], LID u16, N u32
//	owner:   str node, PID i64, incarnation u64
//	stamp:   ref, owner, version u64, deleted u8 (0 or 1)
//	record:  tag u8 (1 QP, 2 MR, 3 QP tombstone, 4 MR tombstone, 5 QP
//	         with a mailbox), GID[16], LID u16, N u32, owner, version
//	         u64, then for tag 1 the QP backup (device str, port u8,
//	         GID[16], LID u16, QPN u32), for tag 5 the same followed by
//	         the mailbox (addr u64, rkey u32, not both zero) and for tag
//	         2 the MR backup (rkey u32, addr u64, length u64)
//	refs, records: n u32 × item
//	hca:     name str, GUID u64, APM u8 (0 or 1), n u8 × port
//	port:    num u8, state u8, link layer u8, LID u16, LMC u8,
//	         n u8 × GID[16]
//
// decode accepts exactly this layout: it rejects an unknown magic,
// version or type, a count larger than the bytes left could hold,
// trailing bytes, and never panics; what it accepts re-encodes to the
// same bytes.

// codecVersion 2 added to, sentAt and seq to the header; version 1
// messages are refused (they cannot be told from replays). Tag 5 came
// later within version 2: a QP without a mailbox still travels as tag
// 1, so a node that knows no tag 5 refuses only the messages that carry
// a mailbox.
const codecVersion = 2

var magic = [2]byte{'I', 'R'}

type msgType uint8

const (
	msgPush    msgType = 1 // records written at the origin, for the node that needs them
	msgPull    msgType = 2 // a request for refs missing here
	msgPulled  msgType = 3 // the answer to msgPull (only what the peer holds)
	msgDigests msgType = 4 // anti-entropy: per-origin digests
	msgStamps  msgType = 5 // anti-entropy: stamps of the origins whose digests differ
	msgWant    msgType = 6 // anti-entropy: refs the sender is missing or behind on
	msgRepair  msgType = 7 // anti-entropy: records the receiver is missing or behind on
	// msgDescribe asks the node holding Route for the description of the
	// adapter behind it (describe.go); msgDescribed answers it.
	msgDescribe  msgType = 8
	msgDescribed msgType = 9
)

// message is every peer message; which fields are meaningful depends on
// Type (see the layout above).
type message struct {
	Type      msgType
	From      string
	To        string // the member it was sent to
	SentAt    int64  // unix ns at the sender
	Seq       uint64 // the sender's message number (replay.go)
	WrittenAt int64
	ID        uint64
	Records   []store.Record
	Refs      []store.Ref
	Digests   []store.Digest
	Origins   []string
	Stamps    []store.Stamp
	Route     Route  // msgDescribe
	HCA       *HCA   // msgDescribed, found
	Reason    string // msgDescribed, not found
}

var errDecode = errors.New("replica: bad peer message")

// Minimum encoded sizes, to bound counts before allocating.
const (
	minRef    = 1 + 16 + 2 + 4
	minOwner  = 1 + 8 + 8
	minStamp  = minRef + minOwner + 8 + 1
	minRecord = minRef + minOwner + 8
	minDigest = 1 + 4 + 8
)

func appendStr(b []byte, s string) ([]byte, error) {
	if len(s) > 255 {
		return nil, fmt.Errorf("replica: encode: string of %d bytes (at most 255)", len(s))
	}
	return append(append(b, byte(len(s))), s...), nil
}

func appendRefBody(b []byte, r store.Ref) []byte {
	b = append(b, r.GID[:]...)
	b = binary.BigEndian.AppendUint16(b, r.LID)
	return binary.BigEndian.AppendUint32(b, r.N)
}

func appendOwner(b []byte, o store.Owner) ([]byte, error) {
	b, err := appendStr(b, o.Node)
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint64(b, uint64(int64(o.PID)))
	return binary.BigEndian.AppendUint64(b, o.Incarnation), nil
}

// tagQPMbox is the record tag of a QP backup with a mailbox.
const tagQPMbox = 5

func appendRecord(b []byte, r store.Record) ([]byte, error) {
	tag := byte(r.Ref.Kind)
	if r.Ref.Kind != store.KindQP && r.Ref.Kind != store.KindMR {
		return nil, fmt.Errorf("replica: encode: record kind %d", r.Ref.Kind)
	}
	mbox := !r.Deleted && r.Ref.Kind == store.KindQP && r.QP.HasMailbox()
	switch {
	case r.Deleted:
		tag += 2
	case mbox:
		tag = tagQPMbox
	}
	b = appendRefBody(append(b, tag), r.Ref)
	b, err := appendOwner(b, r.Owner)
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint64(b, r.Version)
	switch {
	case r.Deleted:
	case r.Ref.Kind == store.KindQP:
		if b, err = appendStr(b, r.QP.Device); err != nil {
			return nil, err
		}
		b = append(b, r.QP.Port)
		b = append(b, r.QP.GID[:]...)
		b = binary.BigEndian.AppendUint16(b, r.QP.LID)
		b = binary.BigEndian.AppendUint32(b, r.QP.QPN)
		if mbox {
			b = binary.BigEndian.AppendUint64(b, r.QP.MailboxAddr)
			b = binary.BigEndian.AppendUint32(b, r.QP.MailboxRKey)
		}
	default:
		b = binary.BigEndian.AppendUint32(b, r.MR.RKey)
		b = binary.BigEndian.AppendUint64(b, r.MR.Addr)
		b = binary.BigEndian.AppendUint64(b, r.MR.Length)
	}
	return b, nil
}

func appendCount(b []byte, n int) []byte { return binary.BigEndian.AppendUint32(b, uint32(n)) }

// encode renders m in the layout above.
func encode(m message) ([]byte, error) {
	b := []byte{magic[0], magic[1], codecVersion, byte(m.Type)}
	b, err := appendStr(b, m.From)
	if err != nil {
		return nil, err
	}
	if b, err = appendStr(b, m.To); err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint64(b, uint64(m.SentAt))
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	records := func() error {
		b = appendCount(b, len(m.Records))
		for _, r := range m.Records {
			if b, err = appendRecord(b, r); err != nil {
				return err
			}
		}
		return nil
	}
	refs := func() {
		b = appendCount(b, len(m.Refs))
		for _, r := range m.Refs {
			b = appendRefBody(append(b, byte(r.Kind)), r)
		}
	}
	switch m.Type {
	case msgPush:
		b = binary.BigEndian.AppendUint64(b, uint64(m.WrittenAt))
		err = records()
	case msgPull:
		b = binary.BigEndian.AppendUint64(b, m.ID)
		refs()
	case msgPulled:
		b = binary.BigEndian.AppendUint64(b, m.ID)
		err = records()
	case msgDigests:
		b = appendCount(b, len(m.Digests))
		for _, d := range m.Digests {
			if b, err = appendStr(b, d.Origin); err != nil {
				return nil, err
			}
			b = binary.BigEndian.AppendUint32(b, uint32(d.Count))
			b = binary.BigEndian.AppendUint64(b, d.Hash)
		}
	case msgStamps:
		b = appendCount(b, len(m.Origins))
		for _, o := range m.Origins {
			if b, err = appendStr(b, o); err != nil {
				return nil, err
			}
		}
		b = appendCount(b, len(m.Stamps))
		for _, s := range m.Stamps {
			b = appendRefBody(append(b, byte(s.Ref.Kind)), s.Ref)
			if b, err = appendOwner(b, s.Owner); err != nil {
				return nil, err
			}
			b = binary.BigEndian.AppendUint64(b, s.Version)
			if s.Deleted {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	case msgWant:
		refs()
	case msgRepair:
		err = records()
	case msgDescribe:
		b = binary.BigEndian.AppendUint64(b, m.ID)
		b = appendRoute(b, m.Route)
	case msgDescribed:
		b = binary.BigEndian.AppendUint64(b, m.ID)
		b, err = appendDescribed(b, m)
	default:
		return nil, fmt.Errorf("replica: encode: message type %d", m.Type)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// reader consumes b; the first short read sets err and later reads
// return zeroes.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{errDecode}, args...)...)
	}
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.fail("truncated")
		return make([]byte, n)
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u8() uint8   { return r.take(1)[0] }
func (r *reader) u16() uint16 { return binary.BigEndian.Uint16(r.take(2)) }
func (r *reader) u32() uint32 { return binary.BigEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return binary.BigEndian.Uint64(r.take(8)) }
func (r *reader) str() string { return string(r.take(int(r.u8()))) }

// count reads a u32 count and refuses one the remaining bytes cannot hold
// at min bytes per item.
func (r *reader) count(min int) int {
	n := r.u32()
	if r.err == nil && uint64(n)*uint64(min) > uint64(len(r.b)) {
		r.fail("count %d exceeds the %d bytes left", n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *reader) kind() store.Kind {
	k := store.Kind(r.u8())
	if r.err == nil && k != store.KindQP && k != store.KindMR {
		r.fail("kind %d", k)
	}
	return k
}

func (r *reader) refBody(k store.Kind) store.Ref {
	ref := store.Ref{Kind: k}
	copy(ref.GID[:], r.take(16))
	ref.LID = r.u16()
	ref.N = r.u32()
	return ref
}

func (r *reader) owner() store.Owner {
	return store.Owner{Node: r.str(), PID: int(int64(r.u64())), Incarnation: r.u64()}
}

func (r *reader) record() store.Record {
	tag := r.u8()
	if r.err == nil && (tag < 1 || tag > tagQPMbox) {
		r.fail("record tag %d", tag)
		return store.Record{}
	}
	mbox := tag == tagQPMbox
	if mbox {
		tag = 1
	}
	var rec store.Record
	rec.Deleted = tag > 2
	rec.Ref = r.refBody(store.Kind((tag-1)%2 + 1))
	rec.Owner = r.owner()
	rec.Version = r.u64()
	switch {
	case rec.Deleted:
	case rec.Ref.Kind == store.KindQP:
		rec.QP.Device = r.str()
		rec.QP.Port = r.u8()
		copy(rec.QP.GID[:], r.take(16))
		rec.QP.LID = r.u16()
		rec.QP.QPN = r.u32()
		if mbox {
			rec.QP.MailboxAddr, rec.QP.MailboxRKey = r.u64(), r.u32()
			if r.err == nil && !rec.QP.HasMailbox() {
				r.fail("record tag %d without a mailbox", tagQPMbox)
			}
		}
	default:
		rec.MR = store.MRBackup{RKey: r.u32(), Addr: r.u64(), Length: r.u64()}
	}
	return rec
}

func (r *reader) records() []store.Record {
	n := r.count(minRecord)
	out := make([]store.Record, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, r.record())
	}
	return out
}

func (r *reader) refs() []store.Ref {
	n := r.count(minRef)
	out := make([]store.Ref, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, r.refBody(r.kind()))
	}
	return out
}

// decode parses a peer message; see the layout above.
func decode(b []byte) (message, error) {
	r := &reader{b: b}
	var m message
	if mg := r.take(2); r.err == nil && (mg[0] != magic[0] || mg[1] != magic[1]) {
		r.fail("magic %x", mg)
	}
	if v := r.u8(); r.err == nil && v != codecVersion {
		r.fail("codec version %d", v)
	}
	m.Type = msgType(r.u8())
	m.From = r.str()
	m.To = r.str()
	m.SentAt = int64(r.u64())
	m.Seq = r.u64()
	if r.err != nil {
		return message{}, r.err
	}
	switch m.Type {
	case msgPush:
		m.WrittenAt = int64(r.u64())
		m.Records = r.records()
	case msgPull:
		m.ID = r.u64()
		m.Refs = r.refs()
	case msgPulled:
		m.ID = r.u64()
		m.Records = r.records()
	case msgDigests:
		n := r.count(minDigest)
		m.Digests = make([]store.Digest, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			m.Digests = append(m.Digests, store.Digest{Origin: r.str(), Count: int(r.u32()), Hash: r.u64()})
		}
	case msgStamps:
		n := r.count(1)
		m.Origins = make([]string, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			m.Origins = append(m.Origins, r.str())
		}
		n = r.count(minStamp)
		m.Stamps = make([]store.Stamp, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			s := store.Stamp{Ref: r.refBody(r.kind())}
			s.Owner = r.owner()
			s.Version = r.u64()
			switch d := r.u8(); {
			case d == 1:
				s.Deleted = true
			case d != 0:
				r.fail("deleted flag %d", d)
			}
			m.Stamps = append(m.Stamps, s)
		}
	case msgWant:
		m.Refs = r.refs()
	case msgRepair:
		m.Records = r.records()
	case msgDescribe:
		m.ID = r.u64()
		m.Route = r.route()
	case msgDescribed:
		m.ID = r.u64()
		r.described(&m)
	default:
		r.fail("message type %d", m.Type)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return message{}, r.err
	}
	return m, nil
}
