package store

import (
	"sync"

	bolt "go.etcd.io/bbolt"
)

type qpEntry struct {
	v QPBackup
	o Owner
}

type mrEntry struct {
	v MRBackup
	o Owner
}

// cache is the in-memory copy every Get is served from. It holds values,
// never slices into bbolt's memory map.
type cache struct {
	mu  sync.RWMutex
	qps map[QPKey]qpEntry
	mrs map[MRKey]mrEntry
}

// load fills the cache from a read transaction.
func (c *cache) load(tx *bolt.Tx) error {
	c.qps, c.mrs = map[QPKey]qpEntry{}, map[MRKey]mrEntry{}
	if err := tx.Bucket(bucketQP).ForEach(func(k, v []byte) error {
		key, err := decodeQPKey(k)
		if err != nil {
			return err
		}
		b, o, err := decodeQPBackup(v)
		if err != nil {
			return err
		}
		c.qps[key] = qpEntry{b, o}
		return nil
	}); err != nil {
		return err
	}
	return tx.Bucket(bucketMR).ForEach(func(k, v []byte) error {
		key, err := decodeMRKey(k)
		if err != nil {
			return err
		}
		b, o, err := decodeMRBackup(v)
		if err != nil {
			return err
		}
		c.mrs[key] = mrEntry{b, o}
		return nil
	})
}

// refresh re-reads the given keys from the file after a commit. It reads
// under the cache's write lock, so whichever refresh runs last reads the
// state after every commit that preceded it: concurrent commits to one key
// cannot leave an older value in the cache.
func (c *cache) refresh(db *bolt.DB, qps []QPKey, mrs []MRKey) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return db.View(func(tx *bolt.Tx) error {
		qb, mb := tx.Bucket(bucketQP), tx.Bucket(bucketMR)
		for _, k := range qps {
			v := qb.Get(encodeQPKey(k))
			if v == nil {
				delete(c.qps, k)
				continue
			}
			b, o, err := decodeQPBackup(v)
			if err != nil {
				return err
			}
			c.qps[k] = qpEntry{b, o}
		}
		for _, k := range mrs {
			v := mb.Get(encodeMRKey(k))
			if v == nil {
				delete(c.mrs, k)
				continue
			}
			b, o, err := decodeMRBackup(v)
			if err != nil {
				return err
			}
			c.mrs[k] = mrEntry{b, o}
		}
		return nil
	})
}
