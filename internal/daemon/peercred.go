package daemon

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"github.com/ibpath/ibpath/internal/api"
)

// peerCred reads SO_PEERCRED of a UNIX socket connection: the uid, gid
// and pid of the process that connected, as the kernel recorded them at
// connect time (they cannot be forged by the client).
func peerCred(c net.Conn) (api.Caller, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return api.Caller{}, fmt.Errorf("peer credentials: %T is not a UNIX socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return api.Caller{}, fmt.Errorf("peer credentials: SyscallConn: %w", err)
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return api.Caller{}, fmt.Errorf("peer credentials: %w", err)
	}
	if serr != nil {
		return api.Caller{}, fmt.Errorf("peer credentials: getsockopt SO_PEERCRED: %w", serr)
	}
	return api.Caller{UID: cred.Uid, GID: cred.Gid, PID: int(cred.Pid)}, nil
}

type callerKey struct{}

// callerErrKey carries a failure to read credentials: such a connection
// may do nothing.
type callerErrKey struct{}

// connContext stores the connection's credentials in its context (the
// http.Server's ConnContext hook), once per connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	cr, err := peerCred(c)
	if err != nil {
		return context.WithValue(ctx, callerErrKey{}, err)
	}
	return context.WithValue(ctx, callerKey{}, cr)
}

// callerOf returns the credentials of the connection a request came on.
func callerOf(ctx context.Context) (api.Caller, error) {
	if err, ok := ctx.Value(callerErrKey{}).(error); ok {
		return api.Caller{}, err
	}
	cr, ok := ctx.Value(callerKey{}).(api.Caller)
	if !ok {
		return api.Caller{}, fmt.Errorf("peer credentials: none recorded for this connection")
	}
	return cr, nil
}
