//go:build linux && cgo

package ibv

/*
#include "helpers.h"
*/
import "C"

import (
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// Async events. The package starts no goroutines (goroutines live in
// asyncev and internal/): instead of implementing verbs.AsyncNotifier it
// exposes the async fd (AsyncFD), which an event pump waits on with
// poll(2) or epoll and then drains with GetAsyncEvent until EAGAIN.

// AsyncFD is the context's async event fd, readable when an event is
// pending. It is O_NONBLOCK on contexts opened by this package.
func (x *Context) AsyncFD() int { return int(x.c.async_fd) }

// GetAsyncEvent implements ibv_get_async_event without blocking: EAGAIN
// when nothing is pending. On a wrapped context (whose fd may be blocking)
// readiness is checked first with a zero-timeout poll(2). QP and CQ events
// name the wrappers of this package; a QP or CQ it has never seen gets a
// fresh wrapper. SRQ and WQ events (not modelled) are acknowledged at once
// and returned with only their type.
func (x *Context) GetAsyncEvent() (verbs.AsyncEvent, error) {
	const op = "ibv_get_async_event"
	if !x.owned {
		switch r := C.ibp_fd_readable(x.c.async_fd); {
		case r < 0:
			return verbs.AsyncEvent{}, retErr(op, -r, nil, "poll of the async fd of %s", x.info.Name)
		case r == 0:
			return verbs.AsyncEvent{}, verbs.Errorf(op, verbs.EAGAIN, "no async event pending on %s", x.info.Name)
		}
	}
	var typ, port C.int
	var elem unsafe.Pointer
	if r := C.ibp_get_async_event(x.c, &typ, &elem, &port); r != 0 {
		return verbs.AsyncEvent{}, retErr(op, r, nil, "device %s", x.info.Name)
	}
	ev := verbs.AsyncEvent{Type: verbs.EventType(typ), Port: uint8(port)}
	switch sc := ev.Type.Scope(); {
	case elem == nil:
	case sc == verbs.ScopeQP:
		ev.QP = x.qpFor(elem)
	case sc == verbs.ScopeCQ:
		ev.CQ = x.cqFor(elem)
	}
	return ev, nil
}

// AckAsyncEvent implements ibv_ack_async_event for an event returned by
// GetAsyncEvent.
func (x *Context) AckAsyncEvent(ev verbs.AsyncEvent) {
	var elem unsafe.Pointer
	switch ev.Type.Scope() {
	case verbs.ScopeQP:
		q, ok := ev.QP.(*QP)
		if !ok || q == nil {
			return
		}
		elem = unsafe.Pointer(q.c)
	case verbs.ScopeCQ:
		c, ok := ev.CQ.(*CQ)
		if !ok || c == nil {
			return
		}
		elem = unsafe.Pointer(c.c)
	}
	C.ibp_ack_async_event(C.int(ev.Type), elem, C.int(ev.Port))
}
