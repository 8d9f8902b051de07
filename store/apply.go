package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Apply stores records received from a peer, in one fsync'd transaction,
// and returns how many changed the store. A record is applied only when
// it is Newer than what the store holds for its key (entry or tombstone,
// see Stamp.Newer); anything is newer than nothing. A live record
// replaces the entry and drops an older tombstone; a Deleted record
// deletes the entry and keeps the tombstone, so an older copy of the
// entry arriving later is not resurrected. Versions are kept as they
// come, and this node's clock moves past them. Local conflict rules
// (ErrConflict) do not apply to replicated records.
func (s *Store) Apply(recs []Record) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	for _, r := range recs {
		if r.Ref.Kind != KindQP && r.Ref.Kind != KindMR {
			return 0, fmt.Errorf("apply %+v: %w: kind %d", r.Ref, ErrInvalid, r.Ref.Kind)
		}
		if err := checkName("node name", r.Owner.Node); err != nil {
			return 0, fmt.Errorf("apply %+v: %w", r.Ref, err)
		}
		if err := checkName("device name", r.QP.Device); err != nil {
			return 0, fmt.Errorf("apply %+v: %w", r.Ref, err)
		}
	}
	// Skip, without a transaction, what memory already shows as not newer.
	s.c.mu.RLock()
	todo := make([]Record, 0, len(recs))
	for _, r := range recs {
		if cur, ok := s.c.stamp(r.Ref); !ok || r.Newer(cur.Stamp) {
			todo = append(todo, r)
		}
	}
	s.c.mu.RUnlock()
	if len(todo) == 0 {
		return 0, nil
	}
	var changed []Ref
	err := s.write(func(tx *bolt.Tx) error {
		changed = changed[:0]
		for _, r := range todo {
			ok, err := applyOne(tx, r)
			if err != nil {
				return err
			}
			if ok {
				changed = append(changed, r.Ref)
			}
		}
		return nil
	}, func() []Ref { return changed })
	if err != nil {
		return 0, fmt.Errorf("apply %d records: %w", len(todo), err)
	}
	for _, r := range todo {
		s.clock.observe(r.Version)
	}
	return len(changed), nil
}

// applyOne applies r inside tx when it is newer than the file's state of
// its key.
func applyOne(tx *bolt.Tx, r Record) (bool, error) {
	cur, ok, err := fileStamp(tx, r.Ref)
	if err != nil {
		return false, err
	}
	if ok && !r.Newer(cur) {
		return false, nil
	}
	tb, ref := tx.Bucket(bucketTomb), encodeRef(r.Ref)
	if r.Deleted {
		enc, err := encodeTomb(ref, r.Owner, r.Version)
		if err != nil {
			return false, err
		}
		if err := deleteEntry(tx, r.Ref); err != nil {
			return false, err
		}
		return true, tb.Put(ref, enc)
	}
	if err := tb.Delete(ref); err != nil {
		return false, err
	}
	if r.Ref.Kind == KindQP {
		key := encodeQPKey(r.Ref.QPKey())
		enc, err := encodeQPBackup(key, r.QP, r.Owner, r.Version)
		if err != nil {
			return false, err
		}
		return true, tx.Bucket(bucketQP).Put(key, enc)
	}
	key := encodeMRKey(r.Ref.MRKey())
	enc, err := encodeMRBackup(key, r.MR, r.Owner, r.Version)
	if err != nil {
		return false, err
	}
	return true, tx.Bucket(bucketMR).Put(key, enc)
}

// fileStamp reads the state of r inside tx: the entry, else the tombstone.
func fileStamp(tx *bolt.Tx, r Ref) (Stamp, bool, error) {
	var k, v []byte
	if r.Kind == KindQP {
		k = encodeQPKey(r.QPKey())
		v = tx.Bucket(bucketQP).Get(k)
	} else {
		k = encodeMRKey(r.MRKey())
		v = tx.Bucket(bucketMR).Get(k)
	}
	if v != nil {
		var o Owner
		var ver uint64
		var err error
		if r.Kind == KindQP {
			_, o, ver, err = decodeQPBackup(k, v)
		} else {
			_, o, ver, err = decodeMRBackup(k, v)
		}
		return Stamp{Ref: r, Owner: o, Version: ver}, err == nil, err
	}
	k = encodeRef(r)
	if v = tx.Bucket(bucketTomb).Get(k); v != nil {
		o, ver, err := decodeTomb(k, v)
		return Stamp{Ref: r, Owner: o, Version: ver, Deleted: true}, err == nil, err
	}
	return Stamp{}, false, nil
}

// ApplyQP applies one replicated QP entry (see Apply) and reports whether
// it changed the store.
func (s *Store) ApplyQP(e QPEntry) (bool, error) {
	n, err := s.Apply([]Record{e.Record()})
	return n > 0, err
}

// ApplyMR applies one replicated MR entry (see Apply).
func (s *Store) ApplyMR(e MREntry) (bool, error) {
	n, err := s.Apply([]Record{e.Record()})
	return n > 0, err
}

// ApplyTombstone applies one replicated tombstone (see Apply): it deletes
// an older entry of the key and keeps older copies from coming back.
func (s *Store) ApplyTombstone(t Tombstone) (bool, error) {
	n, err := s.Apply([]Record{t.Record()})
	return n > 0, err
}

// Record returns the current state of r from memory: the entry with its
// value, or its tombstone (Deleted); ok is false when the store knows
// nothing of r.
func (s *Store) Record(r Ref) (Record, bool) {
	s.c.mu.RLock()
	defer s.c.mu.RUnlock()
	return s.c.stamp(r)
}

func cmpRef(a, b Ref) int {
	return bytes.Compare(encodeRef(a), encodeRef(b))
}

// QPEntries lists every QP entry, copied from memory, ordered by key.
func (s *Store) QPEntries() []QPEntry {
	s.c.mu.RLock()
	out := make([]QPEntry, 0, len(s.c.qps))
	for k, e := range s.c.qps {
		out = append(out, QPEntry{Key: k, Value: e.v, Owner: e.o, Version: e.ver})
	}
	s.c.mu.RUnlock()
	slices.SortFunc(out, func(a, b QPEntry) int { return cmpRef(QPRef(a.Key), QPRef(b.Key)) })
	return out
}

// MREntries lists every MR entry, copied from memory, ordered by key.
func (s *Store) MREntries() []MREntry {
	s.c.mu.RLock()
	out := make([]MREntry, 0, len(s.c.mrs))
	for k, e := range s.c.mrs {
		out = append(out, MREntry{Key: k, Value: e.v, Owner: e.o, Version: e.ver})
	}
	s.c.mu.RUnlock()
	slices.SortFunc(out, func(a, b MREntry) int { return cmpRef(MRRef(a.Key), MRRef(b.Key)) })
	return out
}

// Tombstones returns how many tombstones the store holds.
func (s *Store) Tombstones() int {
	s.c.mu.RLock()
	defer s.c.mu.RUnlock()
	return len(s.c.tombs)
}

// TombstoneList lists every tombstone, copied from memory, ordered by key.
func (s *Store) TombstoneList() []Tombstone {
	s.c.mu.RLock()
	out := make([]Tombstone, 0, len(s.c.tombs))
	for r, t := range s.c.tombs {
		out = append(out, Tombstone{Ref: r, Owner: t.o, Version: t.ver})
	}
	s.c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Tombstone) int { return cmpRef(a.Ref, b.Ref) })
	return out
}

// forEachStamp calls fn for every entry and tombstone in memory. The
// caller holds c.mu.
func (c *cache) forEachStamp(fn func(Stamp)) {
	for k, e := range c.qps {
		fn(Stamp{Ref: QPRef(k), Owner: e.o, Version: e.ver})
	}
	for k, e := range c.mrs {
		fn(Stamp{Ref: MRRef(k), Owner: e.o, Version: e.ver})
	}
	for r, t := range c.tombs {
		fn(Stamp{Ref: r, Owner: t.o, Version: t.ver, Deleted: true})
	}
}

// stampHash hashes everything that identifies a stamp.
func stampHash(st Stamp) uint64 {
	h := fnv.New64a()
	b := encodeRef(st.Ref)
	if st.Deleted {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint64(b, st.Version)
	b = appendOwner(b, st.Owner)
	h.Write(b)
	// Mix so that XOR-ing many hashes does not cancel structure.
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

// Digests summarises the store per origin node (the Node of each entry's
// or tombstone's owner), ordered by origin. It reads memory only.
func (s *Store) Digests() []Digest {
	m := map[string]*Digest{}
	s.c.mu.RLock()
	s.c.forEachStamp(func(st Stamp) {
		d := m[st.Owner.Node]
		if d == nil {
			d = &Digest{Origin: st.Owner.Node}
			m[st.Owner.Node] = d
		}
		d.Count++
		d.Hash ^= stampHash(st)
	})
	s.c.mu.RUnlock()
	out := make([]Digest, 0, len(m))
	for _, d := range m {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b Digest) int { return cmp.Compare(a.Origin, b.Origin) })
	return out
}

// Stamps lists the stamps of every entry and tombstone of one origin
// node, ordered by key, from memory.
func (s *Store) Stamps(origin string) []Stamp {
	var out []Stamp
	s.c.mu.RLock()
	s.c.forEachStamp(func(st Stamp) {
		if st.Owner.Node == origin {
			out = append(out, st)
		}
	})
	s.c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Stamp) int { return cmpRef(a.Ref, b.Ref) })
	return out
}

// CollectTombstones deletes the tombstones whose version was issued
// before the given time and returns how many it deleted. After that, an
// older copy of a removed entry still held by a node that missed the
// removal (partitioned or down for longer than the caller's TTL) can be
// replicated back.
func (s *Store) CollectTombstones(before time.Time) (int, error) {
	limit := uint64(before.UnixMilli()) << 16
	var refs []Ref
	s.c.mu.RLock()
	for r, t := range s.c.tombs {
		if t.ver < limit {
			refs = append(refs, r)
		}
	}
	s.c.mu.RUnlock()
	if len(refs) == 0 {
		return 0, nil
	}
	var done []Ref
	err := s.write(func(tx *bolt.Tx) error {
		done = done[:0]
		tb := tx.Bucket(bucketTomb)
		for _, r := range refs {
			k := encodeRef(r)
			v := tb.Get(k)
			if v == nil {
				continue
			}
			_, ver, err := decodeTomb(k, v)
			if err != nil {
				return err
			}
			if ver >= limit {
				continue
			}
			if err := tb.Delete(k); err != nil {
				return err
			}
			done = append(done, r)
		}
		return nil
	}, func() []Ref { return done })
	if err != nil {
		return 0, fmt.Errorf("collect tombstones: %w", err)
	}
	return len(done), nil
}
