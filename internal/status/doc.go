// Package status owns the one status type that describes a node: its
// fabric, HCAs, ports, QPs with their layer-1 and layer-2 state, replication
// peers and store counts, plus the events (path migrated, failover,
// switch-back, port state changed) that change it. The local API,
// `ibpath --json`, the D-Bus facade and the metrics all render this type;
// none of them has a status type of its own.
package status
