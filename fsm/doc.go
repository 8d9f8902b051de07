// Package fsm owns ibpath's pure state machines: the per-QP path-migration
// machine of layer 1 (APM). Each machine takes events and returns the
// actions its driver must perform, in the style of etcd's raft: no I/O, no
// clock, no goroutines, no randomness, so any fault schedule replays
// exactly from its events.
package fsm
