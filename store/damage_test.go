package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The tests below damage a store file the way a disk or an interrupted
// copy would, then open it: Open must return ErrDamaged, name the file,
// not panic or crash, and leave the file as it was.

// openDamaged opens path, which must be refused as damaged with an error
// holding every string of want, and checks that the file is unchanged.
func openDamaged(t *testing.T, path string, want ...string) error {
	t.Helper()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{NoSync: true, Timeout: time.Second})
	if err == nil {
		s.Close()
		t.Fatal("a damaged file opened")
	}
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("error %v is not ErrDamaged", err)
	}
	t.Log(err)
	for _, w := range append([]string{"store: ", path}, want...) {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not say %q", err, w)
		}
	}
	after, rerr := os.ReadFile(path)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("Open changed the damaged file")
	}
	return err
}

// markerQP is an entry whose device name is findable in the file.
func markerQP(name string) (QPKey, QPBackup) {
	return QPKey{GID: gid(0xee), LID: 0xeeee, QPN: 0xeeee}, QPBackup{Device: name, Port: 2, LID: 7, QPN: 0x77}
}

// writeMarked writes n QP and n MR entries, then, last, what mark writes
// (one entry holding a distinctive name), and closes the store. The
// name's bytes are then in the file exactly once: in the page bbolt reads
// the entry from (the page's older copies, freed, did not hold it).
// It returns the name's offset in the file.
func writeMarked(t *testing.T, path string, n int, name string, mark func(*Store) error) int {
	t.Helper()
	s := open(t, path)
	var recs []Record
	for i := 0; i < n; i++ {
		recs = append(recs,
			QPEntry{Key: qpKey(i), Value: qpVal(i), Owner: alice, Version: uint64(1 + i)}.Record(),
			MREntry{Key: mrKey(i), Value: mrVal(i), Owner: bob, Version: uint64(1 + i)}.Record())
	}
	if _, err := s.Apply(recs); err != nil {
		t.Fatal(err)
	}
	if err := mark(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c := bytes.Count(b, []byte(name)); c != 1 {
		t.Fatalf("%q is %d times in the file, want once", name, c)
	}
	return bytes.Index(b, []byte(name))
}

func putMarker(name string) func(*Store) error {
	return func(s *Store) error {
		k, v := markerQP(name)
		return s.PutQP(alice, k, v)
	}
}

// patch rewrites the bytes of path at off.
func patch(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// boltFile describes a closed bbolt file: its page size, the size its
// meta page counts (tx.Size) and the freelist page of the meta in use.
type boltFile struct {
	pageSize int64
	size     int64
	freelist int64
}

func inspect(t *testing.T, path string) boltFile {
	t.Helper()
	db, err := bolt.Open(path, 0, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bf := boltFile{pageSize: int64(db.Info().PageSize)}
	if err := db.View(func(tx *bolt.Tx) error {
		bf.size = tx.Size()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The meta in use is the valid one with the larger transaction id
	// (magic at 16, freelist at 48, txid at 64).
	var txid uint64
	for _, off := range []int64{0, bf.pageSize} {
		m := b[off:]
		if binary.NativeEndian.Uint32(m[16:]) == boltMagic && binary.NativeEndian.Uint64(m[64:]) >= txid {
			txid, bf.freelist = binary.NativeEndian.Uint64(m[64:]), int64(binary.NativeEndian.Uint64(m[48:]))
		}
	}
	return bf
}

func TestDamagedValueByteFlipped(t *testing.T) {
	for _, tc := range []struct {
		name string
		mark func(*Store) error
	}{
		{"mlx5_marker_qp", putMarker("mlx5_marker_qp")},
		{"node_marker_mr", func(s *Store) error {
			return s.PutMR(Owner{Node: "node_marker_mr", PID: 9, Incarnation: 9}, mrKey(999), mrVal(999))
		}},
		{"node_marker_tomb", func(s *Store) error {
			_, err := s.Apply([]Record{{Stamp: Stamp{Ref: QPRef(qpKey(999)), Owner: Owner{Node: "node_marker_tomb"}, Version: 77, Deleted: true}}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.db")
			off := writeMarked(t, path, 5, tc.name, tc.mark)
			b, _ := os.ReadFile(path)
			patch(t, path, int64(off+3), []byte{b[off+3] ^ 0x20}) // one letter's case
			err := openDamaged(t, path, "fails its checksum")
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v is not ErrInvalid", err)
			}
		})
	}
}

func TestDamagedValueUnderAnotherKey(t *testing.T) {
	for _, tc := range []struct {
		bucket []byte
		from   []byte
		to     []byte
	}{
		{bucketQP, encodeQPKey(qpKey(1)), encodeQPKey(qpKey(2))},
		{bucketMR, encodeMRKey(mrKey(1)), encodeMRKey(mrKey(2))},
		{bucketTomb, encodeRef(QPRef(qpKey(7))), encodeRef(QPRef(qpKey(8)))},
	} {
		t.Run(string(tc.bucket), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.db")
			s := open(t, path)
			for i := 0; i < 3; i++ {
				if err := s.PutQP(alice, qpKey(i), qpVal(i)); err != nil {
					t.Fatal(err)
				}
				if err := s.PutMR(alice, mrKey(i), mrVal(i)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Apply([]Record{
				{Stamp: Stamp{Ref: QPRef(qpKey(7)), Owner: bob, Version: 70, Deleted: true}},
				{Stamp: Stamp{Ref: QPRef(qpKey(8)), Owner: alice, Version: 80, Deleted: true}},
			}); err != nil {
				t.Fatal(err)
			}
			s.Close()
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(tc.bucket)
				return b.Put(tc.to, bytes.Clone(b.Get(tc.from)))
			}); err != nil {
				t.Fatal(err)
			}
			db.Close()
			err = openDamaged(t, path, "fails its checksum", string(tc.bucket))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v is not ErrInvalid", err)
			}
		})
	}
}

func TestDamagedTruncated(t *testing.T) {
	src := filepath.Join(t.TempDir(), "full.db")
	writeMarked(t, src, 200, "mlx5_trunc", putMarker("mlx5_trunc"))
	full, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	bf := inspect(t, src)
	for _, tc := range []struct {
		name string
		size int64
		want string
	}{
		{"half", int64(len(full)) / 2, "truncated"},
		{"past the meta pages", 2*bf.pageSize + 100, "truncated"},
		{"inside the meta pages", bf.pageSize + 100, ""},
		{"one page", bf.pageSize, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.size >= bf.size {
				t.Fatalf("cutting to %d bytes keeps every page (%d bytes)", tc.size, bf.size)
			}
			path := filepath.Join(t.TempDir(), "s.db")
			if err := os.WriteFile(path, full[:tc.size], 0o600); err != nil {
				t.Fatal(err)
			}
			openDamaged(t, path, tc.want)
		})
	}
}

// markerPage returns the page holding the marker entry, checking that it
// is the qp bucket's root page (a leaf, not inline in its parent).
func markerPage(t *testing.T, path string, off int) int64 {
	t.Helper()
	bf := inspect(t, path)
	page := int64(off) / bf.pageSize
	db, err := bolt.Open(path, 0, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root uint64
	db.View(func(tx *bolt.Tx) error {
		root = uint64(tx.Bucket(bucketQP).Root())
		return nil
	})
	if root != uint64(page) {
		t.Fatalf("the marker is on page %d, the qp bucket's root is page %d", page, root)
	}
	return page
}

func TestDamagedPageHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	off := writeMarked(t, path, 20, "mlx5_header", putMarker("mlx5_header"))
	page := markerPage(t, path, off)
	patch(t, path, page*inspect(t, path).pageSize, bytes.Repeat([]byte{0xa5}, 16))
	openDamaged(t, path, "a page does not parse")
}

// TestDamagedPageFault: an entry of a leaf page points past the end of the
// file, into bbolt's memory map (which is larger than the file): reading
// it raises SIGBUS, which must become ErrDamaged rather than end the
// process.
func TestDamagedPageFault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	off := writeMarked(t, path, 20, "mlx5_fault", putMarker("mlx5_fault"))
	page := markerPage(t, path, off)
	bf := inspect(t, path)
	// Drop the file's unused tail (no damage): bbolt maps a power of two
	// of at least 32 KiB, so the map now reaches past the end of the file.
	if err := os.Truncate(path, bf.size); err != nil {
		t.Fatal(err)
	}
	mapped := int64(32 << 10)
	for mapped < bf.size {
		mapped *= 2
	}
	if mapped == bf.size {
		t.Fatalf("the file has %d bytes of pages; the map would not reach past it", bf.size)
	}
	if s, err := Open(path, Options{NoSync: true}); err != nil {
		t.Fatalf("the file cut to its pages: %v", err)
	} else {
		s.Close()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Leaf elements follow the 16-byte page header: flags, pos (from the
	// element), ksize, vsize, each u32.
	p := page * bf.pageSize
	count := int64(binary.NativeEndian.Uint16(b[p+10:]))
	k, _ := markerQP("")
	key := encodeQPKey(k)
	for i := int64(0); i < count; i++ {
		e := p + 16 + 16*i
		pos, ksize := int64(binary.NativeEndian.Uint32(b[e+4:])), int64(binary.NativeEndian.Uint32(b[e+8:]))
		if bytes.Equal(b[e+pos:e+pos+ksize], key) {
			patch(t, path, e+4, binary.NativeEndian.AppendUint32(nil, uint32(bf.size-e)))
			openDamaged(t, path, "a page does not parse")
			return
		}
	}
	t.Fatal("the marker's key is not on its page")
}

// TestDamagedKeysOutOfOrder: two entries of a leaf page trade places.
// Each key keeps its value (both pass their checksum), but lookups, which
// writes use, would miss them. Open's walk finds it (and tx.Check would).
func TestDamagedKeysOutOfOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	off := writeMarked(t, path, 20, "mlx5_order", putMarker("mlx5_order"))
	p := markerPage(t, path, off) * inspect(t, path).pageSize
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Elements 0 and 1 (16 bytes each, after the page header); pos, at 4,
	// counts from the element.
	e0, e1 := p+16, p+32
	k0 := e0 + int64(binary.NativeEndian.Uint32(b[e0+4:]))
	k1 := e1 + int64(binary.NativeEndian.Uint32(b[e1+4:]))
	patch(t, path, e0+4, binary.NativeEndian.AppendUint32(nil, uint32(k1-e0)))
	patch(t, path, e1+4, binary.NativeEndian.AppendUint32(nil, uint32(k0-e1)))
	openDamaged(t, path)
}

func TestDamagedMetaPageHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	writeMarked(t, path, 3, "mlx5_meta", putMarker("mlx5_meta"))
	bf := inspect(t, path)
	patch(t, path, bf.pageSize, []byte{0x41}) // page 1's id
	openDamaged(t, path, "meta page 1")
}

func TestDamagedFreelistPageHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	writeMarked(t, path, 3, "mlx5_free", putMarker("mlx5_free"))
	bf := inspect(t, path)
	patch(t, path, bf.freelist*bf.pageSize+1, []byte{0x41}) // its id, flags intact
	openDamaged(t, path, "freelist page")
}

// TestDamagedFreelistListsLivePage: the freelist names the page that holds
// entries, so the next write would overwrite them. bbolt's tx.Check finds
// it.
func TestDamagedFreelistListsLivePage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	off := writeMarked(t, path, 20, "mlx5_live", putMarker("mlx5_live"))
	page := markerPage(t, path, off)
	bf := inspect(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fl := bf.freelist * bf.pageSize
	count := binary.NativeEndian.Uint16(b[fl+10:])
	if count >= 100 {
		t.Fatalf("freelist of %d ids", count)
	}
	patch(t, path, fl+16+8*int64(count), binary.NativeEndian.AppendUint64(nil, uint64(page)))
	patch(t, path, fl+10, binary.NativeEndian.AppendUint16(nil, count+1))
	openDamaged(t, path, "freed")
}

func TestDamagedMissingBucket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := open(t, path)
	if err := s.PutQP(alice, qpKey(1), qpVal(1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketTomb) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	openDamaged(t, path, `no "tomb" bucket`)
}

func TestDamagedGarbageFile(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	random := func(n int) []byte {
		b := make([]byte, n)
		rnd.Read(b)
		return b
	}
	store := filepath.Join(t.TempDir(), "good.db")
	writeMarked(t, store, 3, "mlx5_good", putMarker("mlx5_good"))
	good, err := os.ReadFile(store)
	if err != nil {
		t.Fatal(err)
	}
	ps := int(inspect(t, store).pageSize)
	badMetas := bytes.Clone(good)
	badMetas[72] ^= 1    // meta page 0's checksum
	badMetas[ps+72] ^= 1 // meta page 1's
	otherVersion := bytes.Clone(good)
	otherVersion[20] ^= 1    // meta page 0's bbolt format version
	otherVersion[ps+20] ^= 1 // meta page 1's
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"100 random bytes", random(100), "no valid meta page"},
		{"3000 random bytes", random(3000), "file size too small"},
		{"5000 random bytes", random(5000), "file size too small"},
		{"10000 random bytes", random(10000), "no valid meta page"},
		{"64 KiB random", random(64 << 10), "no valid meta page"},
		{"text", bytes.Repeat([]byte("not a bbolt file "), 2000), "no valid meta page"},
		{"meta checksums", badMetas, "meta pages fail their checksum"},
		{"meta versions", otherVersion, "unknown bbolt format version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.db")
			if err := os.WriteFile(path, tc.b, 0o600); err != nil {
				t.Fatal(err)
			}
			openDamaged(t, path, tc.want)
		})
	}
}

func TestEmptyFileOpensEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	if q, m := s.Entries(); q != 0 || m != 0 || s.Tombstones() != 0 {
		t.Fatalf("entries %d %d, tombstones %d", q, m, s.Tombstones())
	}
	if err := s.PutQP(alice, qpKey(1), qpVal(1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	if v, _, err := s.GetQP(qpKey(1)); err != nil || v != qpVal(1) {
		t.Fatalf("after reopen: %+v %v", v, err)
	}
}

// TestLockTimeoutIsNotDamage: a file locked by another open store is not
// damaged; Open reports it locked (bbolt's timeout).
func TestLockTimeoutIsNotDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := open(t, path)
	defer s.Close()
	_, err := Open(path, Options{NoSync: true, Timeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrLocked) || !errors.Is(err, bolt.ErrTimeout) || errors.Is(err, ErrDamaged) {
		t.Fatalf("locked file: %v, want ErrLocked, a timeout that is not ErrDamaged", err)
	}
}

// TestChecksumCoversKeyAndValue: changing any byte of a value, or of its
// key, fails the checksum.
func TestChecksumCoversKeyAndValue(t *testing.T) {
	qk, mk, tk := encodeQPKey(qpKey(1)), encodeMRKey(mrKey(1)), encodeRef(MRRef(mrKey(1)))
	qv, err := encodeQPBackup(qk, qpVal(1), alice, 5)
	if err != nil {
		t.Fatal(err)
	}
	mv, err := encodeMRBackup(mk, mrVal(1), bob, 6)
	if err != nil {
		t.Fatal(err)
	}
	tv, err := encodeTomb(tk, alice, 7)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		key, v []byte
		decode func(k, v []byte) error
	}{
		{"qp", qk, qv, func(k, v []byte) error { _, _, _, err := decodeQPBackup(k, v); return err }},
		{"mr", mk, mv, func(k, v []byte) error { _, _, _, err := decodeMRBackup(k, v); return err }},
		{"tomb", tk, tv, func(k, v []byte) error { _, _, err := decodeTomb(k, v); return err }},
	} {
		if err := tc.decode(tc.key, tc.v); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, b := range [][]byte{tc.key, tc.v} {
			for i := range b {
				for _, bit := range []byte{0x01, 0x80, 0xff} {
					b[i] ^= bit
					err := tc.decode(tc.key, tc.v)
					b[i] ^= bit
					if !errors.Is(err, ErrDamaged) || !errors.Is(err, ErrInvalid) {
						t.Fatalf("%s: byte %d of %x ^ %#x: %v", tc.name, i, b, bit, err)
					}
				}
			}
		}
		if err := tc.decode(tc.key, tc.v[:len(tc.v)-1]); !errors.Is(err, ErrDamaged) {
			t.Fatalf("%s: cut value: %v", tc.name, err)
		}
	}
}

// TestFromFile: a panic raised in bbolt is damage; one raised by this
// package's code is a bug, which Open does not take for damage.
func TestFromFile(t *testing.T) {
	catch := func(f func()) (from bool) {
		defer func() { from = fromFile(recover()) }()
		f()
		return false
	}
	if !catch(func() { (*bolt.Tx)(nil).Bucket(bucketQP) }) {
		t.Fatal("a panic in bbolt is not from the file")
	}
	if catch(func() {
		var m map[string]int
		m["x"]++
	}) {
		t.Fatal("a panic in this package is taken for damage")
	}
}

// writeV2 builds a schema-2 file by hand: values without checksums.
func writeV2(t *testing.T, path string) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		qb, err := tx.CreateBucket(bucketQP)
		if err != nil {
			return err
		}
		mb, err := tx.CreateBucket(bucketMR)
		if err != nil {
			return err
		}
		tb, err := tx.CreateBucket(bucketTomb)
		if err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			q, _ := encodeQPBackupV2(qpVal(i), alice, uint64(100+i))
			m, _ := encodeMRBackupV2(mrVal(i), bob, uint64(200+i))
			tv, _ := encodeTombV2(bob, uint64(300+i))
			if err := qb.Put(encodeQPKey(qpKey(i)), q); err != nil {
				return err
			}
			if err := mb.Put(encodeMRKey(mrKey(i)), m); err != nil {
				return err
			}
			if err := tb.Put(encodeRef(QPRef(qpKey(10+i))), tv); err != nil {
				return err
			}
		}
		return setVersion(tx, 2)
	}); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateV2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	writeV2(t, path)
	check := func(s *Store) {
		t.Helper()
		for i := 0; i < 3; i++ {
			if r, ok := s.Record(QPRef(qpKey(i))); !ok || r.QP != qpVal(i) || r.Owner != alice || r.Version != uint64(100+i) {
				t.Fatalf("migrated QP %d: %+v %v", i, r, ok)
			}
			if r, ok := s.Record(MRRef(mrKey(i))); !ok || r.MR != mrVal(i) || r.Owner != bob || r.Version != uint64(200+i) {
				t.Fatalf("migrated MR %d: %+v %v", i, r, ok)
			}
			if r, ok := s.Record(QPRef(qpKey(10 + i))); !ok || !r.Deleted || r.Owner != bob || r.Version != uint64(300+i) {
				t.Fatalf("migrated tombstone %d: %+v %v", i, r, ok)
			}
		}
		if q, m := s.Entries(); q != 3 || m != 3 || s.Tombstones() != 3 {
			t.Fatalf("entries %d %d, tombstones %d", q, m, s.Tombstones())
		}
	}
	s := open(t, path)
	check(s)
	s.Close()
	if v := version(t, path); v != 3 {
		t.Fatalf("version %d after migration", v)
	}
	s = open(t, path) // schema 3 now: every value passes its checksum
	defer s.Close()
	check(s)
}

func TestMigrateV2Corrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.db")
	writeV2(t, path)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTomb).Put(encodeRef(MRRef(mrKey(9))), []byte{1, 2})
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	err = openDamaged(t, path, "migrate tombstone")
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v is not ErrInvalid", err)
	}
	if v := version(t, path); v != 2 {
		t.Fatalf("a failed migration left version %d", v)
	}
}
