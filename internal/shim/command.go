package shim

import (
	"fmt"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
)

// Command carries out an arm, migrate, drain or undrain relayed by
// ibpathd, or takes its view of a port. Layer 1 acts
// only on QPs it armed; for any other QP the answer says why not.
func (r *Runtime) Command(c ownerproto.Command) ownerproto.Result {
	if c.Op == ownerproto.OpDrain || c.Op == ownerproto.OpUndrain {
		return r.Drain(c)
	}
	if c.Op == ownerproto.OpPortView {
		return r.PortView(c)
	}
	if r.l1 != nil {
		if res, ok := r.l1.Command(c); ok {
			return res
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, q := range r.qps {
		if q.dev.name != c.Device || k.qpn != c.QPN {
			continue
		}
		before := status.QPState{APM: q.status.APM, Primary: q.status.Primary}
		why := q.status.Reason
		if why == "" {
			why = "the QP is not connected yet"
		}
		return ownerproto.Result{Before: before, Error: fmt.Sprintf("%s QP %#x: layer 1 does not protect it: %s", c.Device, c.QPN, why)}
	}
	return ownerproto.Result{Error: fmt.Sprintf("%s QP %#x: no such QP in this process", c.Device, c.QPN)}
}
