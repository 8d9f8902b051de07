package store

import (
	"fmt"
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
// Writes (PutQP, PutMR, RemoveOwner) go through bbolt's DB.Batch:
// concurrent writers are coalesced into one fsync'd transaction (up to
// Options.MaxBatchSize calls or Options.MaxBatchDelay of waiting), and
// each call returns only after its transaction is durable. Reads (GetQP, GetMR,
// Entries) are served from memory and never touch the file.
type Store struct {
	db     *bolt.DB
	c      cache
	life   sync.RWMutex // held shared by writers, exclusively by Close
	closed atomic.Bool
}

// Open opens or creates the store at path, migrates an older schema and
// loads every entry into memory. A file of a newer schema is refused with
// ErrSchema.
func Open(path string, opts Options) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.Timeout, NoSync: opts.NoSync})
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db.MaxBatchDelay = DefaultMaxBatchDelay
	if opts.MaxBatchDelay > 0 {
		db.MaxBatchDelay = opts.MaxBatchDelay
	}
	if opts.MaxBatchSize > 0 {
		db.MaxBatchSize = opts.MaxBatchSize
	}
	s := &Store{db: db}
	if err := migrate(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := db.View(s.c.load); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: load %s: %w", path, err)
	}
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
func (s *Store) write(fn func(*bolt.Tx) error, keys func() ([]QPKey, []MRKey)) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.db.Batch(fn); err != nil {
		return err
	}
	qps, mrs := keys()
	return s.c.refresh(s.db, qps, mrs)
}

// PutQP records that the default QP k is backed by v, owned by o.
// Publishing an existing value again is a no-op (the entry keeps its
// owner); an owner may replace its own value; a different value for a key
// of another owner is ErrConflict.
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
	enc, err := encodeQPBackup(v, o)
	if err != nil {
		return err
	}
	key := encodeQPKey(k)
	var conflict error
	err = s.write(func(tx *bolt.Tx) error {
		conflict = nil
		b := tx.Bucket(bucketQP)
		if cur := b.Get(key); cur != nil {
			cv, co, err := decodeQPBackup(cur)
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
		return b.Put(key, enc)
	}, func() ([]QPKey, []MRKey) { return []QPKey{k}, nil })
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
	enc, err := encodeMRBackup(v, o)
	if err != nil {
		return err
	}
	key := encodeMRKey(k)
	var conflict error
	err = s.write(func(tx *bolt.Tx) error {
		conflict = nil
		b := tx.Bucket(bucketMR)
		if cur := b.Get(key); cur != nil {
			cv, co, err := decodeMRBackup(cur)
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
		return b.Put(key, enc)
	}, func() ([]QPKey, []MRKey) { return nil, []MRKey{k} })
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
// incarnations of the same node and pid are kept.
func (s *Store) RemoveOwner(o Owner) (int, error) {
	var qps []QPKey
	var mrs []MRKey
	err := s.write(func(tx *bolt.Tx) error {
		qps, mrs = qps[:0], mrs[:0]
		qb, mb := tx.Bucket(bucketQP), tx.Bucket(bucketMR)
		if err := qb.ForEach(func(k, v []byte) error {
			_, vo, err := decodeQPBackup(v)
			if err != nil {
				return err
			}
			if vo == o {
				key, err := decodeQPKey(k)
				if err != nil {
					return err
				}
				qps = append(qps, key)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := mb.ForEach(func(k, v []byte) error {
			_, vo, err := decodeMRBackup(v)
			if err != nil {
				return err
			}
			if vo == o {
				key, err := decodeMRKey(k)
				if err != nil {
					return err
				}
				mrs = append(mrs, key)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range qps {
			if err := qb.Delete(encodeQPKey(k)); err != nil {
				return err
			}
		}
		for _, k := range mrs {
			if err := mb.Delete(encodeMRKey(k)); err != nil {
				return err
			}
		}
		return nil
	}, func() ([]QPKey, []MRKey) { return qps, mrs })
	if err != nil {
		return 0, err
	}
	return len(qps) + len(mrs), nil
}

// Entries returns how many QP and MR entries the store holds.
func (s *Store) Entries() (qps, mrs int) {
	s.c.mu.RLock()
	defer s.c.mu.RUnlock()
	return len(s.c.qps), len(s.c.mrs)
}
