package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ibpath/ibpath/verbs"
	bolt "go.etcd.io/bbolt"
)

func open(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func gid(b byte) verbs.GID {
	var g verbs.GID
	g[0], g[15] = 0xfe, b
	return g
}

var (
	alice  = Owner{Node: "node0", PID: 100, Incarnation: 1}
	alice2 = Owner{Node: "node0", PID: 100, Incarnation: 2}
	bob    = Owner{Node: "node1", PID: 200, Incarnation: 1}
)

func qpKey(i int) QPKey { return QPKey{GID: gid(byte(i)), LID: uint16(i), QPN: uint32(0x100 + i)} }
func qpVal(i int) QPBackup {
	return QPBackup{Device: "mlx5_1", Port: 1, GID: gid(byte(i + 1)), LID: uint16(1000 + i), QPN: uint32(0x200 + i)}
}

// qpMbox is qpVal(i) with a mailbox.
func qpMbox(i int) QPBackup {
	v := qpVal(i)
	v.MailboxAddr, v.MailboxRKey = uint64(0x7f00_0000_1000+i), uint32(0x500+i)
	return v
}

func mrKey(i int) MRKey { return MRKey{LID: uint16(i), RKey: uint32(0x300 + i)} }
func mrVal(i int) MRBackup {
	return MRBackup{RKey: uint32(0x400 + i), Addr: uint64(i) << 12, Length: 4096}
}

func TestPutGetRoundTrip(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer s.Close()
	if err := s.PutQP(alice, qpKey(1), qpVal(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMR(alice, mrKey(1), mrVal(1)); err != nil {
		t.Fatal(err)
	}
	v, o, err := s.GetQP(qpKey(1))
	if err != nil || v != qpVal(1) || o != alice {
		t.Fatalf("GetQP = %+v %v %v", v, o, err)
	}
	m, o, err := s.GetMR(mrKey(1))
	if err != nil || m != mrVal(1) || o != alice {
		t.Fatalf("GetMR = %+v %v %v", m, o, err)
	}
	if _, _, err := s.GetQP(qpKey(2)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing QP: %v", err)
	}
	if _, _, err := s.GetMR(mrKey(2)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing MR: %v", err)
	}
	// An owner may replace its own value; the same value again is a no-op.
	if err := s.PutQP(alice, qpKey(1), qpVal(9)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutQP(bob, qpKey(1), qpVal(9)); err != nil {
		t.Fatalf("same value from another owner: %v", err)
	}
	if v, o, _ := s.GetQP(qpKey(1)); v != qpVal(9) || o != alice {
		t.Fatalf("after replace: %+v %v", v, o)
	}
	if q, m := s.Entries(); q != 1 || m != 1 {
		t.Fatalf("entries %d %d", q, m)
	}
}

// TestMailboxValue: a backup with a mailbox is stored with the version-4
// layout and read back whole, across a reopen; one without keeps version
// 3, which a store that knows no mailbox reads; a version-4 value whose
// mailbox is zero is damage (it would not re-encode to its bytes).
func TestMailboxValue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := open(t, path)
	if err := s.PutQP(alice, qpKey(1), qpMbox(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutQP(alice, qpKey(2), qpVal(2)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	for i, want := range map[int]QPBackup{1: qpMbox(1), 2: qpVal(2)} {
		if v, _, err := s.GetQP(qpKey(i)); err != nil || v != want {
			t.Fatalf("GetQP(%d) = %+v, %v; want %+v", i, v, err, want)
		}
	}
	key := encodeQPKey(qpKey(1))
	for _, c := range []struct {
		v    QPBackup
		want byte
	}{{qpMbox(1), valueVersionMbox}, {qpVal(1), valueVersion}} {
		b, err := encodeQPBackup(key, c.v, alice, 1)
		if err != nil || b[0] != c.want {
			t.Fatalf("encode %+v: version %d, %v; want %d", c.v, b[0], err, c.want)
		}
	}
	zero, err := encodeQPBackupMbox(key, qpVal(1), alice, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := decodeQPBackup(key, zero); !errors.Is(err, ErrDamaged) {
		t.Fatalf("a version-4 value without a mailbox decoded: %v", err)
	}
}

func TestConflict(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer s.Close()
	if err := s.PutQP(alice, qpKey(1), qpVal(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutQP(bob, qpKey(1), qpVal(2)); !errors.Is(err, ErrConflict) {
		t.Fatalf("QP conflict: %v", err)
	}
	if err := s.PutMR(alice, mrKey(1), mrVal(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMR(alice2, mrKey(1), mrVal(2)); !errors.Is(err, ErrConflict) {
		t.Fatalf("MR conflict: %v", err)
	}
	if v, o, _ := s.GetQP(qpKey(1)); v != qpVal(1) || o != alice {
		t.Fatalf("conflict changed the entry: %+v %v", v, o)
	}
}

func TestInvalidNames(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer s.Close()
	long := string(make([]byte, 256))
	if err := s.PutQP(Owner{Node: long}, qpKey(1), qpVal(1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long node: %v", err)
	}
	if err := s.PutQP(alice, qpKey(1), QPBackup{Device: long}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long device: %v", err)
	}
}

func TestDurableAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{}) // fsync on
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := s.PutQP(alice, qpKey(i), qpVal(i)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutMR(bob, mrKey(i), mrVal(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	defer s.Close()
	for i := 0; i < 10; i++ {
		if v, o, err := s.GetQP(qpKey(i)); err != nil || v != qpVal(i) || o != alice {
			t.Fatalf("QP %d after reopen: %+v %v %v", i, v, o, err)
		}
		if v, o, err := s.GetMR(mrKey(i)); err != nil || v != mrVal(i) || o != bob {
			t.Fatalf("MR %d after reopen: %+v %v %v", i, v, o, err)
		}
	}
}

func TestRemoveOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := open(t, path)
	for i := 0; i < 6; i++ {
		o := []Owner{alice, alice2, bob}[i%3]
		if err := s.PutQP(o, qpKey(i), qpVal(i)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutMR(o, mrKey(i), mrVal(i)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.RemoveOwner(alice)
	if err != nil || n != 4 {
		t.Fatalf("RemoveOwner = %d, %v; want 4", n, err)
	}
	check := func(s *Store) {
		t.Helper()
		for i := 0; i < 6; i++ {
			_, _, qerr := s.GetQP(qpKey(i))
			_, _, merr := s.GetMR(mrKey(i))
			gone := i%3 == 0
			if gone != errors.Is(qerr, ErrNotFound) || gone != errors.Is(merr, ErrNotFound) {
				t.Fatalf("entry %d: QP %v, MR %v (removed: %v)", i, qerr, merr, gone)
			}
		}
		if q, m := s.Entries(); q != 4 || m != 4 {
			t.Fatalf("entries %d %d, want 4 4", q, m)
		}
	}
	check(s)
	if n, err := s.RemoveOwner(alice); err != nil || n != 0 {
		t.Fatalf("second RemoveOwner = %d, %v", n, err)
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	check(s)
	// The removed keys are free for a new owner.
	if err := s.PutQP(bob, qpKey(0), qpVal(7)); err != nil {
		t.Fatal(err)
	}
}

func TestClosed(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "s.db"))
	if err := s.PutQP(alice, qpKey(1), qpVal(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetQP(qpKey(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("GetQP: %v", err)
	}
	if _, _, err := s.GetMR(mrKey(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("GetMR: %v", err)
	}
	if err := s.PutQP(alice, qpKey(2), qpVal(2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("PutQP: %v", err)
	}
	if err := s.PutMR(alice, mrKey(2), mrVal(2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("PutMR: %v", err)
	}
	if _, err := s.RemoveOwner(alice); !errors.Is(err, ErrClosed) {
		t.Fatalf("RemoveOwner: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

func TestConcurrentWritersAndReaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{}) // fsync on, batched
	if err != nil {
		t.Fatal(err)
	}
	const writers, per = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers)
	for w := 0; w < writers; w++ {
		wg.Add(2)
		o := Owner{Node: "node0", PID: w, Incarnation: 1}
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				k := w*per + i
				if err := s.PutQP(o, qpKey(k), qpVal(k)); err != nil {
					errs <- err
					return
				}
				if err := s.PutMR(o, mrKey(k), mrVal(k)); err != nil {
					errs <- err
					return
				}
				if v, got, err := s.GetQP(qpKey(k)); err != nil || v != qpVal(k) || got != o {
					errs <- fmt.Errorf("read own write %d: %+v %v %v", k, v, got, err)
					return
				}
			}
		}()
		go func() { // a reader racing the writers
			defer wg.Done()
			for i := 0; i < 4*per; i++ {
				k := (w*7 + i) % (writers * per)
				if v, _, err := s.GetQP(qpKey(k)); err == nil && v != qpVal(k) {
					errs <- fmt.Errorf("read %d: %+v", k, v)
					return
				} else if err != nil && !errors.Is(err, ErrNotFound) {
					errs <- err
					return
				}
				s.Entries()
			}
		}()
	}
	// Two owners fight over one key: exactly one wins.
	var wins, conflicts int
	var mu sync.Mutex
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.PutQP(Owner{Node: "x", PID: w}, qpKey(9999), qpVal(w))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrConflict):
				conflicts++
			default:
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if wins != 1 || conflicts != 3 {
		t.Fatalf("%d wins, %d conflicts; want 1 and 3", wins, conflicts)
	}
	if q, m := s.Entries(); q != writers*per+1 || m != writers*per {
		t.Fatalf("entries %d %d", q, m)
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	if q, m := s.Entries(); q != writers*per+1 || m != writers*per {
		t.Fatalf("entries after reopen %d %d", q, m)
	}
}

// writeV0 builds a schema-0 file by hand: buckets qp and mr, values
// without version byte or owner, no meta bucket.
func writeV0(t *testing.T, path string) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		qb, err := tx.CreateBucket([]byte("qp"))
		if err != nil {
			return err
		}
		mb, err := tx.CreateBucket([]byte("mr"))
		if err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			if err := qb.Put(encodeQPKey(qpKey(i)), encodeQPBackupV0(qpVal(i))); err != nil {
				return err
			}
			if err := mb.Put(encodeMRKey(mrKey(i)), encodeMRBackupV0(mrVal(i))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func version(t *testing.T, path string) uint32 {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v uint32
	if err := db.View(func(tx *bolt.Tx) (err error) { v, err = fileVersion(tx); return }); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMigrateV0(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v0.db")
	writeV0(t, path)
	s := open(t, path)
	for i := 0; i < 3; i++ {
		if v, o, err := s.GetQP(qpKey(i)); err != nil || v != qpVal(i) || o != (Owner{}) {
			t.Fatalf("migrated QP %d: %+v %v %v", i, v, o, err)
		}
		if v, o, err := s.GetMR(mrKey(i)); err != nil || v != mrVal(i) || o != (Owner{}) {
			t.Fatalf("migrated MR %d: %+v %v %v", i, v, o, err)
		}
	}
	s.Close()
	if v := version(t, path); v != SchemaVersion {
		t.Fatalf("version %d after migration", v)
	}
	s = open(t, path) // a second Open finds version 1 and changes nothing
	defer s.Close()
	if n, err := s.RemoveOwner(Owner{}); err != nil || n != 6 {
		t.Fatalf("RemoveOwner(legacy) = %d, %v", n, err)
	}
}

func TestMigrateV0Corrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("qp"))
		if err != nil {
			return err
		}
		return b.Put(encodeQPKey(qpKey(1)), []byte{1, 2, 3})
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrDamaged) {
		t.Fatalf("corrupt v0: %v", err)
	}
	if v := version(t, path); v != 0 {
		t.Fatalf("a failed migration left version %d", v)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	s := open(t, path)
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyVersion, binary.BigEndian.AppendUint32(nil, SchemaVersion+1))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, ErrSchema) {
		t.Fatalf("newer schema: %v", err)
	}
	if v := version(t, path); v != SchemaVersion+1 {
		t.Fatalf("refused file was changed to version %d", v)
	}
}
