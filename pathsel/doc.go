// Package pathsel owns topology and path choice: discovering the node's
// RDMA devices and ports from sysfs (through rdmamap on the running
// system, or a fixture tree) and diffing two discoveries into port
// changes; describing adapters and ports (through verbs, or from
// replicated attributes); choosing the alternate path of an RC QP for
// Automatic Path Migration — the other port of a dual-port HCA or another
// LID of the LMC range — in a configurable policy order, never through a
// port that is down; choosing the backup adapter for cross-NIC failover
// (the next healthy rail); damping ports and paths that flap (Damper:
// traffic does not return to one whose decaying penalty suppresses it);
// and judging a port's health from its counters (ReadPortCounters,
// HealthMonitor: a link that loses packets while it is up).
package pathsel
