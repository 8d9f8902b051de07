package store

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// Kind tells a QP entry from an MR entry.
type Kind uint8

// Entry kinds.
const (
	KindQP Kind = 1
	KindMR Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindQP:
		return "qp"
	case KindMR:
		return "mr"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Ref names one entry of either kind: a QPKey (N is the QPN) or an MRKey
// (N is the rkey).
type Ref struct {
	Kind Kind
	GID  verbs.GID
	LID  uint16
	N    uint32
}

// QPRef is the Ref of a QP key.
func QPRef(k QPKey) Ref { return Ref{Kind: KindQP, GID: k.GID, LID: k.LID, N: k.QPN} }

// MRRef is the Ref of an MR key.
func MRRef(k MRKey) Ref { return Ref{Kind: KindMR, GID: k.GID, LID: k.LID, N: k.RKey} }

// QPKey is the QP key r names (meaningful when r.Kind is KindQP).
func (r Ref) QPKey() QPKey { return QPKey{GID: r.GID, LID: r.LID, QPN: r.N} }

// MRKey is the MR key r names (meaningful when r.Kind is KindMR).
func (r Ref) MRKey() MRKey { return MRKey{GID: r.GID, LID: r.LID, RKey: r.N} }

// Stamp identifies one state of a key: the entry (or, when Deleted, the
// tombstone) with its owner and version. Replicas compare stamps to
// decide which state of a key wins (see Newer).
type Stamp struct {
	Ref     Ref
	Owner   Owner
	Version uint64
	Deleted bool
}

// Newer reports whether a wins over b under last-writer-wins: the larger
// version, then the larger owner string (Owner.String), then a tombstone
// over an entry. Equal stamps are not newer than each other.
func (a Stamp) Newer(b Stamp) bool {
	if a.Version != b.Version {
		return a.Version > b.Version
	}
	if as, bs := a.Owner.String(), b.Owner.String(); as != bs {
		return as > bs
	}
	return a.Deleted && !b.Deleted
}

// Record is one replicated state of a key: an entry with its value, or a
// tombstone (Deleted, no value). QP is set for a live KindQP record, MR
// for a live KindMR one.
type Record struct {
	Stamp
	QP QPBackup
	MR MRBackup
}

// QPEntry is one QP entry as listed by QPEntries.
type QPEntry struct {
	Key     QPKey
	Value   QPBackup
	Owner   Owner
	Version uint64
}

// Record is e as a replicated record.
func (e QPEntry) Record() Record {
	return Record{Stamp: Stamp{Ref: QPRef(e.Key), Owner: e.Owner, Version: e.Version}, QP: e.Value}
}

// MREntry is one MR entry as listed by MREntries.
type MREntry struct {
	Key     MRKey
	Value   MRBackup
	Owner   Owner
	Version uint64
}

// Record is e as a replicated record.
func (e MREntry) Record() Record {
	return Record{Stamp: Stamp{Ref: MRRef(e.Key), Owner: e.Owner, Version: e.Version}, MR: e.Value}
}

// Tombstone records that the entry under Ref, owned by Owner, was removed
// at Version. It keeps older copies of the entry from coming back through
// replication until it is collected (CollectTombstones).
type Tombstone struct {
	Ref     Ref
	Owner   Owner
	Version uint64
}

// Record is t as a replicated record.
func (t Tombstone) Record() Record {
	return Record{Stamp: Stamp{Ref: t.Ref, Owner: t.Owner, Version: t.Version, Deleted: true}}
}

// Digest summarises the entries and tombstones of one origin node (the
// Node of their owner): how many there are and an order-independent hash
// of their stamps. Two stores hold the same state for an origin when its
// digests are equal.
type Digest struct {
	Origin string
	Count  int
	Hash   uint64
}
