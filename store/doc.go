// Package store owns the node's durable record of backup attributes: for
// each default QP route (GID or LID, QPN) the backup QP that stands in for
// it (device, port, GID or LID, QPN), and for each default memory region
// (GID or LID, rkey) its backup rkey. Every entry belongs to the process
// incarnation that published it (node, pid, incarnation), so the entries
// of a dead process can be removed together.
//
// The file is a bbolt database. Writes are committed with fsync through
// bbolt's DB.Batch, which coalesces concurrent writers into one
// transaction. Reads never touch the file: an in-memory copy is loaded at
// Open and refreshed after every successful commit, so lookups on the
// failover path cost a map access.
//
// Every stored value carries a CRC-32C of its key and bytes. Open refuses
// a damaged file (truncated, a page that does not parse, a value failing
// its checksum) with ErrDamaged and leaves it as it was, without crashing
// on it (see damage.go and docs/STORE.md, "Damaged files").
//
// Every entry carries a version (a hybrid logical clock value, see
// VersionTime) assigned by the node that writes it; removals leave
// tombstones. Apply stores records replicated from peers last-writer-wins,
// and Digests/Stamps/Record serve anti-entropy. Package store/replica does
// the replication itself (see docs/STORE.md and docs/REPLICATION.md).
package store
