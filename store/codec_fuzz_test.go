package store

import (
	"bytes"
	"errors"
	"testing"
)

// Each fuzz test checks that the decoder never panics and that a value it
// accepts re-encodes to exactly the input (the encoding is canonical).
// Schema-3 values are fuzzed with their key (the checksum covers it), and
// their decoding errors must wrap both ErrDamaged and ErrInvalid.

func FuzzDecodeQPKey(f *testing.F) {
	f.Add(encodeQPKey(qpKey(1)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeQPKey(b)
		if err == nil && !bytes.Equal(encodeQPKey(k), b) {
			t.Fatalf("%x -> %+v -> %x", b, k, encodeQPKey(k))
		}
	})
}

func FuzzDecodeMRKey(f *testing.F) {
	f.Add(encodeMRKey(mrKey(1)))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeMRKey(b)
		if err == nil && !bytes.Equal(encodeMRKey(k), b) {
			t.Fatalf("%x -> %+v -> %x", b, k, encodeMRKey(k))
		}
	})
}

// decodeOK checks a schema-3 decoding error: damage, and an invalid value.
func decodeOK(t *testing.T, in []byte, err error) bool {
	t.Helper()
	if err != nil && !(errors.Is(err, ErrDamaged) && errors.Is(err, ErrInvalid)) {
		t.Fatalf("%x: error %v wraps not both ErrDamaged and ErrInvalid", in, err)
	}
	return err == nil
}

// sealed lists the inputs a schema-3 fuzz test decodes: b as it is (a
// random b almost never passes its checksum) and b sealed with the
// checksum of key and b, so that the field decoding behind the checksum
// is fuzzed too.
func sealed(key, b []byte) [][]byte {
	return [][]byte{b, seal(key, bytes.Clone(b))}
}

var fuzzOwners = []Owner{{}, alice, {Node: "n", PID: -1, Incarnation: ^uint64(0)}}

func FuzzDecodeQPBackup(f *testing.F) {
	key := encodeQPKey(qpKey(1))
	for _, o := range fuzzOwners {
		for _, v := range []QPBackup{qpVal(3), qpMbox(3)} {
			b, err := encodeQPBackup(key, v, o, 0x1234<<16|7)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(key, b)
			f.Add(key, b[:len(b)-crcLen])
		}
	}
	f.Add(key, []byte{3, 255})
	f.Add(key, []byte{4, 255})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, key, b []byte) {
		for _, in := range sealed(key, b) {
			v, o, ver, err := decodeQPBackup(key, in)
			if !decodeOK(t, in, err) {
				continue
			}
			e, err := encodeQPBackup(key, v, o, ver)
			if err != nil || !bytes.Equal(e, in) {
				t.Fatalf("%x %x -> %+v %+v %d -> %x, %v", key, in, v, o, ver, e, err)
			}
		}
	})
}

func FuzzDecodeMRBackup(f *testing.F) {
	key := encodeMRKey(mrKey(1))
	for _, o := range []Owner{{}, bob} {
		b, err := encodeMRBackup(key, mrVal(3), o, ^uint64(0))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(key, b)
		f.Add(key, b[:len(b)-crcLen])
	}
	f.Add(key, []byte{3})
	f.Fuzz(func(t *testing.T, key, b []byte) {
		for _, in := range sealed(key, b) {
			v, o, ver, err := decodeMRBackup(key, in)
			if !decodeOK(t, in, err) {
				continue
			}
			e, err := encodeMRBackup(key, v, o, ver)
			if err != nil || !bytes.Equal(e, in) {
				t.Fatalf("%x %x -> %+v %+v %d -> %x, %v", key, in, v, o, ver, e, err)
			}
		}
	})
}

func FuzzDecodeTomb(f *testing.F) {
	key := encodeRef(QPRef(qpKey(1)))
	b, err := encodeTomb(key, alice, 99)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(key, b)
	f.Add(key, b[:len(b)-crcLen])
	f.Add(key, []byte{2, 0})
	f.Fuzz(func(t *testing.T, key, b []byte) {
		for _, in := range sealed(key, b) {
			o, ver, err := decodeTomb(key, in)
			if !decodeOK(t, in, err) {
				continue
			}
			e, err := encodeTomb(key, o, ver)
			if err != nil || !bytes.Equal(e, in) {
				t.Fatalf("%x %x -> %+v %d -> %x, %v", key, in, o, ver, e, err)
			}
		}
	})
}

func FuzzDecodeV2QPBackup(f *testing.F) {
	for _, o := range fuzzOwners {
		b, err := encodeQPBackupV2(qpVal(3), o, 0x1234<<16|7)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{2, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, o, ver, err := decodeQPBackupV2(b)
		if err != nil {
			return
		}
		e, err := encodeQPBackupV2(v, o, ver)
		if err != nil || !bytes.Equal(e, b) {
			t.Fatalf("%x -> %+v %+v %d -> %x, %v", b, v, o, ver, e, err)
		}
	})
}

func FuzzDecodeV2MRBackup(f *testing.F) {
	for _, o := range []Owner{{}, bob} {
		b, err := encodeMRBackupV2(mrVal(3), o, ^uint64(0))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, o, ver, err := decodeMRBackupV2(b)
		if err != nil {
			return
		}
		e, err := encodeMRBackupV2(v, o, ver)
		if err != nil || !bytes.Equal(e, b) {
			t.Fatalf("%x -> %+v %+v %d -> %x, %v", b, v, o, ver, e, err)
		}
	})
}

func FuzzDecodeV2Tomb(f *testing.F) {
	b, err := encodeTombV2(alice, 99)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, ver, err := decodeTombV2(b)
		if err != nil {
			return
		}
		e, err := encodeTombV2(o, ver)
		if err != nil || !bytes.Equal(e, b) {
			t.Fatalf("%x -> %+v %d -> %x, %v", b, o, ver, e, err)
		}
	})
}

func FuzzDecodeRef(f *testing.F) {
	f.Add(encodeRef(QPRef(qpKey(1))))
	f.Add(encodeRef(MRRef(mrKey(2))))
	f.Add(make([]byte, refLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRef(b)
		if err == nil && !bytes.Equal(encodeRef(r), b) {
			t.Fatalf("%x -> %+v -> %x", b, r, encodeRef(r))
		}
	})
}

func FuzzDecodeV1QPBackup(f *testing.F) {
	for _, o := range fuzzOwners {
		b, err := encodeQPBackupV1(qpVal(3), o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{1, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, o, err := decodeQPBackupV1(b)
		if err != nil {
			return
		}
		e, err := encodeQPBackupV1(v, o)
		if err != nil || !bytes.Equal(e, b) {
			t.Fatalf("%x -> %+v %+v -> %x, %v", b, v, o, e, err)
		}
	})
}

func FuzzDecodeV1MRBackup(f *testing.F) {
	for _, o := range []Owner{{}, bob} {
		b, err := encodeMRBackupV1(mrVal(3), o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, o, err := decodeMRBackupV1(b)
		if err != nil {
			return
		}
		e, err := encodeMRBackupV1(v, o)
		if err != nil || !bytes.Equal(e, b) {
			t.Fatalf("%x -> %+v %+v -> %x, %v", b, v, o, e, err)
		}
	})
}

func FuzzDecodeV0QPBackup(f *testing.F) {
	f.Add(encodeQPBackupV0(qpVal(2)))
	f.Add([]byte{200})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeQPBackupV0(b)
		if err == nil && !bytes.Equal(encodeQPBackupV0(v), b) {
			t.Fatalf("%x -> %+v -> %x", b, v, encodeQPBackupV0(v))
		}
	})
}

func FuzzDecodeV0MRBackup(f *testing.F) {
	f.Add(encodeMRBackupV0(mrVal(2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeMRBackupV0(b)
		if err == nil && !bytes.Equal(encodeMRBackupV0(v), b) {
			t.Fatalf("%x -> %+v -> %x", b, v, encodeMRBackupV0(v))
		}
	})
}
