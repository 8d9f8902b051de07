//go:build !ibpath_faultinject

package main

// inject is a no-op outside the ibpath_faultinject build (guard.go).
func inject(string) {}
