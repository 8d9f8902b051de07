// Package storedir adapts the bbolt-backed store to crossnic.Directory, so
// the cross-NIC layer publishes and looks up backup attributes in the
// node's durable store on behalf of one process incarnation. Lookups are
// served from the store's in-memory copy; publications are fsync'd before
// they return.
package storedir

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/store"
)

// Directory is a crossnic.Directory over a *store.Store. Everything it
// publishes is owned by one owner, so store.RemoveOwner clears it when the
// process dies.
type Directory struct {
	st    *store.Store
	owner store.Owner
}

var _ crossnic.Directory = (*Directory)(nil)

// New returns a Directory publishing into st as owner.
func New(st *store.Store, owner store.Owner) *Directory {
	return &Directory{st: st, owner: owner}
}

func qpKey(e crossnic.Endpoint) store.QPKey { return store.QPKey{GID: e.GID, LID: e.LID, QPN: e.QPN} }
func mrKey(r crossnic.MRRef) store.MRKey    { return store.MRKey{GID: r.GID, LID: r.LID, RKey: r.RKey} }

// conflict makes a store conflict match crossnic.ErrConflict too.
func conflict(err error) error {
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %w", crossnic.ErrConflict, err)
	}
	return err
}

// QPValue is the store's value of a crossnic backup, mailbox included:
// the one conversion of the two, for every directory over the store
// (this one, and the shim's through ibpathd).
func QPValue(b crossnic.Backup) store.QPBackup {
	return store.QPBackup{Device: b.Device, Port: b.Port, GID: b.GID, LID: b.LID, QPN: b.QPN,
		MailboxAddr: b.Mailbox.Addr, MailboxRKey: b.Mailbox.RKey}
}

// BackupOf is QPValue's inverse.
func BackupOf(v store.QPBackup) crossnic.Backup {
	return crossnic.Backup{Device: v.Device, Port: v.Port, GID: v.GID, LID: v.LID, QPN: v.QPN,
		Mailbox: crossnic.Mailbox{Addr: v.MailboxAddr, RKey: v.MailboxRKey}}
}

// PublishQP records that def is backed by b.
func (d *Directory) PublishQP(def crossnic.Endpoint, b crossnic.Backup) error {
	return conflict(d.st.PutQP(d.owner, qpKey(def), QPValue(b)))
}

// LookupQP returns the backup of def, from memory.
func (d *Directory) LookupQP(def crossnic.Endpoint) (crossnic.Backup, bool) {
	b, _, err := d.st.GetQP(qpKey(def))
	if err != nil {
		return crossnic.Backup{}, false
	}
	return BackupOf(b), true
}

// PublishMR records the backup rkey of a default region; its address and
// length are not known here and are stored as 0.
func (d *Directory) PublishMR(def crossnic.MRRef, backupRKey uint32) error {
	return conflict(d.st.PutMR(d.owner, mrKey(def), store.MRBackup{RKey: backupRKey}))
}

// LookupMR returns the backup rkey of a default region, from memory.
func (d *Directory) LookupMR(def crossnic.MRRef) (uint32, bool) {
	b, _, err := d.st.GetMR(mrKey(def))
	if err != nil {
		return 0, false
	}
	return b.RKey, true
}
