package shim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// UverbsPrefix names the character devices a device context holds open:
// ibv_open_device opens one /dev/infiniband/uverbsN per context.
const UverbsPrefix = "/dev/infiniband/uverbs"

// Unseen watches for device contexts the program opened without the
// shim: libibverbs's own ibv_open_device, reached through a handle the
// shim did not give (IBPATH_DLOPEN=off, a machine where dlopen is not
// interposed, a libibverbs the shim does not stand in for), or a
// provider's own open (mlx5dv_open_device, UCX's DevX transports). Their
// QPs are never protected, and nothing else says so.
type Unseen struct {
	FDDir  string           // the process's fd links: /proc/self/fd
	Prefix string           // what a context's fd links to: UverbsPrefix
	Seen   func() int       // contexts open through the shim's ibv_open_device (its own among them)
	At     []time.Duration  // when to look, from the start
	Warn   func(msg string) // said once
	Sleep  func(time.Duration)
}

// UnseenChecks are the times after the shim loaded that the watch looks:
// a program opens its devices at start-up (MPI_Init, NCCL's communicator
// init), seconds to a minute in.
var UnseenChecks = []time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute}

// Run looks at each time of At and warns once when more contexts are
// open than came through the shim; it returns then, or after the last
// look, or when the fd links cannot be read.
func (u Unseen) Run() {
	var slept time.Duration
	for _, at := range u.At {
		if at > slept {
			u.Sleep(at - slept)
			slept = at
		}
		n, open, err := u.look()
		if err != nil {
			return
		}
		if n > open {
			u.Warn(fmt.Sprintf("libibpath: the program has %d RDMA device context(s) open that did not come through the shim's ibv_open_device "+
				"(it resolved libibverbs's verbs itself: IBPATH_DLOPEN=off, a machine where dlopen is not interposed, a libibverbs "+
				"the shim does not stand in for; or it opened them with a provider's own call, mlx5dv_open_device): their QPs are not protected", n-open))
			return
		}
	}
}

// look counts the context fds and the contexts the shim saw, the latter
// before and after: a count that moved meanwhile (a device opened or
// closed while the links were read) reads as nothing unseen.
func (u Unseen) look() (fds, seen int, err error) {
	before := u.Seen()
	ents, err := os.ReadDir(u.FDDir)
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", u.FDDir, err)
	}
	for _, e := range ents {
		if t, err := os.Readlink(filepath.Join(u.FDDir, e.Name())); err == nil && strings.HasPrefix(t, u.Prefix) {
			fds++
		}
	}
	if after := u.Seen(); after != before {
		return 0, 0, nil
	}
	return fds, before, nil
}
