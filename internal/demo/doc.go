// Package demo owns the scripted simulator demo behind `ibpath sim`: it
// builds a small rail-optimized fabric on verbs/sim, runs one layer-1
// manager (apm.Manager) per host as ibpath does, connects two RC queue
// pairs through the managers' ModifyQP (so both are armed for Automatic
// Path Migration), protects the second one (QP B) with layer 2 (a
// crossnic.Conn per host, with a backup QP on the host's other HCA),
// drives application traffic in virtual time, pulls a cable under QP A
// and plugs it back, pulls every cable of QP B's HCA on one host and plugs
// them back (layer 1 hands QP B over, layer 2 fails over and, with
// recovery enabled, switches back; layer 1 then protects QP B anew), then
// kills that HCA, and prints a readable timeline of what the application
// sees through verbs (async events, retries, error completions) beside
// what layer 1 does (arming, proactive migration, re-arming, failback,
// handover to the next layer) and what layer 2 does (fault, handshake
// with receive counters, rewind onto the backups, probe, fence, switch
// back, backup purge).
//
// Everything runs on one goroutine: the demo's loop reads async events
// into the managers and calls their Tick at the instants Tick asks for,
// as the runtime will. The demo is deterministic: the same seed gives
// byte-identical output.
package demo
