// Package fsm owns ibpath's pure state machines: the per-QP path-migration
// machine of layer 1 (APM) and the per-QP cross-NIC machine of layer 2
// (the send queue's Default, Fallback, WaitSignaled and WaitDrained states
// with the handshake and switch-back steps between them, and the receive
// queue's Default and Fallback). Each machine takes events and returns the
// actions its driver must perform, in the style of etcd's raft: no I/O, no
// clock, no goroutines, no randomness, so any fault schedule replays
// exactly from its events. Their behaviour is written as scenarios in
// testdata/.
package fsm
