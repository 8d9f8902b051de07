// Package pathsel owns path choice: describing adapters and ports
// (through verbs, or from replicated attributes), and choosing the
// alternate path of an RC QP for Automatic Path Migration — the other port
// of a dual-port HCA or another LID of the LMC range — in a configurable
// policy order, never through a port that is down — and the backup
// adapter for cross-NIC failover (the next healthy rail).
package pathsel
