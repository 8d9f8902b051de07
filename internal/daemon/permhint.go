package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Paths ibpathd writes, and the flags that move them, for the hint of a
// permission error: by default they are root's (/var/lib/ibpath,
// /run/ibpath), so an ibpathd started by another user stops on the first
// of them.
const (
	pathStateDir = "state directory"
	pathSocket   = "socket"
)

// permissionHint adds to err, when it is a permission error on a path
// of what (pathStateDir, pathSocket), that this user may not write there
// and what to do; other errors it returns as they are. err names the
// path already.
func permissionHint(err error, what string) error {
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	move := "--state-dir DIR (and --socket PATH)"
	if what == pathSocket {
		move = "--socket PATH (and --state-dir DIR)"
	}
	return fmt.Errorf("%w: uid %d may not write the %s there: run ibpathd as root, or give it paths this user may write: %s",
		err, os.Geteuid(), what, move)
}
