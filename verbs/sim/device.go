package sim

import (
	"github.com/ibpath/ibpath/verbs"
)

// Device limits of the simulated adapter (close to a ConnectX-6).
const (
	maxQPWR        = 32768
	maxSGE         = 30
	maxCQE         = 4194303
	maxInline      = 512
	maxRdAtom      = 16
	maxQPs         = 262144
	maxMsgSize     = 1 << 30
	vendorMellanox = 0x02c9
)

// Context is an open simulated device. It implements verbs.Context.
type Context struct {
	hca    *HCA
	gen    uint32 // HCA incarnation at open: a context does not survive the HCA's death
	closed bool
	events []verbs.AsyncEvent
	ready  chan struct{}
}

var _ verbs.Provider = (*Host)(nil)
var _ verbs.Context = (*Context)(nil)
var _ verbs.AsyncNotifier = (*Context)(nil)

// Devices lists the host's working HCAs (ibv_get_device_list). A dead HCA
// is not listed, as a device in reset disappears from sysfs.
func (h *Host) Devices() ([]verbs.DeviceInfo, error) {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	var out []verbs.DeviceInfo
	for _, a := range h.hcas {
		if a.alive {
			out = append(out, a.info())
		}
	}
	return out, nil
}

// Open opens a device context (ibv_open_device).
func (h *Host) Open(name string) (verbs.Context, error) {
	h.fab.mu.Lock()
	defer h.fab.mu.Unlock()
	a := h.HCA(name)
	if a == nil {
		return nil, verbs.Errorf("ibv_open_device", verbs.ENODEV, "no device %q on %s", name, h.name)
	}
	if !a.alive {
		return nil, verbs.Errorf("ibv_open_device", verbs.ENODEV, "%s on %s is dead", name, h.name)
	}
	c := &Context{hca: a, gen: a.gen, ready: make(chan struct{}, 1)}
	a.contexts = append(a.contexts, c)
	return c, nil
}

func (a *HCA) info() verbs.DeviceInfo {
	return verbs.DeviceInfo{Name: a.name, GUID: a.guid, NodeType: verbs.NodeCA}
}

func (c *Context) fab() *Fabric { return c.hca.host.fab }

// usable fails with EIO when the context's device died, or EINVAL when the
// context was closed.
func (c *Context) usable(op string) error {
	if c.closed {
		return verbs.Errorf(op, verbs.EINVAL, "device context closed")
	}
	if !c.hca.alive || c.gen != c.hca.gen {
		return verbs.Errorf(op, verbs.EIO, "device %s is in a fatal state", c.hca.name)
	}
	return nil
}

// Device describes the device.
func (c *Context) Device() verbs.DeviceInfo { return c.hca.info() }

// HCA returns the simulated adapter behind the context.
func (c *Context) HCA() *HCA { return c.hca }

// QueryDevice implements ibv_query_device.
func (c *Context) QueryDevice() (verbs.DeviceAttr, error) {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.usable("ibv_query_device"); err != nil {
		return verbs.DeviceAttr{}, err
	}
	caps := verbs.DeviceBadPKeyCntr | verbs.DeviceBadQKeyCntr | verbs.DeviceChangePhyPort |
		verbs.DeviceCurrQPStateMod | verbs.DevicePortActiveEvent | verbs.DeviceRCRNRNAKGen
	if c.hca.apm {
		caps |= verbs.DeviceAutoPathMig
	}
	return verbs.DeviceAttr{
		FWVer: "20.99.1000 (sim)", NodeGUID: c.hca.guid, SysImageGUID: c.hca.guid,
		MaxMRSize: 1 << 40, VendorID: vendorMellanox, VendorPartID: 4123, HWVer: 0,
		MaxQP: maxQPs, MaxQPWR: maxQPWR, DeviceCapFlags: caps, MaxSGE: maxSGE,
		MaxCQ: 1 << 24, MaxCQE: maxCQE, MaxMR: 1 << 24, MaxPD: 1 << 24,
		MaxQPRdAtom: maxRdAtom, MaxQPInitRdAtom: maxRdAtom, AtomicCap: verbs.AtomicHCA,
		MaxPKeys: 1, PhysPortCnt: uint8(len(c.hca.ports)), MaxInlineData: maxInline,
	}, nil
}

// QueryPort implements ibv_query_port.
func (c *Context) QueryPort(port uint8) (verbs.PortAttr, error) {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.usable("ibv_query_port"); err != nil {
		return verbs.PortAttr{}, err
	}
	p := c.hca.Port(port)
	if p == nil {
		return verbs.PortAttr{}, verbs.Errorf("ibv_query_port", verbs.EINVAL, "%s has no port %d", c.hca.name, port)
	}
	a := verbs.PortAttr{
		State: p.state, MaxMTU: verbs.MTU4096, ActiveMTU: verbs.MTU4096, GIDTblLen: len(p.gids),
		MaxMsgSz: maxMsgSize, PKeyTblLen: 1, LMC: p.lmc, MaxVLNum: 4,
		ActiveWidth: p.width, ActiveSpeed: p.speed, PhysState: p.phys, LinkLayer: c.hca.linkLayer,
	}
	if c.hca.linkLayer == verbs.LinkLayerInfiniBand {
		a.LID = p.lid
		a.SMLID = f.smLID
		a.PortCapFlags = 1 << 9 // IB_PORT_AUTO_MIGR_SUP
	} else {
		a.ActiveMTU = verbs.MTU1024
		a.LMC = 0
	}
	return a, nil
}

// QueryGID implements ibv_query_gid.
func (c *Context) QueryGID(port uint8, index int) (verbs.GID, error) {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.usable("ibv_query_gid"); err != nil {
		return verbs.GID{}, err
	}
	p := c.hca.Port(port)
	if p == nil {
		return verbs.GID{}, verbs.Errorf("ibv_query_gid", verbs.EINVAL, "%s has no port %d", c.hca.name, port)
	}
	if index < 0 || index >= len(p.gids) {
		return verbs.GID{}, verbs.Errorf("ibv_query_gid", verbs.EINVAL, "GID index %d out of range (table has %d)", index, len(p.gids))
	}
	return p.gids[index], nil
}

// errNoEvent is GetAsyncEvent's answer when nothing is pending: built once,
// as callers poll for events far more often than events come.
var errNoEvent = verbs.Errorf("ibv_get_async_event", verbs.EAGAIN, "no event pending")

// GetAsyncEvent implements ibv_get_async_event on a non-blocking fd.
func (c *Context) GetAsyncEvent() (verbs.AsyncEvent, error) {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.closed {
		return verbs.AsyncEvent{}, verbs.Errorf("ibv_get_async_event", verbs.EINVAL, "device context closed")
	}
	if len(c.events) == 0 {
		return verbs.AsyncEvent{}, errNoEvent
	}
	ev := c.events[0]
	c.events[0] = verbs.AsyncEvent{}
	c.events = c.events[1:]
	switch ev.Type.Scope() {
	case verbs.ScopeQP:
		ev.QP.(*QP).eventsUnacked++
	case verbs.ScopeCQ:
		ev.CQ.(*CQ).eventsUnacked++
	case verbs.ScopeSRQ:
		ev.SRQ.(*SRQ).eventsUnacked++
	}
	return ev, nil
}

// AckAsyncEvent implements ibv_ack_async_event.
func (c *Context) AckAsyncEvent(ev verbs.AsyncEvent) {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch ev.Type.Scope() {
	case verbs.ScopeQP:
		if q, ok := ev.QP.(*QP); ok && q.eventsUnacked > 0 {
			q.eventsUnacked--
		}
	case verbs.ScopeCQ:
		if q, ok := ev.CQ.(*CQ); ok && q.eventsUnacked > 0 {
			q.eventsUnacked--
		}
	case verbs.ScopeSRQ:
		if s, ok := ev.SRQ.(*SRQ); ok && s.eventsUnacked > 0 {
			s.eventsUnacked--
		}
	}
}

// AsyncReady implements verbs.AsyncNotifier.
func (c *Context) AsyncReady() <-chan struct{} { return c.ready }

// PendingEvents reports how many async events wait to be read.
func (c *Context) PendingEvents() int {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(c.events)
}

// Close implements ibv_close_device. Resources created through the context
// stay as they are, as with libibverbs; the context stops receiving events.
func (c *Context) Close() error {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.closed {
		return verbs.Errorf("ibv_close_device", verbs.EINVAL, "already closed")
	}
	c.closeLocked()
	return nil
}

// closeLocked closes c: no more events, off its HCA's contexts. The
// fabric's lock is held.
func (c *Context) closeLocked() {
	c.closed = true
	c.events = nil
	cs := c.hca.contexts
	for i, x := range cs {
		if x == c {
			c.hca.contexts = append(cs[:i], cs[i+1:]...)
			break
		}
	}
}

// Teardown is the end of the process that opened c (it exited, or was
// killed): as the kernel's uverbs cleanup does at the last close of the
// device file (drivers/infiniband/core/rdma_core.c,
// uverbs_destroy_ufile_hw), every QP created through c is destroyed,
// whatever it holds and whatever events wait unacknowledged (no
// completion is made), and c is closed. A packet for a destroyed QP is
// dropped (no such QP), so the peer's requester retries and completes
// with RETRY_EXC_ERR. A context closed already is only torn down.
func (c *Context) Teardown() {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range append([]*QP(nil), c.hca.qpList...) {
		if q.ctx == c && !q.destroyed {
			q.destroyLocked()
		}
	}
	if !c.closed {
		c.closeLocked()
	}
}

// raise queues an async event on one context.
func (c *Context) raise(ev verbs.AsyncEvent) {
	if c.closed {
		return
	}
	c.events = append(c.events, ev)
	select {
	case c.ready <- struct{}{}:
	default:
	}
	f := c.fab()
	if f.tracer != nil {
		f.trace(c.hca, "event", "%v%s", ev.Type, eventTarget(ev))
	}
}

// raiseDevice queues a port or device event on every open context of the
// HCA's current incarnation.
func (a *HCA) raiseDevice(ev verbs.AsyncEvent) {
	for _, c := range a.contexts {
		if c.gen == a.gen {
			c.raise(ev)
		}
	}
}
