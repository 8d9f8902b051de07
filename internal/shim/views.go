package shim

import (
	"fmt"

	"github.com/ibpath/ibpath/internal/ownerproto"
)

// Port views are what ibpathd tells the process of the node's ports
// (ownerproto.OpPortView; docs/DAEMON.md, "Port views"): flap damping
// over every flap ibpathd saw since it started, and each port's
// congestion signs per second. The backup choice (chooseBackup) takes a
// port ibpathd says is suppressed as the process's own damper would, and
// among the calm candidates prefers the least congested.

// PortView applies a port_view command: the view replaces the last one
// of that port (an empty view forgets it).
func (r *Runtime) PortView(c ownerproto.Command) ownerproto.Result {
	if c.View == nil {
		return ownerproto.Result{Error: fmt.Sprintf("%s port %d: a port view without its view", c.Device, c.Port)}
	}
	k := portKey{c.Device, c.Port}
	r.mu.Lock()
	defer r.mu.Unlock()
	if *c.View == (ownerproto.PortView{}) {
		delete(r.views, k)
	} else {
		if r.views == nil {
			r.views = map[portKey]ownerproto.PortView{}
		}
		r.views[k] = *c.View
	}
	return ownerproto.Result{OK: true}
}

// candidate is a port's standing for the backup choice: calm (ACTIVE,
// not drained, not suppressed by the process's flap damping nor by
// ibpathd's) and its congestion per second as ibpathd last told it.
func (r *Runtime) candidate(dev string, port uint8) (calm bool, congestion float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := portKey{dev, port}
	v := r.views[k]
	return !r.drained[k] && !v.Suppressed && !r.suppressedLocked(dev, port), v.Congestion
}
