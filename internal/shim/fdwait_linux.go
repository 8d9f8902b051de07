package shim

import (
	"syscall"
	"unsafe"
)

const canWait = true

// readable reports whether fd has data to read now (ppoll with a zero
// timeout).
func readable(fd int) bool {
	type pollFd struct {
		fd      int32
		events  int16
		revents int16
	}
	const pollIn = 0x1
	p := pollFd{fd: int32(fd), events: pollIn}
	var ts syscall.Timespec
	n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&p)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return errno == 0 && n == 1 && p.revents != 0
}
