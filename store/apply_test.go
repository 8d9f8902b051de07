package store

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func qpRec(i int, o Owner, ver uint64) Record {
	return QPEntry{Key: qpKey(i), Value: qpVal(i), Owner: o, Version: ver}.Record()
}

func TestLocalWritesGetIncreasingVersions(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer s.Close()
	before := time.Now().Add(-time.Millisecond)
	var last uint64
	for i := 0; i < 5; i++ {
		if err := s.PutQP(alice, qpKey(i), qpVal(i)); err != nil {
			t.Fatal(err)
		}
		r, ok := s.Record(QPRef(qpKey(i)))
		if !ok || r.Version <= last || r.Owner != alice || r.QP != qpVal(i) {
			t.Fatalf("entry %d: %+v %v (previous version %d)", i, r, ok, last)
		}
		last = r.Version
	}
	if vt := VersionTime(last); vt.Before(before) || vt.After(time.Now().Add(time.Second)) {
		t.Fatalf("version time %v, want about now", vt)
	}
	// The same value again keeps the version; a replaced value gets a new one.
	if err := s.PutQP(alice, qpKey(4), qpVal(4)); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Record(QPRef(qpKey(4))); r.Version != last {
		t.Fatalf("republish changed the version %d -> %d", last, r.Version)
	}
	if err := s.PutQP(alice, qpKey(4), qpVal(40)); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Record(QPRef(qpKey(4))); r.Version <= last {
		t.Fatalf("replace kept version %d (was %d)", r.Version, last)
	}
}

func TestApplyLastWriterWins(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := open(t, path)
	apply := func(r Record) bool {
		t.Helper()
		n, err := s.Apply([]Record{r})
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if !apply(qpRec(1, bob, 100)) {
		t.Fatal("first record not applied")
	}
	if apply(qpRec(1, bob, 100)) {
		t.Fatal("the same record applied twice")
	}
	older := qpRec(1, alice, 99)
	older.QP.QPN = 1
	if apply(older) {
		t.Fatal("an older record won")
	}
	// Same version: the larger owner string wins ("node1/..." > "node0/...").
	tie := qpRec(1, alice, 100)
	tie.QP.QPN = 2
	if apply(tie) {
		t.Fatal("the smaller owner won a tie")
	}
	newer := qpRec(1, alice, 101)
	newer.QP.QPN = 3
	if !apply(newer) {
		t.Fatal("a newer record lost")
	}
	if v, o, err := s.GetQP(qpKey(1)); err != nil || v.QPN != 3 || o != alice {
		t.Fatalf("after LWW: %+v %v %v", v, o, err)
	}
	// A replicated record skips local conflict rules, and moves the clock.
	far := uint64(time.Now().Add(time.Hour).UnixMilli()) << 16
	mr := MREntry{Key: mrKey(1), Value: mrVal(1), Owner: bob, Version: far}
	if ok, err := s.ApplyMR(mr); err != nil || !ok {
		t.Fatalf("ApplyMR = %v, %v", ok, err)
	}
	if err := s.PutQP(alice, qpKey(2), qpVal(2)); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Record(QPRef(qpKey(2))); r.Version <= far {
		t.Fatalf("local version %d not past the observed %d", r.Version, far)
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	if got := s.MREntries(); len(got) != 1 || got[0] != mr {
		t.Fatalf("MREntries after reopen = %+v", got)
	}
	if got := s.QPEntries(); len(got) != 2 || got[0].Value.QPN != 3 || got[0].Version != 101 {
		t.Fatalf("QPEntries after reopen = %+v", got)
	}
}

func TestTombstones(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := open(t, path)
	for i := 0; i < 3; i++ {
		if err := s.PutQP(alice, qpKey(i), qpVal(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutMR(alice, mrKey(0), mrVal(0)); err != nil {
		t.Fatal(err)
	}
	old, _ := s.Record(QPRef(qpKey(0)))
	old2, _ := s.Record(QPRef(qpKey(2)))
	ts, err := s.RemoveOwnerTombstones(alice)
	if err != nil || len(ts) != 4 {
		t.Fatalf("RemoveOwnerTombstones = %d, %v", len(ts), err)
	}
	if s.Tombstones() != 4 {
		t.Fatalf("%d tombstones", s.Tombstones())
	}
	for _, tb := range ts {
		if tb.Version <= old.Version || tb.Owner != alice {
			t.Fatalf("tombstone %+v not after entry %d", tb, old.Version)
		}
	}
	// The old entry replicated back is not resurrected.
	if n, err := s.Apply([]Record{old}); err != nil || n != 0 {
		t.Fatalf("old entry applied over its tombstone: %d, %v", n, err)
	}
	if _, _, err := s.GetQP(qpKey(0)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resurrected: %v", err)
	}
	// A newer entry replaces the tombstone; so does a local write.
	if n, err := s.Apply([]Record{qpRec(0, bob, ts[0].Version+1)}); err != nil || n != 1 {
		t.Fatalf("newer entry over tombstone: %d, %v", n, err)
	}
	if err := s.PutQP(bob, qpKey(1), qpVal(1)); err != nil {
		t.Fatal(err)
	}
	if s.Tombstones() != 2 {
		t.Fatalf("%d tombstones after two rewrites, want 2", s.Tombstones())
	}
	// A replicated tombstone deletes an older entry.
	r2, _ := s.Record(QPRef(qpKey(1)))
	if ok, err := s.ApplyTombstone(Tombstone{Ref: r2.Ref, Owner: bob, Version: r2.Version + 1}); err != nil || !ok {
		t.Fatalf("ApplyTombstone = %v, %v", ok, err)
	}
	if _, _, err := s.GetQP(qpKey(1)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("tombstone did not delete: %v", err)
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	if s.Tombstones() != 3 || len(s.TombstoneList()) != 3 {
		t.Fatalf("%d tombstones after reopen, want 3", s.Tombstones())
	}
	if n, err := s.CollectTombstones(time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("collect of nothing old = %d, %v", n, err)
	}
	if n, err := s.CollectTombstones(time.Now().Add(time.Second)); err != nil || n != 3 {
		t.Fatalf("collect = %d, %v", n, err)
	}
	if s.Tombstones() != 0 {
		t.Fatalf("%d tombstones after collection", s.Tombstones())
	}
	// Once collected, the old entry can come back: the documented risk.
	if n, err := s.Apply([]Record{old2}); err != nil || n != 1 {
		t.Fatalf("apply after collection = %d, %v", n, err)
	}
}

func TestDigests(t *testing.T) {
	a := open(t, filepath.Join(t.TempDir(), "a.db"))
	defer a.Close()
	b := open(t, filepath.Join(t.TempDir(), "b.db"))
	defer b.Close()
	for i := 0; i < 4; i++ {
		o := []Owner{alice, bob}[i%2]
		if err := a.PutQP(o, qpKey(i), qpVal(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.RemoveOwner(alice2); err != nil {
		t.Fatal(err)
	}
	da := a.Digests()
	if len(da) != 2 || da[0].Origin != "node0" || da[0].Count != 2 || da[1].Count != 2 {
		t.Fatalf("digests %+v", da)
	}
	// Copy node0's stamps to b: node0 digests match, node1 differ.
	var recs []Record
	for _, st := range a.Stamps("node0") {
		r, ok := a.Record(st.Ref)
		if !ok {
			t.Fatalf("no record for %+v", st)
		}
		recs = append(recs, r)
	}
	if n, err := b.Apply(recs); err != nil || n != 2 {
		t.Fatalf("apply = %d, %v", n, err)
	}
	db := b.Digests()
	if len(db) != 1 || db[0] != da[0] {
		t.Fatalf("b digests %+v, a %+v", db, da)
	}
	// A different version of one entry changes the hash, not the count.
	r, _ := a.Record(QPRef(qpKey(0)))
	r.Version++
	if _, err := b.Apply([]Record{r}); err != nil {
		t.Fatal(err)
	}
	if db = b.Digests(); db[0].Count != da[0].Count || db[0].Hash == da[0].Hash {
		t.Fatalf("changed version: b %+v, a %+v", db[0], da[0])
	}
}

// writeV1 builds a schema-1 file by hand.
func writeV1(t *testing.T, path string) {
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
		for i := 0; i < 3; i++ {
			q, _ := encodeQPBackupV1(qpVal(i), alice)
			m, _ := encodeMRBackupV1(mrVal(i), bob)
			if err := qb.Put(encodeQPKey(qpKey(i)), q); err != nil {
				return err
			}
			if err := mb.Put(encodeMRKey(mrKey(i)), m); err != nil {
				return err
			}
		}
		return setVersion(tx, 1)
	}); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateV1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	writeV1(t, path)
	s := open(t, path)
	for i := 0; i < 3; i++ {
		if r, ok := s.Record(QPRef(qpKey(i))); !ok || r.QP != qpVal(i) || r.Owner != alice || r.Version != 0 {
			t.Fatalf("migrated QP %d: %+v %v", i, r, ok)
		}
		if r, ok := s.Record(MRRef(mrKey(i))); !ok || r.MR != mrVal(i) || r.Owner != bob || r.Version != 0 {
			t.Fatalf("migrated MR %d: %+v %v", i, r, ok)
		}
	}
	// Any replicated write wins over a migrated entry.
	if n, err := s.Apply([]Record{qpRec(0, bob, 1)}); err != nil || n != 1 {
		t.Fatalf("apply over migrated = %d, %v", n, err)
	}
	s.Close()
	if v := version(t, path); v != SchemaVersion {
		t.Fatalf("version %d after migration", v)
	}
}

func TestMigrateV1Corrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.db")
	writeV1(t, path)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMR).Put(encodeMRKey(mrKey(9)), []byte{1, 2})
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrDamaged) {
		t.Fatalf("corrupt v1: %v", err)
	}
	if v := version(t, path); v != 1 {
		t.Fatalf("a failed migration left version %d", v)
	}
}

func TestApplyRejectsInvalid(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer s.Close()
	if _, err := s.Apply([]Record{{Stamp: Stamp{Ref: Ref{Kind: 9}}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad kind: %v", err)
	}
	if _, err := s.Apply([]Record{qpRec(1, Owner{Node: string(make([]byte, 300))}, 1)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long node: %v", err)
	}
	s.Close()
	if _, err := s.Apply([]Record{qpRec(1, bob, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}
