package shim

import (
	"github.com/ibpath/ibpath/internal/status"
)

// CMUnreachable decides about an RDMA_CM_EVENT_UNREACHABLE that librdmacm
// is about to give the application for the rdma_cm id of QP qpn of ctx
// (st is the event's status, -ETIMEDOUT from the kernel's neighbour
// watch). On RoCE the kernel reports it on a connected id when the ARP
// entry of its peer fails, which a pulled cable causes about 3 s after
// the pull: a program that gets it tears the connection down and
// reconnects over the dead link, although layer 2 carries the QP on its
// backup by then. So it returns true, and the event is kept from the
// application, when the id's connection is established (CMEstablished)
// and a layer protects the QP (its status says layer 1 or layer 2).
// Otherwise it returns false and the application gets the event as
// without the shim: an UNREACHABLE of a connection being set up is the
// failure of that setup (librdmacm waits for it on a synchronous id),
// and a QP no layer protects (never armed, or its failover surfaced)
// has nothing to carry it. Either way the log says so at Info.
func (r *Runtime) CMUnreachable(ctx uintptr, qpn uint32, st int) bool {
	r.mu.Lock()
	q := r.qps[qpKey{ctx, qpn}]
	var dev, layer, home string
	var up bool
	if q != nil {
		dev, layer, home, up = q.dev.name, q.status.Layer, q.status.Home.String(), q.cmUp
	}
	r.mu.Unlock()
	pass := func(why string) bool {
		r.log.Info("libibpath: rdma_cm UNREACHABLE reaches the application: "+why,
			"device", dev, "qpn", qpn, "status", st, "layer", layer)
		return false
	}
	switch {
	case q == nil:
		return pass("the shim does not know the QP")
	case !up:
		return pass("its connection is not established")
	case layer != status.LayerAPM && layer != status.LayerCrossNIC:
		return pass("no layer protects the QP")
	}
	r.cmHidden.Add(1)
	r.log.Info("libibpath: rdma_cm UNREACHABLE kept from the application: the QP is protected",
		"device", dev, "qpn", qpn, "status", st, "layer", layer, "home", home)
	return true
}

// CMEstablished records that the rdma_cm connection of QP qpn of ctx was
// established (up: the application is getting RDMA_CM_EVENT_ESTABLISHED
// for its id) or ended (DISCONNECTED).
func (r *Runtime) CMEstablished(ctx uintptr, qpn uint32, up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.qps[qpKey{ctx, qpn}]; q != nil {
		q.cmUp = up
	}
}

// CMHidden counts the rdma_cm events kept from the application.
func (r *Runtime) CMHidden() uint64 { return r.cmHidden.Load() }
