//go:build !linux

package shim

const canWait = false // newFDWait fails: callers poll instead

func readable(int) bool { return false }
