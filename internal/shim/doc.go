// Package shim owns the Go side of libibpath, the LD_PRELOAD shim: its
// configuration from the environment, its view of the application's
// devices and QPs (fed by the interposed control verbs of cmd/libibpath),
// the decision of which layer protects each QP, and the session with
// ibpathd (reporting QPs and events, answering relayed commands), which is
// optional: without a daemon the shim works the same.
//
// It holds no C pointers and makes no cgo calls: cmd/libibpath converts
// the C structures and calls in, which keeps this package testable with
// plain `go test`.
package shim
