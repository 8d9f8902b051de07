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
// failover path cost a map access. Replication between nodes is not built
// yet (see docs/STORE.md).
package store
