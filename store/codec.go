package store

import (
	"encoding/binary"
	"fmt"
)

// Encoding (big endian, no padding):
//
//	key QP:     GID[16] LID u16 QPN u32                         (22 bytes)
//	key MR:     GID[16] LID u16 RKey u32                        (22 bytes)
//	key tomb:   kind u8 (1 QP, 2 MR), the entry's key           (23 bytes)
//	value QP:   ver=2 u8, devLen u8, dev, port u8, GID[16], LID u16, QPN u32, owner, version u64
//	value MR:   ver=2 u8, RKey u32, Addr u64, Length u64, owner, version u64
//	value tomb: ver=1 u8, owner, version u64
//	owner:      nodeLen u8, node, PID i64, Incarnation u64
//
// Schema 1 values (migrated at Open) have ver=1 and no entry version;
// schema 0 values are the value fields alone: no version byte and no
// owner. Decoders accept exactly these layouts, reject trailing bytes and
// never panic, so a decoded value re-encodes to the same bytes.

const (
	valueVersion   = 2
	valueVersionV1 = 1
	tombVersion    = 1
	keyLen         = 16 + 2 + 4
	refLen         = 1 + keyLen
)

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

func encodeQPBackup(v QPBackup, o Owner, ver uint64) ([]byte, error) {
	b, err := encodeQPBackupV1(v, o)
	if err != nil {
		return nil, err
	}
	b[0] = valueVersion
	return binary.BigEndian.AppendUint64(b, ver), nil
}

func decodeQPBackup(b []byte) (QPBackup, Owner, uint64, error) {
	r := &reader{b: b}
	r.version(valueVersion)
	v := r.qpFields()
	o := r.owner()
	ver := r.u64()
	if err := r.end(); err != nil {
		return QPBackup{}, Owner{}, 0, err
	}
	return v, o, ver, nil
}

func encodeMRBackup(v MRBackup, o Owner, ver uint64) ([]byte, error) {
	b, err := encodeMRBackupV1(v, o)
	if err != nil {
		return nil, err
	}
	b[0] = valueVersion
	return binary.BigEndian.AppendUint64(b, ver), nil
}

func decodeMRBackup(b []byte) (MRBackup, Owner, uint64, error) {
	r := &reader{b: b}
	r.version(valueVersion)
	v := r.mrFields()
	o := r.owner()
	ver := r.u64()
	if err := r.end(); err != nil {
		return MRBackup{}, Owner{}, 0, err
	}
	return v, o, ver, nil
}

func encodeTomb(o Owner, ver uint64) ([]byte, error) {
	if err := checkName("node name", o.Node); err != nil {
		return nil, err
	}
	b := appendOwner([]byte{tombVersion}, o)
	return binary.BigEndian.AppendUint64(b, ver), nil
}

func decodeTomb(b []byte) (Owner, uint64, error) {
	r := &reader{b: b}
	r.version(tombVersion)
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
