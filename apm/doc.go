// Package apm owns layer 1 of ibpath: InfiniBand Automatic Path Migration
// for every RC QP of a process. For each QP it specifies an alternate path
// (chosen by pathsel), loads it with REARM, confirms ARMED, re-arms after
// every migration with the best remaining path, migrates proactively when
// the primary port reports PORT_ERR instead of waiting for RC timeouts,
// brings traffic back to the original path per the failback policy, and
// hands the QP to the next layer when no alternate is left.
//
// The per-QP decisions are the pure machine fsm.APM; this package performs
// its actions through verbs. It starts no goroutines and reads time only
// from a verbs.Clock: the runtime feeds it async events (HandleEvent) and
// calls Tick when Tick asked to be called.
package apm
