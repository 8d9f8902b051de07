//go:build linux && cgo

package ibv

/*
#cgo LDFLAGS: -libverbs -ldl
#include "helpers.h"
*/
import "C"

import (
	"errors"
	"syscall"

	"github.com/ibpath/ibpath/verbs"
)

// retErr converts the result of a libibverbs call that returns 0 or an
// errno value (the common convention), or -1 with errno set (some
// providers and sysfs readers), into a *verbs.Error naming op.
func retErr(op string, ret C.int, cerr error, format string, args ...any) error {
	if ret == 0 {
		return nil
	}
	var en syscall.Errno
	switch {
	case ret > 0:
		en = syscall.Errno(ret)
	case errors.As(cerr, &en) && en != 0:
	case ret < -1:
		en = syscall.Errno(-ret)
	default:
		en = syscall.EIO
	}
	return verbs.Errorf(op, en, format, args...)
}

// nullErr converts errno after a libibverbs call that returned NULL.
func nullErr(op string, cerr error, format string, args ...any) error {
	var en syscall.Errno
	if !errors.As(cerr, &en) || en == 0 {
		en = syscall.EIO
	}
	return verbs.Errorf(op, en, format, args...)
}
