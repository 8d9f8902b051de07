//go:build linux && cgo

package ibv

/*
#include "helpers.h"
#include <stdlib.h>
#include <string.h>
#include <endian.h>

static struct ibv_device *ibp_dev_at(struct ibv_device **l, int i) { return l[i]; }
static uint64_t ibp_guid(struct ibv_device *d) { return be64toh(ibv_get_device_guid(d)); }
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// Provider is the libibverbs device provider (ibv_get_device_list and
// ibv_open_device). The zero value is ready to use.
type Provider struct{}

var _ verbs.Provider = Provider{}

// Devices lists the RDMA devices libibverbs sees. A machine without
// devices yields an empty list; so does one without an RDMA kernel stack
// (ibv_get_device_list fails there with ENOSYS: no uverbs in sysfs).
func (Provider) Devices() ([]verbs.DeviceInfo, error) {
	var n C.int
	l, err := C.ibv_get_device_list(&n)
	if l == nil {
		if errors.Is(err, syscall.ENOSYS) {
			return []verbs.DeviceInfo{}, nil
		}
		return nil, nullErr("ibv_get_device_list", err, "")
	}
	defer C.ibv_free_device_list(l)
	out := make([]verbs.DeviceInfo, 0, int(n))
	for i := 0; i < int(n); i++ {
		out = append(out, deviceInfo(C.ibp_dev_at(l, C.int(i))))
	}
	return out, nil
}

func deviceInfo(d *C.struct_ibv_device) verbs.DeviceInfo {
	return verbs.DeviceInfo{
		Name:     C.GoString(C.ibv_get_device_name(d)),
		GUID:     uint64(C.ibp_guid(d)),
		NodeType: verbs.NodeType(d.node_type),
	}
}

// Open opens the device called name (ibv_open_device). The context's async
// event fd is set to O_NONBLOCK.
func (Provider) Open(name string) (verbs.Context, error) {
	ctx, err := OpenDevice(name)
	if err != nil {
		return nil, err
	}
	return ctx, nil
}

// OpenDevice is Open returning the concrete type.
func OpenDevice(name string) (*Context, error) {
	var n C.int
	l, err := C.ibv_get_device_list(&n)
	if l == nil {
		if errors.Is(err, syscall.ENOSYS) {
			return nil, verbs.Errorf("ibv_open_device", verbs.ENODEV, "no RDMA device named %q: no RDMA kernel support on this host (ibv_get_device_list: ENOSYS)", name)
		}
		return nil, nullErr("ibv_get_device_list", err, "opening %q", name)
	}
	defer C.ibv_free_device_list(l)
	for i := 0; i < int(n); i++ {
		d := C.ibp_dev_at(l, C.int(i))
		if C.GoString(C.ibv_get_device_name(d)) != name {
			continue
		}
		c, err := C.ibv_open_device(d)
		if c == nil {
			return nil, nullErr("ibv_open_device", err, "device %q", name)
		}
		if r := C.ibp_set_nonblock(c.async_fd); r != 0 {
			C.ibv_close_device(c)
			return nil, retErr("fcntl", r, nil, "O_NONBLOCK on the async fd of %q", name)
		}
		return newContext(c, true), nil
	}
	return nil, verbs.Errorf("ibv_open_device", verbs.ENODEV, "no RDMA device named %q (%d devices present)", name, int(n))
}

// Context is an open device (struct ibv_context). It implements
// verbs.Context. Its methods are safe for concurrent use.
type Context struct {
	c     *C.struct_ibv_context
	info  verbs.DeviceInfo
	owned bool              // opened here: Close calls ibv_close_device
	ops   *C.struct_ibp_ops // data-path functions (C memory; zero: the ops table)

	mu  sync.Mutex
	pds map[unsafe.Pointer]*PD
	cqs map[unsafe.Pointer]*CQ
	qps map[unsafe.Pointer]*QP
	srq map[unsafe.Pointer]*SRQ
}

var _ verbs.Context = (*Context)(nil)

// contexts maps struct ibv_context pointers to their wrapper, so an object
// wrapped twice is the same Go value (async events and CQ events compare
// QPs and CQs by identity).
var (
	ctxMu    sync.Mutex
	contexts = map[unsafe.Pointer]*Context{}
)

func newContext(c *C.struct_ibv_context, owned bool) *Context {
	ctxMu.Lock()
	defer ctxMu.Unlock()
	return newContextLocked(c, owned)
}

func newContextLocked(c *C.struct_ibv_context, owned bool) *Context {
	ctx := &Context{c: c, owned: owned, info: deviceInfo(c.device), ops: newOps(),
		pds: map[unsafe.Pointer]*PD{}, cqs: map[unsafe.Pointer]*CQ{}, qps: map[unsafe.Pointer]*QP{},
		srq: map[unsafe.Pointer]*SRQ{}}
	contexts[unsafe.Pointer(c)] = ctx
	return ctx
}

// WrapContext wraps a struct ibv_context* opened by someone else (the
// application, seen by the shim). The async fd is left as it is (it is
// not switched to O_NONBLOCK): GetAsyncEvent checks readiness with a
// zero-timeout poll before reading. Close on a wrapped context forgets the
// wrapper and does not close the device. Wrapping the same pointer twice
// returns the same *Context.
func WrapContext(p unsafe.Pointer) *Context {
	ctxMu.Lock()
	defer ctxMu.Unlock()
	if ctx, ok := contexts[p]; ok {
		return ctx
	}
	return newContextLocked((*C.struct_ibv_context)(p), false)
}

// CPtr is the struct ibv_context*.
func (x *Context) CPtr() unsafe.Pointer { return unsafe.Pointer(x.c) }

// Device implements verbs.Context.
func (x *Context) Device() verbs.DeviceInfo { return x.info }

// QueryDevice implements ibv_query_device. MaxInlineData is 0: libibverbs
// reports the inline limit only per QP (QPCap after CreateQP).
func (x *Context) QueryDevice() (verbs.DeviceAttr, error) {
	var a C.struct_ibv_device_attr
	r, err := C.ibv_query_device(x.c, &a)
	if r != 0 {
		return verbs.DeviceAttr{}, retErr("ibv_query_device", r, err, "device %s", x.info.Name)
	}
	return verbs.DeviceAttr{
		FWVer:           C.GoString(&a.fw_ver[0]),
		NodeGUID:        be64(uint64(a.node_guid)),
		SysImageGUID:    be64(uint64(a.sys_image_guid)),
		MaxMRSize:       uint64(a.max_mr_size),
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		HWVer:           uint32(a.hw_ver),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		DeviceCapFlags:  verbs.DeviceCapFlags(a.device_cap_flags),
		MaxSGE:          int(a.max_sge),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxPD:           int(a.max_pd),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		AtomicCap:       verbs.AtomicCap(a.atomic_cap),
		MaxPKeys:        int(a.max_pkeys),
		PhysPortCnt:     uint8(a.phys_port_cnt),
	}, nil
}

// be64 converts a __be64 value read as a native integer to host order.
func be64(v uint64) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	return binary.BigEndian.Uint64(b[:])
}

// QueryPort implements ibv_query_port.
func (x *Context) QueryPort(port uint8) (verbs.PortAttr, error) {
	var a C.struct_ibv_port_attr
	r, err := C.ibp_query_port(x.c, C.uint8_t(port), &a)
	if r != 0 {
		return verbs.PortAttr{}, retErr("ibv_query_port", r, err, "%s port %d", x.info.Name, port)
	}
	return portAttr(&a), nil
}

func portAttr(a *C.struct_ibv_port_attr) verbs.PortAttr {
	return verbs.PortAttr{
		State:        verbs.PortState(a.state),
		MaxMTU:       verbs.MTU(a.max_mtu),
		ActiveMTU:    verbs.MTU(a.active_mtu),
		GIDTblLen:    int(a.gid_tbl_len),
		PortCapFlags: uint32(a.port_cap_flags),
		MaxMsgSz:     uint32(a.max_msg_sz),
		PKeyTblLen:   uint16(a.pkey_tbl_len),
		LID:          uint16(a.lid),
		SMLID:        uint16(a.sm_lid),
		LMC:          uint8(a.lmc),
		MaxVLNum:     uint8(a.max_vl_num),
		SMSL:         uint8(a.sm_sl),
		ActiveWidth:  uint8(a.active_width),
		ActiveSpeed:  uint8(a.active_speed),
		PhysState:    verbs.PhysState(a.phys_state),
		LinkLayer:    verbs.LinkLayer(a.link_layer),
	}
}

// QueryGID implements ibv_query_gid.
func (x *Context) QueryGID(port uint8, index int) (verbs.GID, error) {
	var g C.union_ibv_gid
	r, err := C.ibv_query_gid(x.c, C.uint8_t(port), C.int(index), &g)
	if r != 0 {
		return verbs.GID{}, retErr("ibv_query_gid", r, err, "%s port %d index %d", x.info.Name, port, index)
	}
	return verbs.GID(g), nil
}

// GIDType mirrors enum ibv_gid_type.
type GIDType uint32

// GID types.
const (
	GIDTypeIB     GIDType = 0 // IBV_GID_TYPE_IB
	GIDTypeRoCEv1 GIDType = 1 // IBV_GID_TYPE_ROCE_V1
	GIDTypeRoCEv2 GIDType = 2 // IBV_GID_TYPE_ROCE_V2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return "GIDType(?)"
}

// GIDEntry mirrors struct ibv_gid_entry.
type GIDEntry struct {
	GID         verbs.GID
	Index       int
	Port        uint8
	Type        GIDType
	NDevIfIndex int // 0 on InfiniBand
}

// QueryGIDEntry implements ibv_query_gid_ex: the GID with its type (RoCE
// v1 or v2) and the netdev it belongs to.
func (x *Context) QueryGIDEntry(port uint8, index int) (GIDEntry, error) {
	var e C.struct_ibv_gid_entry
	r, err := C.ibp_query_gid_ex(x.c, C.uint32_t(port), C.uint32_t(index), &e)
	if r != 0 {
		return GIDEntry{}, retErr("ibv_query_gid_ex", r, err, "%s port %d index %d", x.info.Name, port, index)
	}
	return GIDEntry{GID: verbs.GID(e.gid), Index: int(e.gid_index), Port: uint8(e.port_num),
		Type: GIDType(e.gid_type), NDevIfIndex: int(e.ndev_ifindex)}, nil
}

// Close implements ibv_close_device for a context opened here; on a
// wrapped context it only forgets the wrapper. Every PD, CQ, QP and
// channel must have been destroyed first.
func (x *Context) Close() error {
	ctxMu.Lock()
	delete(contexts, unsafe.Pointer(x.c))
	ctxMu.Unlock()
	if !x.owned {
		return nil
	}
	r, err := C.ibv_close_device(x.c)
	if r != 0 {
		return retErr("ibv_close_device", r, err, "device %s", x.info.Name)
	}
	return nil
}
