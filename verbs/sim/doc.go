// Package sim owns a deterministic simulated InfiniBand/RoCE fabric that
// implements the verbs interfaces: hosts with HCAs and ports, LIDs with
// LMC, GIDs, leaf and spine switches, the RC transport (PSNs, ACK/NAK,
// retransmission, RNR), Automatic Path Migration that really migrates,
// async events, fault injection (link flaps, HCA and switch death,
// packet and ACK loss, exact-PSN drops), and congestion marking (ECN and
// CNPs on RoCE, credit waits on InfiniBand), which only counts.
//
// The fabric runs on a virtual clock and a seeded random source. It starts
// no goroutines: the caller drives it with Step, RunUntilIdle, RunUntil or
// RunFor. Every public method takes the fabric lock, so event pumps in other
// goroutines may call into it safely; the same seed and the same calls give
// the same trace.
//
// It is a device model, not a mock: modify-QP masks and transitions, keys
// and access flags are validated as a real HCA does and failures carry the
// errno a real device returns. Known differences from hardware are listed
// in docs/SIMULATOR.md.
package sim
