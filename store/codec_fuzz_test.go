package store

import (
	"bytes"
	"testing"
)

// Each fuzz test checks that the decoder never panics and that a value it
// accepts re-encodes to exactly the input (the encoding is canonical).

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

func FuzzDecodeQPBackup(f *testing.F) {
	for _, o := range []Owner{{}, alice, {Node: "n", PID: -1, Incarnation: ^uint64(0)}} {
		b, err := encodeQPBackup(qpVal(3), o, 0x1234<<16|7)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{2, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, o, ver, err := decodeQPBackup(b)
		if err != nil {
			return
		}
		e, err := encodeQPBackup(v, o, ver)
		if err != nil || !bytes.Equal(e, b) {
			t.Fatalf("%x -> %+v %+v %d -> %x, %v", b, v, o, ver, e, err)
		}
	})
}

func FuzzDecodeMRBackup(f *testing.F) {
	for _, o := range []Owner{{}, bob} {
		b, err := encodeMRBackup(mrVal(3), o, ^uint64(0))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, o, ver, err := decodeMRBackup(b)
		if err != nil {
			return
		}
		e, err := encodeMRBackup(v, o, ver)
		if err != nil || !bytes.Equal(e, b) {
			t.Fatalf("%x -> %+v %+v %d -> %x, %v", b, v, o, ver, e, err)
		}
	})
}

func FuzzDecodeTomb(f *testing.F) {
	b, err := encodeTomb(alice, 99)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, ver, err := decodeTomb(b)
		if err != nil {
			return
		}
		e, err := encodeTomb(o, ver)
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
	for _, o := range []Owner{{}, alice, {Node: "n", PID: -1, Incarnation: ^uint64(0)}} {
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
