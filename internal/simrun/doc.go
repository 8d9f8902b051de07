// Package simrun runs the shim's runtime (internal/shim, layers 1 and 2)
// as a process runs it, on a simulated fabric (verbs/sim), in virtual time
// and deterministically: the same configuration and the same calls replay
// exactly. It owns the world of such a run:
//
//   - a rail-optimized fabric of two hosts with two HCAs each (two ports
//     and LMC 1 on InfiniBand, one port on RoCE);
//   - per host and per connection an application process on one of the
//     HCAs, under a stepped runtime (shim.NewSteppedRuntime) with the
//     shim's configuration from its environment, shimtest's Go data path
//     (the C hot path's stand-in, express lane included) and a session
//     with ibpathd's stand-ins (shimtest.Node over one shimtest.Cluster,
//     shimtest.Adapters describing the fabric's adapters);
//   - the applications' checked traffic (shimtest's messages): every
//     signaled WR completes exactly once, in order; every message arrives
//     once, in order, with its data; and, once the traffic stopped, every
//     message whose send completed arrived;
//   - the faults a caller injects (cables, HCAs, leaf switches, loss,
//     delay), and what the run saw, in order (Record): the faults, the
//     async events the applications read, every status and event the
//     runtimes reported, their log lines, the fabric's trace.
//
// internal/demo (`ibpath sim`) plays its scenarios on it; its tests check
// the runtime's stepped mode through it.
package simrun
