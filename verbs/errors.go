package verbs

import (
	"errors"
	"fmt"
	"syscall"
)

// Errno values a verbs call fails with, as libibverbs reports them.
const (
	EINVAL     = syscall.EINVAL
	ENOMEM     = syscall.ENOMEM
	EAGAIN     = syscall.EAGAIN
	EBUSY      = syscall.EBUSY
	EIO        = syscall.EIO
	ENODEV     = syscall.ENODEV
	ENOENT     = syscall.ENOENT
	EPERM      = syscall.EPERM
	EOPNOTSUPP = syscall.EOPNOTSUPP
	EBADF      = syscall.EBADF
	EACCES     = syscall.EACCES
)

// Error is a failed verbs call: which call, why, and the errno a real
// device would return. errors.Is(err, verbs.EINVAL) works through it.
type Error struct {
	Op     string // libibverbs function name, e.g. "ibv_modify_qp"
	Errno  syscall.Errno
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%s: %v", e.Op, e.Errno)
	}
	return fmt.Sprintf("%s: %v: %s", e.Op, e.Errno, e.Detail)
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

// Errorf builds an *Error.
func Errorf(op string, errno syscall.Errno, format string, args ...any) error {
	return &Error{Op: op, Errno: errno, Detail: fmt.Sprintf(format, args...)}
}

// ErrnoOf extracts the errno from err, or 0 if it carries none.
func ErrnoOf(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return 0
}
