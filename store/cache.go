package store

import (
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
)

type qpEntry struct {
	v   QPBackup
	o   Owner
	ver uint64
}

type mrEntry struct {
	v   MRBackup
	o   Owner
	ver uint64
	seq uint64 // when this node's memory took it (cache.mrSeq)
}

type tombEntry struct {
	o   Owner
	ver uint64
}

// cache is the in-memory copy every Get is served from. It holds values,
// never slices into bbolt's memory map.
type cache struct {
	mu    sync.RWMutex
	qps   map[QPKey]qpEntry
	mrs   map[MRKey]mrEntry
	tombs map[Ref]tombEntry
	// mrSeq counts the MR entries memory took, in the order it took them
	// (loaded, written here, or applied from a peer): MRsSince lists
	// what a port gained after a point of it.
	mrSeq uint64
}

// load fills the cache from a read transaction and reports the largest
// version it saw. A missing bucket, a key or value that does not decode,
// or a value that fails its checksum is damage (ErrDamaged); the error
// names the bucket and the key.
func (c *cache) load(tx *bolt.Tx) (maxVer uint64, err error) {
	c.qps, c.mrs, c.tombs = map[QPKey]qpEntry{}, map[MRKey]mrEntry{}, map[Ref]tombEntry{}
	qb, mb, tb := tx.Bucket(bucketQP), tx.Bucket(bucketMR), tx.Bucket(bucketTomb)
	for _, b := range []struct {
		name []byte
		b    *bolt.Bucket
	}{{bucketQP, qb}, {bucketMR, mb}, {bucketTomb, tb}} {
		if b.b == nil {
			return 0, fmt.Errorf("%w: no %q bucket", ErrDamaged, b.name)
		}
	}
	if err := qb.ForEach(func(k, v []byte) error {
		key, err := decodeQPKey(k)
		if err != nil {
			return fmt.Errorf("%w: qp: %w", ErrDamaged, err)
		}
		b, o, ver, err := decodeQPBackup(k, v)
		if err != nil {
			return fmt.Errorf("qp %x: %w", k, err)
		}
		c.qps[key] = qpEntry{b, o, ver}
		maxVer = max(maxVer, ver)
		return nil
	}); err != nil {
		return 0, err
	}
	if err := mb.ForEach(func(k, v []byte) error {
		key, err := decodeMRKey(k)
		if err != nil {
			return fmt.Errorf("%w: mr: %w", ErrDamaged, err)
		}
		b, o, ver, err := decodeMRBackup(k, v)
		if err != nil {
			return fmt.Errorf("mr %x: %w", k, err)
		}
		c.mrSeq++
		c.mrs[key] = mrEntry{b, o, ver, c.mrSeq}
		maxVer = max(maxVer, ver)
		return nil
	}); err != nil {
		return 0, err
	}
	err = tb.ForEach(func(k, v []byte) error {
		r, err := decodeRef(k)
		if err != nil {
			return fmt.Errorf("%w: tomb: %w", ErrDamaged, err)
		}
		o, ver, err := decodeTomb(k, v)
		if err != nil {
			return fmt.Errorf("tomb %x: %w", k, err)
		}
		c.tombs[r] = tombEntry{o, ver}
		maxVer = max(maxVer, ver)
		return nil
	})
	return maxVer, err
}

// refresh re-reads the given keys (entries and tombstones) from the file
// after a commit. It reads under the cache's write lock, so whichever
// refresh runs last reads the state after every commit that preceded it:
// concurrent commits to one key cannot leave an older value in the cache.
func (c *cache) refresh(db *bolt.DB, refs []Ref) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return db.View(func(tx *bolt.Tx) error {
		qb, mb, tb := tx.Bucket(bucketQP), tx.Bucket(bucketMR), tx.Bucket(bucketTomb)
		for _, r := range refs {
			switch r.Kind {
			case KindQP:
				k := r.QPKey()
				key := encodeQPKey(k)
				if v := qb.Get(key); v == nil {
					delete(c.qps, k)
				} else {
					b, o, ver, err := decodeQPBackup(key, v)
					if err != nil {
						return err
					}
					c.qps[k] = qpEntry{b, o, ver}
				}
			case KindMR:
				k := r.MRKey()
				key := encodeMRKey(k)
				if v := mb.Get(key); v == nil {
					delete(c.mrs, k)
				} else {
					b, o, ver, err := decodeMRBackup(key, v)
					if err != nil {
						return err
					}
					c.setMR(k, mrEntry{v: b, o: o, ver: ver})
				}
			}
			key := encodeRef(r)
			if v := tb.Get(key); v == nil {
				delete(c.tombs, r)
			} else {
				o, ver, err := decodeTomb(key, v)
				if err != nil {
					return err
				}
				c.tombs[r] = tombEntry{o, ver}
			}
		}
		return nil
	})
}

// setMR keeps e as k's entry, numbered anew unless memory had it already.
// The caller holds c.mu for writing.
func (c *cache) setMR(k MRKey, e mrEntry) {
	if old, ok := c.mrs[k]; ok && old.v == e.v && old.o == e.o && old.ver == e.ver {
		return
	}
	c.mrSeq++
	e.seq = c.mrSeq
	c.mrs[k] = e
}

// stamp is the current state of r in memory: the entry, else the
// tombstone; ok is false when the store knows nothing of r. The caller
// holds c.mu.
func (c *cache) stamp(r Ref) (Record, bool) {
	switch r.Kind {
	case KindQP:
		if e, ok := c.qps[r.QPKey()]; ok {
			return Record{Stamp: Stamp{Ref: r, Owner: e.o, Version: e.ver}, QP: e.v}, true
		}
	case KindMR:
		if e, ok := c.mrs[r.MRKey()]; ok {
			return Record{Stamp: Stamp{Ref: r, Owner: e.o, Version: e.ver}, MR: e.v}, true
		}
	}
	if t, ok := c.tombs[r]; ok {
		return Record{Stamp: Stamp{Ref: r, Owner: t.o, Version: t.ver, Deleted: true}}, true
	}
	return Record{}, false
}
