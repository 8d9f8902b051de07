package store

import (
	"encoding/binary"
	"fmt"
)

// Encoding (big endian, no padding):
//
//	key QP:    GID[16] LID u16 QPN u32                         (22 bytes)
//	key MR:    GID[16] LID u16 RKey u32                        (22 bytes)
//	value QP:  ver=1 u8, devLen u8, dev, port u8, GID[16], LID u16, QPN u32, owner
//	value MR:  ver=1 u8, RKey u32, Addr u64, Length u64, owner
//	owner:     nodeLen u8, node, PID i64, Incarnation u64
//
// Schema 0 values (migrated at Open) are the value fields alone: no
// version byte and no owner. Decoders accept exactly these layouts, reject
// trailing bytes and never panic, so a decoded value re-encodes to the
// same bytes.

const (
	valueVersion = 1
	keyLen       = 16 + 2 + 4
)

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

func (r *reader) version() {
	if v := r.u8(); r.err == nil && v != valueVersion {
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

func encodeQPBackup(v QPBackup, o Owner) ([]byte, error) {
	if err := checkName("device name", v.Device); err != nil {
		return nil, err
	}
	if err := checkName("node name", o.Node); err != nil {
		return nil, err
	}
	b := appendQPFields([]byte{valueVersion}, v)
	return appendOwner(b, o), nil
}

func decodeQPBackup(b []byte) (QPBackup, Owner, error) {
	r := &reader{b: b}
	r.version()
	v := r.qpFields()
	o := r.owner()
	if err := r.end(); err != nil {
		return QPBackup{}, Owner{}, err
	}
	return v, o, nil
}

func encodeMRBackup(v MRBackup, o Owner) ([]byte, error) {
	if err := checkName("node name", o.Node); err != nil {
		return nil, err
	}
	b := appendMRFields([]byte{valueVersion}, v)
	return appendOwner(b, o), nil
}

func decodeMRBackup(b []byte) (MRBackup, Owner, error) {
	r := &reader{b: b}
	r.version()
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
