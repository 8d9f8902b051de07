//go:build ibpath_faultinject

package main

// The C side's check of a forked child (shim.h, LIP_CHILD_CHECK) is on
// in this build.

// #cgo CFLAGS: -DLIP_FAULTINJECT
import "C"

import (
	"fmt"
	"os"
)

// loadPid is the process the shim was loaded in.
var loadPid = os.Getpid()

// inject panics in the export named by IBPATH_FAULT_PANIC (guard.go):
// the ibpath_faultinject build's way to show each recovery. It also ends
// a child forked without exec that entered the Go side, with exit status
// 97 and a line on stderr: the shim must never call Go there (the
// runtime's threads did not follow the fork; interpose.c's lip_forked),
// and a call that happens not to hang would otherwise go unseen.
func inject(name string) {
	if pid := os.Getpid(); pid != loadPid {
		fmt.Fprintf(os.Stderr, "libibpath: %s entered in pid %d, a child of %d forked without exec\n", name, pid, loadPid)
		os.Exit(97)
	}
	if os.Getenv("IBPATH_FAULT_PANIC") == name {
		panic("injected by IBPATH_FAULT_PANIC")
	}
}
