// Package shimtest owns the Go stand-ins of what surrounds the shim's
// runtime (internal/shim) in a real process, so that the runtime runs
// without C and without ibpathd, over any verbs provider (verbs/sim in
// the shim's tests and in internal/simrun):
//
//   - Hotpath: the C data path of cmd/libibpath (hotpath.c, divert.c,
//     express.c, nudge.c, channel.c) with the same semantics as seen from
//     the runtime, implementing package datapath's contract;
//   - Cluster and Node: what the ibpathds of the nodes do for a process
//     (its reports, and the backups it publishes and looks up, readable
//     by every node at once), and Adapters, ibpathd's description of the
//     adapter at the other end of a path (layer 1's lookup_hca);
//   - the application's RC connect (ConnectSteps) and its checked traffic
//     (Message, Round, CheckSend, CheckRecv): every signaled WR completes
//     exactly once, in order; every message arrives once, in order, with
//     its data.
//
// It does not import the runtime, so the runtime's own tests use it too.
package shimtest
