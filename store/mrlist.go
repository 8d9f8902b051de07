package store

import (
	"cmp"
	"slices"

	"github.com/ibpath/ibpath/verbs"
)

// Port names the port a region is reached through, as an MRKey does: its
// GID (RoCE, or InfiniBand with a global route) or its LID.
type Port struct {
	GID verbs.GID
	LID uint16
}

// Port is the port k's region is reached through.
func (k MRKey) Port() Port { return Port{GID: k.GID, LID: k.LID} }

// MRsSince lists, oldest first, up to limit MR entries of the given ports
// that this node's memory took after mark (0: all of them), and the mark
// to ask from next time. more is true when limit cut the list short: ask
// again from next. A mark counts what memory took since Open (a mark
// larger than any, from before a restart of the daemon, lists all); a
// region the store had and took again with other values is listed again.
// Removed entries are not listed: a failover finds no peer region behind
// them either way.
func (s *Store) MRsSince(ports []Port, mark uint64, limit int) (out []MREntry, next uint64, more bool, err error) {
	if s.closed.Load() {
		return nil, 0, false, ErrClosed
	}
	if limit <= 0 {
		return nil, mark, false, nil
	}
	type hit struct {
		e   MREntry
		seq uint64
	}
	var hits []hit
	s.c.mu.RLock()
	next = s.c.mrSeq
	if mark == next {
		s.c.mu.RUnlock()
		return nil, next, false, nil // memory took nothing since
	}
	if mark > next {
		mark = 0
	}
	want := make(map[Port]bool, len(ports))
	for _, p := range ports {
		want[p] = true
	}
	for k, e := range s.c.mrs {
		if e.seq > mark && want[k.Port()] {
			hits = append(hits, hit{MREntry{Key: k, Value: e.v, Owner: e.o, Version: e.ver}, e.seq})
		}
	}
	s.c.mu.RUnlock()
	slices.SortFunc(hits, func(a, b hit) int { return cmp.Compare(a.seq, b.seq) })
	if len(hits) > limit {
		hits, more = hits[:limit], true
		next = hits[limit-1].seq
	}
	out = make([]MREntry, len(hits))
	for i, h := range hits {
		out[i] = h.e
	}
	return out, next, more, nil
}
