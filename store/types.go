package store

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// QPKey names a default QP by the route its peer knows: the port's GID
// (RoCE, or IB with a global route) or LID, and the QP number.
type QPKey struct {
	GID verbs.GID
	LID uint16
	QPN uint32
}

// QPBackup is the backup QP that stands in for a default one.
type QPBackup struct {
	Device string // at most 255 bytes
	Port   uint8
	GID    verbs.GID
	LID    uint16
	QPN    uint32
	// MailboxAddr and MailboxRKey name the inbox of the backup QP's
	// mailbox on the backup device (docs/CROSSNIC.md, "The mailbox");
	// both zero when it has none.
	MailboxAddr uint64 `json:",omitempty"`
	MailboxRKey uint32 `json:",omitempty"`
}

// HasMailbox reports whether v names a mailbox.
func (v QPBackup) HasMailbox() bool { return v.MailboxAddr != 0 || v.MailboxRKey != 0 }

// MRKey names a default memory region by the port it is reached through
// (GID or LID) and its default rkey.
type MRKey struct {
	GID  verbs.GID
	LID  uint16
	RKey uint32
}

// MRBackup is the backup registration of a region. Addr and Length are 0
// when the publisher does not know them.
type MRBackup struct {
	RKey   uint32
	Addr   uint64
	Length uint64
}

// Owner is the process incarnation that published an entry. Entries
// migrated from a schema-0 file have the zero Owner.
type Owner struct {
	Node        string // at most 255 bytes
	PID         int
	Incarnation uint64
}

func (o Owner) String() string { return fmt.Sprintf("%s/%d/%d", o.Node, o.PID, o.Incarnation) }

// Sentinel errors; match them with errors.Is.
var (
	// ErrNotFound: no entry under that key.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: the key is already owned by another owner with a
	// different value.
	ErrConflict = errors.New("store: key owned by another owner with a different value")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrSchema: the file was written by a newer schema than this code
	// knows (or its schema version is unreadable, which is ErrDamaged too).
	ErrSchema = errors.New("store: unsupported schema version")
	// ErrInvalid: a value cannot be stored (a name longer than 255
	// bytes), or a stored value cannot be decoded or fails its checksum
	// (then the error is ErrDamaged too).
	ErrInvalid = errors.New("store: invalid value")
	// ErrDamaged: the file is damaged. Open reports it when the file does
	// not open as a bbolt file, is shorter than its pages, a page does not
	// parse or is inconsistent (bbolt panics or faults reading it, or its
	// tx.Check objects), a bucket is missing, or a stored key or value
	// does not decode or fails its checksum; the message names the file
	// and what was found. The file is left as it was; the caller decides
	// (ibpathd moves it aside). A write that reads a stored value failing
	// its checksum after Open reports it too.
	ErrDamaged = errors.New("store: damaged file")
	// ErrLocked: another open store (another process, or another Open of
	// this one) held the file's lock past Options.Timeout. The error
	// wraps bbolt's ErrTimeout as well.
	ErrLocked = errors.New("store: the file is locked by another open store")
)
