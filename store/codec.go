package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Encoding (big endian, no padding):
//
//	key QP:     GID[16] LID u16 QPN u32                         (22 bytes)
//	key MR:     GID[16] LID u16 RKey u32                        (22 bytes)
//	key tomb:   kind u8 (1 QP, 2 MR), the entry's key           (23 bytes)
//	value QP:   ver=3 u8, devLen u8, dev, port u8, GID[16], LID u16, QPN u32, owner, version u64, crc u32
//	            or, for a backup with a mailbox, ver=4 u8 and the same
//	            fields with mailboxAddr u64, mailboxRKey u32 after QPN
//	value MR:   ver=3 u8, RKey u32, Addr u64, Length u64, owner, version u64, crc u32
//	value tomb: ver=2 u8, owner, version u64, crc u32
//	owner:      nodeLen u8, node, PID i64, Incarnation u64
//
// crc is the CRC-32C (Castagnoli) of the value's bucket key followed by
// the value's bytes before the crc: a value whose bytes changed on disk,
// or that was moved under another key, fails it. Schema 3 decoders check
// it first and report a mismatch, or a value that does not decode, as an
// error wrapping both ErrDamaged and ErrInvalid.
//
// Earlier layouts, decoded only to migrate a file (schema.go): schema 2
// values are the same without the crc, with ver=2 (QP, MR) and ver=1
// (tomb); schema 1 values have ver=1 and no entry version (and there are
// no tombstones); schema 0 values are the value fields alone: no version
// byte and no owner. Decoders accept exactly these layouts, reject
// trailing bytes and never panic, so a decoded value re-encodes to the
// same bytes.

const (
	valueVersion = 3
	// valueVersionMbox: a schema-3 QP value with a mailbox. A value
	// without one keeps version 3, so that a file (or a peer) of a
	// version that knows no mailbox reads every entry of a QP without
	// one.
	valueVersionMbox = 4
	valueVersionV2   = 2
	valueVersionV1   = 1
	tombVersion      = 2
	tombVersionV2    = 1
	keyLen           = 16 + 2 + 4
	refLen           = 1 + keyLen
	crcLen           = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// valueCRC is the checksum of a schema-3 value: its key, then its body.
func valueCRC(key, body []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, key), castagnoli, body)
}

// seal appends to body (a schema-3 value without its crc) the crc of key
// and body.
func seal(key, body []byte) []byte {
	return binary.BigEndian.AppendUint32(body, valueCRC(key, body))
}

// unseal checks the crc that ends b against key and the bytes before it,
// and returns those bytes. what names the kind of value in errors.
func unseal(what string, key, b []byte) ([]byte, error) {
	if len(b) < crcLen {
		return nil, fmt.Errorf("%w: %w: %s value of %d bytes, shorter than its checksum", ErrDamaged, ErrInvalid, what, len(b))
	}
	body := b[:len(b)-crcLen]
	stored := binary.BigEndian.Uint32(b[len(body):])
	if sum := valueCRC(key, body); sum != stored {
		return nil, fmt.Errorf("%w: %w: %s value fails its checksum (stored %08x, computed %08x)", ErrDamaged, ErrInvalid, what, stored, sum)
	}
	return body, nil
}

// damaged marks a decoding error (which wraps ErrInvalid) of a value that
// passed its checksum as damage too.
func damaged(what string, err error) error {
	return fmt.Errorf("%w: %s value: %w", ErrDamaged, what, err)
}

func encodeRef(r Ref) []byte {
	b := make([]byte, 0, refLen)
	b = append(b, byte(r.Kind))
	b = append(b, r.GID[:]...)
	b = binary.BigEndian.AppendUint16(b, r.LID)
	return binary.BigEndian.AppendUint32(b, r.N)
}

func decodeRef(b []byte) (Ref, error) {
	var r Ref
	if len(b) != refLen {
		return r, fmt.Errorf("%w: tombstone key of %d bytes", ErrInvalid, len(b))
	}
	r.Kind = Kind(b[0])
	if r.Kind != KindQP && r.Kind != KindMR {
		return r, fmt.Errorf("%w: tombstone kind %d", ErrInvalid, b[0])
	}
	copy(r.GID[:], b[1:])
	r.LID = binary.BigEndian.Uint16(b[17:])
	r.N = binary.BigEndian.Uint32(b[19:])
	return r, nil
}

func encodeQPKey(k QPKey) []byte {
	b := make([]byte, 0, keyLen)
	b = append(b, k.GID[:]...)
	b = binary.BigEndian.AppendUint16(b, k.LID)
	return binary.BigEndian.AppendUint32(b, k.QPN)
}

func decodeQPKey(b []byte) (QPKey, error) {
	var k QPKey
	if len(b) != keyLen {
		return k, fmt.Errorf("%w: QP key of %d bytes", ErrInvalid, len(b))
	}
	copy(k.GID[:], b)
	k.LID = binary.BigEndian.Uint16(b[16:])
	k.QPN = binary.BigEndian.Uint32(b[18:])
	return k, nil
}

func encodeMRKey(k MRKey) []byte {
	b := make([]byte, 0, keyLen)
	b = append(b, k.GID[:]...)
	b = binary.BigEndian.AppendUint16(b, k.LID)
	return binary.BigEndian.AppendUint32(b, k.RKey)
}

func decodeMRKey(b []byte) (MRKey, error) {
	var k MRKey
	if len(b) != keyLen {
		return k, fmt.Errorf("%w: MR key of %d bytes", ErrInvalid, len(b))
	}
	copy(k.GID[:], b)
	k.LID = binary.BigEndian.Uint16(b[16:])
	k.RKey = binary.BigEndian.Uint32(b[18:])
	return k, nil
}

// reader consumes b; the first short read sets err and later reads
// return zeroes.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		if r.err == nil {
			r.err = fmt.Errorf("%w: truncated", ErrInvalid)
		}
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

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrInvalid, len(r.b))
	}
	return r.err
}

func (r *reader) version(want uint8) {
	if v := r.u8(); r.err == nil && v != want {
		r.err = fmt.Errorf("%w: value version %d", ErrInvalid, v)
	}
}

func checkName(what, s string) error {
	if len(s) > 255 {
		return fmt.Errorf("%w: %s of %d bytes (at most 255)", ErrInvalid, what, len(s))
	}
	return nil
}

func appendOwner(b []byte, o Owner) []byte {
	b = append(b, byte(len(o.Node)))
	b = append(b, o.Node...)
	b = binary.BigEndian.AppendUint64(b, uint64(int64(o.PID)))
	return binary.BigEndian.AppendUint64(b, o.Incarnation)
}

func (r *reader) owner() Owner {
	return Owner{Node: r.str(), PID: int(int64(r.u64())), Incarnation: r.u64()}
}

func appendQPFields(b []byte, v QPBackup) []byte {
	b = append(b, byte(len(v.Device)))
	b = append(b, v.Device...)
	b = append(b, v.Port)
	b = append(b, v.GID[:]...)
	b = binary.BigEndian.AppendUint16(b, v.LID)
	return binary.BigEndian.AppendUint32(b, v.QPN)
}

func (r *reader) qpFields() QPBackup {
	v := QPBackup{Device: r.str(), Port: r.u8()}
	copy(v.GID[:], r.take(16))
	v.LID = r.u16()
	v.QPN = r.u32()
	return v
}

func appendMRFields(b []byte, v MRBackup) []byte {
	b = binary.BigEndian.AppendUint32(b, v.RKey)
	b = binary.BigEndian.AppendUint64(b, v.Addr)
	return binary.BigEndian.AppendUint64(b, v.Length)
}

func (r *reader) mrFields() MRBackup {
	return MRBackup{RKey: r.u32(), Addr: r.u64(), Length: r.u64()}
}

func encodeQPBackup(key []byte, v QPBackup, o Owner, ver uint64) ([]byte, error) {
	if v.HasMailbox() {
		return encodeQPBackupMbox(key, v, o, ver)
	}
	b, err := encodeQPBackupV2(v, o, ver)
	if err != nil {
		return nil, err
	}
	b[0] = valueVersion
	return seal(key, b), nil
}

// encodeQPBackupMbox is encodeQPBackup's layout for a backup with a
// mailbox (valueVersionMbox).
func encodeQPBackupMbox(key []byte, v QPBackup, o Owner, ver uint64) ([]byte, error) {
	if err := checkName("device name", v.Device); err != nil {
		return nil, err
	}
	if err := checkName("node name", o.Node); err != nil {
		return nil, err
	}
	b := appendQPFields([]byte{valueVersionMbox}, v)
	b = binary.BigEndian.AppendUint64(b, v.MailboxAddr)
	b = binary.BigEndian.AppendUint32(b, v.MailboxRKey)
	b = appendOwner(b, o)
	b = binary.BigEndian.AppendUint64(b, ver)
	return seal(key, b), nil
}

func decodeQPBackup(key, b []byte) (QPBackup, Owner, uint64, error) {
	body, err := unseal("QP", key, b)
	if err != nil {
		return QPBackup{}, Owner{}, 0, err
	}
	var v QPBackup
	var o Owner
	var ver uint64
	if len(body) > 0 && body[0] == valueVersionMbox {
		v, o, ver, err = parseQPBackupMbox(body)
	} else {
		v, o, ver, err = parseQPBackup(body, valueVersion)
	}
	if err != nil {
		return QPBackup{}, Owner{}, 0, damaged("QP", err)
	}
	return v, o, ver, nil
}

// parseQPBackupMbox parses a valueVersionMbox body. A mailbox of zeros
// is refused: that value is written with version 3.
func parseQPBackupMbox(b []byte) (QPBackup, Owner, uint64, error) {
	r := &reader{b: b}
	r.version(valueVersionMbox)
	v := r.qpFields()
	v.MailboxAddr, v.MailboxRKey = r.u64(), r.u32()
	o := r.owner()
	ver := r.u64()
	if err := r.end(); err != nil {
		return QPBackup{}, Owner{}, 0, err
	}
	if !v.HasMailbox() {
		return QPBackup{}, Owner{}, 0, fmt.Errorf("%w: QP value of version %d without a mailbox", ErrInvalid, valueVersionMbox)
	}
	return v, o, ver, nil
}

func encodeMRBackup(key []byte, v MRBackup, o Owner, ver uint64) ([]byte, error) {
	b, err := encodeMRBackupV2(v, o, ver)
	if err != nil {
		return nil, err
	}
	b[0] = valueVersion
	return seal(key, b), nil
}

func decodeMRBackup(key, b []byte) (MRBackup, Owner, uint64, error) {
	body, err := unseal("MR", key, b)
	if err != nil {
		return MRBackup{}, Owner{}, 0, err
	}
	v, o, ver, err := parseMRBackup(body, valueVersion)
	if err != nil {
		return MRBackup{}, Owner{}, 0, damaged("MR", err)
	}
	return v, o, ver, nil
}

func encodeTomb(key []byte, o Owner, ver uint64) ([]byte, error) {
	b, err := encodeTombV2(o, ver)
	if err != nil {
		return nil, err
	}
	b[0] = tombVersion
	return seal(key, b), nil
}

func decodeTomb(key, b []byte) (Owner, uint64, error) {
	body, err := unseal("tombstone", key, b)
	if err != nil {
		return Owner{}, 0, err
	}
	o, ver, err := parseTomb(body, tombVersion)
	if err != nil {
		return Owner{}, 0, damaged("tombstone", err)
	}
	return o, ver, nil
}

// Schema 2 values: the schema-3 layouts without the crc, with version
// bytes 2 (QP, MR) and 1 (tomb). Read only to migrate a file; the schema-3
// encoders build on the encoders.

func encodeQPBackupV2(v QPBackup, o Owner, ver uint64) ([]byte, error) {
	b, err := encodeQPBackupV1(v, o)
	if err != nil {
		return nil, err
	}
	b[0] = valueVersionV2
	return binary.BigEndian.AppendUint64(b, ver), nil
}

func decodeQPBackupV2(b []byte) (QPBackup, Owner, uint64, error) {
	return parseQPBackup(b, valueVersionV2)
}

func parseQPBackup(b []byte, version uint8) (QPBackup, Owner, uint64, error) {
	r := &reader{b: b}
	r.version(version)
	v := r.qpFields()
	o := r.owner()
	ver := r.u64()
	if err := r.end(); err != nil {
		return QPBackup{}, Owner{}, 0, err
	}
	return v, o, ver, nil
}

func encodeMRBackupV2(v MRBackup, o Owner, ver uint64) ([]byte, error) {
	b, err := encodeMRBackupV1(v, o)
	if err != nil {
		return nil, err
	}
	b[0] = valueVersionV2
	return binary.BigEndian.AppendUint64(b, ver), nil
}

func decodeMRBackupV2(b []byte) (MRBackup, Owner, uint64, error) {
	return parseMRBackup(b, valueVersionV2)
}

func parseMRBackup(b []byte, version uint8) (MRBackup, Owner, uint64, error) {
	r := &reader{b: b}
	r.version(version)
	v := r.mrFields()
	o := r.owner()
	ver := r.u64()
	if err := r.end(); err != nil {
		return MRBackup{}, Owner{}, 0, err
	}
	return v, o, ver, nil
}

func encodeTombV2(o Owner, ver uint64) ([]byte, error) {
	if err := checkName("node name", o.Node); err != nil {
		return nil, err
	}
	b := appendOwner([]byte{tombVersionV2}, o)
	return binary.BigEndian.AppendUint64(b, ver), nil
}

func decodeTombV2(b []byte) (Owner, uint64, error) {
	return parseTomb(b, tombVersionV2)
}

func parseTomb(b []byte, version uint8) (Owner, uint64, error) {
	r := &reader{b: b}
	r.version(version)
	o := r.owner()
	ver := r.u64()
	if err := r.end(); err != nil {
		return Owner{}, 0, err
	}
	return o, ver, nil
}

// Schema 1 values: version byte 1, fields, owner; no entry version.

func encodeQPBackupV1(v QPBackup, o Owner) ([]byte, error) {
	if err := checkName("device name", v.Device); err != nil {
		return nil, err
	}
	if err := checkName("node name", o.Node); err != nil {
		return nil, err
	}
	b := appendQPFields([]byte{valueVersionV1}, v)
	return appendOwner(b, o), nil
}

func decodeQPBackupV1(b []byte) (QPBackup, Owner, error) {
	r := &reader{b: b}
	r.version(valueVersionV1)
	v := r.qpFields()
	o := r.owner()
	if err := r.end(); err != nil {
		return QPBackup{}, Owner{}, err
	}
	return v, o, nil
}

func encodeMRBackupV1(v MRBackup, o Owner) ([]byte, error) {
	if err := checkName("node name", o.Node); err != nil {
		return nil, err
	}
	b := appendMRFields([]byte{valueVersionV1}, v)
	return appendOwner(b, o), nil
}

func decodeMRBackupV1(b []byte) (MRBackup, Owner, error) {
	r := &reader{b: b}
	r.version(valueVersionV1)
	v := r.mrFields()
	o := r.owner()
	if err := r.end(); err != nil {
		return MRBackup{}, Owner{}, err
	}
	return v, o, nil
}

// Schema 0 values: fields only.

func encodeQPBackupV0(v QPBackup) []byte { return appendQPFields(nil, v) }

func decodeQPBackupV0(b []byte) (QPBackup, error) {
	r := &reader{b: b}
	v := r.qpFields()
	if err := r.end(); err != nil {
		return QPBackup{}, err
	}
	return v, nil
}

func encodeMRBackupV0(v MRBackup) []byte { return appendMRFields(nil, v) }

func decodeMRBackupV0(b []byte) (MRBackup, error) {
	r := &reader{b: b}
	v := r.mrFields()
	if err := r.end(); err != nil {
		return MRBackup{}, err
	}
	return v, nil
}
