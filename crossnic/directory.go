package crossnic

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ibpath/ibpath/verbs"
)

// Endpoint names one end of an RC connection by what its peer knows of it:
// the port's GID (RoCE, or IB with a global route) or LID, and the QP
// number.
type Endpoint struct {
	GID verbs.GID
	LID uint16
	QPN uint32
}

func (e Endpoint) String() string {
	if e.LID != 0 {
		return fmt.Sprintf("lid %d qpn %#x", e.LID, e.QPN)
	}
	return fmt.Sprintf("gid %v qpn %#x", e.GID, e.QPN)
}

// Backup is the backup QP that stands in for a default one, and the
// inbox of its mailbox (zero: it has none; Shadow.SetMailboxes).
type Backup struct {
	Device  string
	Port    uint8
	GID     verbs.GID
	LID     uint16
	QPN     uint32
	Mailbox Mailbox
}

// MRRef names a registered region by the port it is reached through
// (GID or LID of the default path) and its default rkey.
type MRRef struct {
	GID  verbs.GID
	LID  uint16
	RKey uint32
}

// Directory publishes and looks up backup attributes. Each side publishes
// its default-to-backup mappings as soon as it has them; failover only
// looks them up, so it never waits on disk or network for attributes it
// could have had in advance. The replicated store implements it across
// nodes; MemDirectory within one process.
type Directory interface {
	PublishQP(def Endpoint, backup Backup) error
	LookupQP(def Endpoint) (Backup, bool)
	PublishMR(def MRRef, backupRKey uint32) error
	LookupMR(def MRRef) (uint32, bool)
}

// ErrConflict: a mapping was already published with other values.
var ErrConflict = errors.New("crossnic: conflicting mapping already published")

// MemDirectory is an in-memory Directory, safe for concurrent use.
type MemDirectory struct {
	mu  sync.RWMutex
	qps map[Endpoint]Backup
	mrs map[MRRef]uint32
}

// NewMemDirectory returns an empty directory.
func NewMemDirectory() *MemDirectory {
	return &MemDirectory{qps: map[Endpoint]Backup{}, mrs: map[MRRef]uint32{}}
}

// PublishQP records that def is backed by backup. Publishing the same
// mapping again is a no-op; a different one is a conflict.
func (d *MemDirectory) PublishQP(def Endpoint, backup Backup) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.qps[def]; ok && old != backup {
		return fmt.Errorf("publish QP %v: %w (have %+v, got %+v)", def, ErrConflict, old, backup)
	}
	d.qps[def] = backup
	return nil
}

// LookupQP returns the backup of def.
func (d *MemDirectory) LookupQP(def Endpoint) (Backup, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	b, ok := d.qps[def]
	return b, ok
}

// PublishMR records the backup rkey of a default region.
func (d *MemDirectory) PublishMR(def MRRef, backupRKey uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.mrs[def]; ok && old != backupRKey {
		return fmt.Errorf("publish MR %+v: %w (have rkey %#x, got %#x)", def, ErrConflict, old, backupRKey)
	}
	d.mrs[def] = backupRKey
	return nil
}

// LookupMR returns the backup rkey of a default region.
func (d *MemDirectory) LookupMR(def MRRef) (uint32, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	k, ok := d.mrs[def]
	return k, ok
}
