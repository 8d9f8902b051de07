package shim

import (
	"errors"
	"os"
	"syscall"
)

// fdWait blocks until a non-blocking fd (an async event fd, a completion
// channel fd) is readable, through the Go runtime's poller on a duplicate
// of it, without reading it: the caller reads what is pending (until
// EAGAIN) and waits again. A wait that starts while data is pending
// returns at once, so no event that came between the caller's last read
// and the wait is missed.
type fdWait struct {
	f  *os.File
	rc syscall.RawConn
}

// newFDWait prepares waits on fd (which stays the caller's).
func newFDWait(fd int) (*fdWait, error) {
	if !canWait {
		return nil, errors.New("waiting on an fd needs ppoll (Linux)")
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(dup, true); err != nil {
		syscall.Close(dup)
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "ibpath-wait")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fdWait{f: f, rc: rc}, nil
}

// Wait returns when the fd is readable, or with an error once Close was
// called.
func (w *fdWait) Wait() error {
	return w.rc.Read(func(fd uintptr) bool { return readable(int(fd)) })
}

// Close ends every wait and closes the duplicate.
func (w *fdWait) Close() { w.f.Close() }
