//go:build ibpath_faultinject

package main

import "os"

// inject panics in the export named by IBPATH_FAULT_PANIC (guard.go):
// the ibpath_faultinject build's way to show each recovery.
func inject(name string) {
	if os.Getenv("IBPATH_FAULT_PANIC") == name {
		panic("injected by IBPATH_FAULT_PANIC")
	}
}
