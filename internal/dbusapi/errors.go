package dbusapi

import (
	"context"
	"errors"

	"github.com/godbus/dbus/v5"

	"github.com/ibpath/ibpath/internal/api"
)

// D-Bus error names, one per api error code.
const (
	ErrBadRequest   = "org.ibpath.Error.BadRequest"
	ErrForbidden    = "org.ibpath.Error.Forbidden"
	ErrNotFound     = "org.ibpath.Error.NotFound"
	ErrConflict     = "org.ibpath.Error.Conflict"
	ErrOwnerGone    = "org.ibpath.Error.OwnerGone"
	ErrOwnerTimeout = "org.ibpath.Error.OwnerTimeout"
	ErrInternal     = "org.ibpath.Error.Internal"
)

// errorNames maps api error codes to D-Bus error names.
var errorNames = map[string]string{
	api.CodeBadRequest:   ErrBadRequest,
	api.CodeForbidden:    ErrForbidden,
	api.CodeNotFound:     ErrNotFound,
	api.CodeConflict:     ErrConflict,
	api.CodeOwnerGone:    ErrOwnerGone,
	api.CodeOwnerTimeout: ErrOwnerTimeout,
	api.CodeInternal:     ErrInternal,
}

// ErrorName returns the D-Bus error name of an api error code, and
// ErrInternal for a code it does not know.
func ErrorName(code string) string {
	if n, ok := errorNames[code]; ok {
		return n
	}
	return ErrInternal
}

// newError is a D-Bus error whose single body argument is the message, as
// the specification recommends.
func newError(name, msg string) *dbus.Error {
	return dbus.NewError(name, []any{msg})
}

// toDBusError turns an error of the Backend into a D-Bus error: an
// *api.Error keeps its code, a context deadline is an owner timeout, and
// anything else is internal.
func toDBusError(err error) *dbus.Error {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		return newError(ErrorName(ae.Code), ae.Message)
	case errors.Is(err, context.DeadlineExceeded):
		return newError(ErrOwnerTimeout, err.Error())
	default:
		return newError(ErrInternal, err.Error())
	}
}
