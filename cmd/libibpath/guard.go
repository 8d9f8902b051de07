package main

import "C"

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync/atomic"
)

// The shim runs inside other people's processes: a Go panic in an
// exported function would abort the program. Every export recovers (in a
// deferred function of its own: recover works only there) and reports
// the panic through panicked, then returns what lets the call go on as
// plain verbs would: a QP not protected, a modify made by the provider, a
// post or poll of a QP layer 2 had taken over failing as on a dead
// device. The ibpath_faultinject build makes the export named by
// IBPATH_FAULT_PANIC panic (inject), so that tests can show each
// recovery.

// panics counts recovered panics.
var panics atomic.Int64

// panicked reports a recovered panic of export name: once with its stack,
// then counted.
func panicked(name string, p any) {
	if panics.Add(1) <= 3 {
		fmt.Fprintf(os.Stderr, "libibpath: panic recovered in %s: %v; the call goes on as plain verbs\n%s", name, p, debug.Stack())
		return
	}
	fmt.Fprintf(os.Stderr, "libibpath: panic recovered in %s: %v (%d so far)\n", name, p, panics.Load())
}

// guard is the deferred recovery of an export without a result.
func guard(name string) {
	if p := recover(); p != nil {
		panicked(name, p)
	}
}

// guardResult is the deferred recovery of an export with a result: on a
// panic the result becomes fallback, and also (when set) runs first.
func guardResult(r *C.int, fallback C.int, name string, also func()) {
	if p := recover(); p != nil {
		panicked(name, p)
		if also != nil {
			also()
		}
		*r = fallback
	}
}
