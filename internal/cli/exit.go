package cli

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/ibpath/ibpath/internal/api"
)

// Exit codes of ibpath. They are part of the interface: scripts test them.
const (
	ExitOK         = 0 // success
	ExitError      = 1 // any other error
	ExitUsage      = 2 // bad command line: unknown command or flag, missing or malformed argument
	ExitDaemonDown = 3 // no ibpathd on the socket: nothing listens there, the path is no socket, or what answers is not ibpathd
	ExitDenied     = 4 // ibpathd, or the socket's permissions, refused the request
	ExitPartial    = 5 // an action (arm, migrate, drain) failed on some of its QPs or processes
	ExitViolation  = 6 // ibpath sim: the run's verdict is FAIL (something ibpath guarantees did not hold)
)

// usageError is a mistake on the command line.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usage error (exit code 2).
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// partialError: an action failed on some of its QPs; the results were
// printed already.
type partialError struct {
	action string
	failed int
	total  int
	unit   string // "QPs" when empty
	msg    string // the whole message, when set
}

func (e *partialError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	unit := e.unit
	if unit == "" {
		unit = "QPs"
	}
	return fmt.Sprintf("%s failed on %d of %d %s", e.action, e.failed, e.total, unit)
}

// socketDeniedError: the socket exists but its permissions keep this user
// out. api.Client reports it as the daemon being down (the dial failed);
// it is a denial.
type socketDeniedError struct {
	socket string
	err    error
}

func (e *socketDeniedError) Error() string {
	return fmt.Sprintf("cannot connect to ibpathd (socket %s): permission denied", e.socket)
}
func (e *socketDeniedError) Unwrap() error { return e.err }

// clientError turns an error of api.Client into the error the CLI
// reports.
func clientError(socket string, err error) error {
	if errors.Is(err, api.ErrDaemonDown) && errors.Is(err, fs.ErrPermission) {
		return &socketDeniedError{socket: socket, err: err}
	}
	return err
}

// exitCode maps the error a command returned to the process exit code.
func exitCode(err error) int {
	var ue *usageError
	var pe *partialError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.Is(err, api.ErrDenied):
		return ExitDenied
	case errors.As(err, new(*socketDeniedError)):
		return ExitDenied
	case errors.Is(err, api.ErrDaemonDown), errors.Is(err, api.ErrNotSocket), errors.Is(err, api.ErrNotIbpathd):
		return ExitDaemonDown
	case errors.As(err, &pe):
		return ExitPartial
	case isViolation(err):
		return ExitViolation
	case isHelpExit(err):
		return ExitUsage
	}
	return ExitError
}
