package daemon

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Who holds the store's lock, when opening it timed out: the flock that
// bbolt takes shows in /proc/locks with the pid of the process that took
// it and the file's device and inode. Linux only; elsewhere, or when the
// file is not listed, the holder is not known.

// lockHolder is the process holding a lock on path; pid 0 when not known.
type lockHolder struct {
	pid  int
	comm string // its /proc/PID/comm, "" if unreadable
}

// findLockHolder looks path's lock holder up in /proc/locks.
func findLockHolder(path string) lockHolder {
	fi, err := os.Stat(path)
	if err != nil {
		return lockHolder{}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return lockHolder{}
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return lockHolder{}
	}
	defer f.Close()
	pid := lockPID(f, uint64(st.Dev), st.Ino)
	if pid <= 0 {
		return lockHolder{}
	}
	h := lockHolder{pid: pid}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		h.comm = strings.TrimSpace(string(b))
	}
	return h
}

// lockPID reads /proc/locks lines ("1: FLOCK  ADVISORY  WRITE 17720
// fe:00:10011471 0 EOF") and returns the pid of the first lock held (not
// waited for: "->") on the file of device dev and inode ino; 0 if none.
func lockPID(r io.Reader, dev, ino uint64) int {
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] == "->" || f[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// lockedStoreError says that the store at path is held by another
// process, which one when known, and what to do. It wraps err (the
// store's ErrLocked) without repeating it: the sentence says it all.
func lockedStoreError(path, stateDir string, h lockHolder, err error) error {
	var who string
	switch {
	case h.pid == 0:
		who = "another process holds its lock (another ibpathd on this state directory?)"
	case strings.HasPrefix(h.comm, "ibpathd"):
		who = fmt.Sprintf("another ibpathd (pid %d) holds its lock", h.pid)
	case h.comm != "":
		who = fmt.Sprintf("process %d (%s) holds its lock", h.pid, h.comm)
	default:
		who = fmt.Sprintf("process %d holds its lock", h.pid)
	}
	return &storeLockedError{msg: fmt.Sprintf("store %s is in use: %s: stop it first, or give this ibpathd a state directory "+
		"of its own (--state-dir, now %s)", path, who, stateDir), err: err}
}

// storeLockedError is lockedStoreError's error.
type storeLockedError struct {
	msg string
	err error
}

func (e *storeLockedError) Error() string { return e.msg }
func (e *storeLockedError) Unwrap() error { return e.err }
