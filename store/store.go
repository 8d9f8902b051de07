package store

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Options configure Open.
type Options struct {
	// Timeout bounds the wait for the file lock held by another process;
	// 0 waits forever.
	Timeout time.Duration
	// NoSync skips fsync on commit. Only for tests: by default every
	// commit is fsync'd before a Put or RemoveOwner returns.
	NoSync bool
	// MaxBatchDelay is how long a write waits for other writers to join
	// its transaction before committing; 0 means DefaultMaxBatchDelay.
	// A lone writer pays this delay on every write.
	MaxBatchDelay time.Duration
	// MaxBatchSize commits a batch as soon as this many writes joined it;
	// 0 keeps bbolt's default (1000).
	MaxBatchSize int
}

// DefaultMaxBatchDelay replaces bbolt's 10 ms: with 64 concurrent writers
// 1 ms commits more entries per second, and a lone writer (a process
// publishing its QPs one by one) waits 1 ms instead of 10 per write.
// See docs/PERFORMANCE.md, "Store".
const DefaultMaxBatchDelay = time.Millisecond

// Store is the bbolt-backed store of backup attributes. It is safe for
// concurrent use.
//
// Writes (PutQP, PutMR, RemoveOwner, Apply, CollectTombstones) go through
// bbolt's DB.Batch: concurrent writers are coalesced into one fsync'd
// transaction (up to Options.MaxBatchSize calls or Options.MaxBatchDelay
// of waiting), and each call returns only after its transaction is
// durable. Reads (GetQP, GetMR, Entries, the listings and digests) are
// served from memory and never touch the file.
type Store struct {
	db     *bolt.DB
	c      cache
	clock  hlc
	life   sync.RWMutex // held shared by writers, exclusively by Close
	closed atomic.Bool
}

// Open opens or creates the store at path, migrates an older schema and
// loads every entry into memory. A file of a newer schema is refused with
// ErrSchema. A damaged file is refused with ErrDamaged, whose message
// names the file and what was found, and left as it was: it is not a
// bbolt file, it is shorter than its pages, a page does not parse (bbolt
// panics or faults reading it, or tx.Check finds it inconsistent), a
// bucket is missing, or a key or value does not decode or fails its
// checksum (see damage.go). A lock
// held by another process past Options.Timeout is ErrLocked (wrapping
// bbolt's ErrTimeout), not damage. A 0-byte file opens as an empty store.
func Open(path string, opts Options) (s *Store, err error) {
	// A fault reading bbolt's memory map (a page past the end of the file,
	// a wild offset in a page) becomes a panic, recovered below.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var (
		db   *bolt.DB
		file *os.File // bbolt's handle on the file
	)
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if !fromFile(r) {
			panic(r)
		}
		if db != nil {
			db.Close()
		} else if file != nil {
			file.Close()
		}
		what := fmt.Sprint(r)
		if f, ok := r.(interface{ Addr() uintptr }); ok {
			what = fmt.Sprintf("memory fault at %#x reading bbolt's map of the file", f.Addr())
		}
		s, err = nil, fmt.Errorf("store: open %s: %w: a page does not parse: %s", path, ErrDamaged, what)
	}()
	if err := precheck(path, opts.Timeout); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.Timeout, NoSync: opts.NoSync, OpenFile: keep(&file)})
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, openError(err, false))
	}
	db.MaxBatchDelay = DefaultMaxBatchDelay
	if opts.MaxBatchDelay > 0 {
		db.MaxBatchDelay = opts.MaxBatchDelay
	}
	if opts.MaxBatchSize > 0 {
		db.MaxBatchSize = opts.MaxBatchSize
	}
	fail := func(format string, err error) (*Store, error) {
		db.Close()
		return nil, fmt.Errorf(format, path, err)
	}
	if err := db.View(func(tx *bolt.Tx) error { return check(file, tx) }); err != nil {
		return fail("store: open %s: %w", err)
	}
	if err := migrate(db); err != nil {
		return fail("store: open %s: %w", err)
	}
	s = &Store{db: db}
	var maxVer uint64
	if err := db.View(func(tx *bolt.Tx) (err error) {
		maxVer, err = s.c.load(tx)
		return err
	}); err != nil {
		return fail("store: load %s: %w", err)
	}
	s.clock.observe(maxVer)
	return s, nil
}

// Close closes the file. Later calls return ErrClosed.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed.Swap(true) {
		return ErrClosed
	}
	return s.db.Close()
}

// write runs fn in a batched transaction, then refreshes the cache for the
// keys fn reports.
func (s *Store) write(fn func(*bolt.Tx) error, keys func() []Ref) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.db.Batch(fn); err != nil {
		return err
	}
	return s.c.refresh(s.db, keys())
}

// PutQP records that the default QP k is backed by v, owned by o, under a
// new version from this node's clock. Publishing an existing value again
// is a no-op (the entry keeps its owner and version); an owner may
// replace its own value; a different value for a key of another owner is
// ErrConflict. A tombstone of k is replaced by the new entry.
func (s *Store) PutQP(o Owner, k QPKey, v QPBackup) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.c.mu.RLock()
	old, ok := s.c.qps[k]
	s.c.mu.RUnlock()
	if ok && old.v == v {
		return nil
	}
	if ok && old.o != o {
		return fmt.Errorf("put QP %+v: %w (owner %v has %+v)", k, ErrConflict, old.o, old.v)
	}
	key, ref := encodeQPKey(k), QPRef(k)
	if _, err := encodeQPBackup(key, v, o, 0); err != nil {
		return err
	}
	var conflict error
	err := s.write(func(tx *bolt.Tx) error {
		conflict = nil
		b := tx.Bucket(bucketQP)
		if cur := b.Get(key); cur != nil {
			cv, co, _, err := decodeQPBackup(key, cur)
			if err != nil {
				return err
			}
			if cv == v {
				return nil
			}
			if co != o {
				conflict = fmt.Errorf("put QP %+v: %w (owner %v has %+v)", k, ErrConflict, co, cv)
				return nil
			}
		}
		enc, err := encodeQPBackup(key, v, o, s.clock.next())
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketTomb).Delete(encodeRef(ref)); err != nil {
			return err
		}
		return b.Put(key, enc)
	}, func() []Ref { return []Ref{ref} })
	if err != nil {
		return err
	}
	return conflict
}

// GetQP returns the backup of the default QP k and its owner, from memory.
func (s *Store) GetQP(k QPKey) (QPBackup, Owner, error) {
	if s.closed.Load() {
		return QPBackup{}, Owner{}, ErrClosed
	}
	s.c.mu.RLock()
	e, ok := s.c.qps[k]
	s.c.mu.RUnlock()
	if !ok {
		return QPBackup{}, Owner{}, ErrNotFound
	}
	return e.v, e.o, nil
}

// PutMR records the backup of the default region k, owned by o, with the
// same rules as PutQP.
func (s *Store) PutMR(o Owner, k MRKey, v MRBackup) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.c.mu.RLock()
	old, ok := s.c.mrs[k]
	s.c.mu.RUnlock()
	if ok && old.v == v {
		return nil
	}
	if ok && old.o != o {
		return fmt.Errorf("put MR %+v: %w (owner %v has %+v)", k, ErrConflict, old.o, old.v)
	}
	key, ref := encodeMRKey(k), MRRef(k)
	if _, err := encodeMRBackup(key, v, o, 0); err != nil {
		return err
	}
	var conflict error
	err := s.write(func(tx *bolt.Tx) error {
		conflict = nil
		b := tx.Bucket(bucketMR)
		if cur := b.Get(key); cur != nil {
			cv, co, _, err := decodeMRBackup(key, cur)
			if err != nil {
				return err
			}
			if cv == v {
				return nil
			}
			if co != o {
				conflict = fmt.Errorf("put MR %+v: %w (owner %v has %+v)", k, ErrConflict, co, cv)
				return nil
			}
		}
		enc, err := encodeMRBackup(key, v, o, s.clock.next())
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketTomb).Delete(encodeRef(ref)); err != nil {
			return err
		}
		return b.Put(key, enc)
	}, func() []Ref { return []Ref{ref} })
	if err != nil {
		return err
	}
	return conflict
}

// GetMR returns the backup of the default region k and its owner, from
// memory.
func (s *Store) GetMR(k MRKey) (MRBackup, Owner, error) {
	if s.closed.Load() {
		return MRBackup{}, Owner{}, ErrClosed
	}
	s.c.mu.RLock()
	e, ok := s.c.mrs[k]
	s.c.mu.RUnlock()
	if !ok {
		return MRBackup{}, Owner{}, ErrNotFound
	}
	return e.v, e.o, nil
}

// RemoveOwner deletes every entry owned by o (a dead process
// incarnation) and returns how many it removed. Entries of other
// incarnations of the same node and pid are kept. Each removed key gets
// a tombstone (see RemoveOwnerTombstones).
func (s *Store) RemoveOwner(o Owner) (int, error) {
	ts, err := s.RemoveOwnerTombstones(o)
	return len(ts), err
}

// RemoveOwnerTombstones is RemoveOwner returning the tombstones it wrote,
// one per removed entry, all with one new version, for replication.
func (s *Store) RemoveOwnerTombstones(o Owner) ([]Tombstone, error) {
	var ts []Tombstone
	err := s.write(func(tx *bolt.Tx) error {
		ts = ts[:0]
		qb, mb, tb := tx.Bucket(bucketQP), tx.Bucket(bucketMR), tx.Bucket(bucketTomb)
		var refs []Ref
		if err := qb.ForEach(func(k, v []byte) error {
			_, vo, _, err := decodeQPBackup(k, v)
			if err != nil || vo != o {
				return err
			}
			key, err := decodeQPKey(k)
			refs = append(refs, QPRef(key))
			return err
		}); err != nil {
			return err
		}
		if err := mb.ForEach(func(k, v []byte) error {
			_, vo, _, err := decodeMRBackup(k, v)
			if err != nil || vo != o {
				return err
			}
			key, err := decodeMRKey(k)
			refs = append(refs, MRRef(key))
			return err
		}); err != nil {
			return err
		}
		if len(refs) == 0 {
			return nil
		}
		ver := s.clock.next()
		for _, r := range refs {
			key := encodeRef(r)
			enc, err := encodeTomb(key, o, ver)
			if err != nil {
				return err
			}
			if err := deleteEntry(tx, r); err != nil {
				return err
			}
			if err := tb.Put(key, enc); err != nil {
				return err
			}
			ts = append(ts, Tombstone{Ref: r, Owner: o, Version: ver})
		}
		return nil
	}, func() []Ref {
		refs := make([]Ref, len(ts))
		for i, t := range ts {
			refs[i] = t.Ref
		}
		return refs
	})
	if err != nil {
		return nil, err
	}
	return ts, nil
}

// deleteEntry deletes the entry r names, if any.
func deleteEntry(tx *bolt.Tx, r Ref) error {
	if r.Kind == KindQP {
		return tx.Bucket(bucketQP).Delete(encodeQPKey(r.QPKey()))
	}
	return tx.Bucket(bucketMR).Delete(encodeMRKey(r.MRKey()))
}

// Entries returns how many QP and MR entries the store holds.
func (s *Store) Entries() (qps, mrs int) {
	s.c.mu.RLock()
	defer s.c.mu.RUnlock()
	return len(s.c.qps), len(s.c.mrs)
}
