// Package verbs is the Go model of the RDMA verbs surface that ibpath
// touches: devices, ports, protection domains, memory regions, completion
// queues and channels, RC queue pairs, work requests and completions, QP
// attributes with their masks, and async events.
//
// Names and numeric values mirror libibverbs (<infiniband/verbs.h>) so that
// a binding over the real library is a thin mapping and so that values read
// in logs match what an operator sees in rdma-core tools. The package holds
// interfaces, value types and constants only; implementations live in
// verbs/sim (a simulated fabric) and verbs/ibv (rdma-core through cgo).
package verbs
