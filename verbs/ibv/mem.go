//go:build linux && cgo

package ibv

/*
#include "helpers.h"
*/
import "C"

import (
	"sort"
	"sync"
	"syscall"
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// The HCA reads and writes registered memory after RegMR returns, without
// the Go runtime knowing: memory on the Go heap may be moved or freed under
// it. Registered buffers therefore come from Alloc (anonymous mmap, outside
// the Go heap), or are C memory registered with RegMRAddr.

type region struct {
	addr uintptr
	n    int
	b    []byte // the whole mapping, for Munmap
}

var (
	allocMu sync.Mutex
	regions []region // sorted by addr
)

// Alloc returns n bytes of zeroed, page-aligned memory outside the Go
// heap (an anonymous private mmap), suitable for RegMR. Release it with
// Free after every MR over it is deregistered.
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, verbs.Errorf("mmap", verbs.EINVAL, "ibv.Alloc of %d bytes", n)
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		en, _ := err.(syscall.Errno)
		return nil, verbs.Errorf("mmap", en, "ibv.Alloc of %d bytes", n)
	}
	r := region{addr: uintptr(unsafe.Pointer(&b[0])), n: n, b: b}
	allocMu.Lock()
	i := sort.Search(len(regions), func(i int) bool { return regions[i].addr > r.addr })
	regions = append(regions, region{})
	copy(regions[i+1:], regions[i:])
	regions[i] = r
	allocMu.Unlock()
	return b[:n:n], nil
}

// Free releases memory from Alloc. b must start where the Alloc'd slice
// started (its length does not matter). Using b afterwards faults.
func Free(b []byte) error {
	if cap(b) == 0 {
		return verbs.Errorf("munmap", verbs.EINVAL, "ibv.Free of an empty slice")
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	allocMu.Lock()
	defer allocMu.Unlock()
	for i, r := range regions {
		if r.addr == addr {
			if err := syscall.Munmap(r.b); err != nil {
				en, _ := err.(syscall.Errno)
				return verbs.Errorf("munmap", en, "ibv.Free")
			}
			regions = append(regions[:i], regions[i+1:]...)
			return nil
		}
	}
	return verbs.Errorf("munmap", verbs.EINVAL, "ibv.Free of %#x: not the start of memory from ibv.Alloc", addr)
}

// fromAlloc reports whether [addr, addr+n) lies inside one Alloc region.
func fromAlloc(addr uintptr, n int) bool {
	allocMu.Lock()
	defer allocMu.Unlock()
	i := sort.Search(len(regions), func(i int) bool { return regions[i].addr > addr }) - 1
	return i >= 0 && addr+uintptr(n) <= regions[i].addr+uintptr(regions[i].n)
}

// PD is a protection domain (struct ibv_pd). It implements verbs.PD.
type PD struct {
	c     *C.struct_ibv_pd
	ctx   *Context
	owned bool
}

var _ verbs.PD = (*PD)(nil)

// AllocPD implements ibv_alloc_pd.
func (x *Context) AllocPD() (verbs.PD, error) {
	p, err := C.ibv_alloc_pd(x.c)
	if p == nil {
		return nil, nullErr("ibv_alloc_pd", err, "device %s", x.info.Name)
	}
	pd := &PD{c: p, ctx: x, owned: true}
	x.mu.Lock()
	x.pds[unsafe.Pointer(p)] = pd
	x.mu.Unlock()
	return pd, nil
}

// WrapPD wraps a struct ibv_pd* allocated by someone else on ctx. Wrapping
// the same pointer twice returns the same *PD.
func WrapPD(ctx *Context, p unsafe.Pointer) *PD {
	ctx.mu.Lock()
	defer ctx.mu.Unlock()
	return ctx.wrapPDLocked(p)
}

func (x *Context) wrapPDLocked(p unsafe.Pointer) *PD {
	if pd, ok := x.pds[p]; ok {
		return pd
	}
	pd := &PD{c: (*C.struct_ibv_pd)(p), ctx: x}
	x.pds[p] = pd
	return pd
}

// CPtr is the struct ibv_pd*.
func (pd *PD) CPtr() unsafe.Pointer { return unsafe.Pointer(pd.c) }

var _ verbs.MemAllocator = (*PD)(nil)

// AllocMem implements verbs.MemAllocator: memory from Alloc, which RegMR
// accepts on any PD.
func (pd *PD) AllocMem(n int) ([]byte, error) { return Alloc(n) }

// FreeMem implements verbs.MemAllocator (Free).
func (pd *PD) FreeMem(b []byte) error { return Free(b) }

// Context implements verbs.PD.
func (pd *PD) Context() verbs.Context { return pd.ctx }

// Release forgets a wrapped PD without deallocating it.
func (pd *PD) Release() {
	pd.ctx.mu.Lock()
	delete(pd.ctx.pds, unsafe.Pointer(pd.c))
	pd.ctx.mu.Unlock()
}

// Dealloc implements ibv_dealloc_pd.
func (pd *PD) Dealloc() error {
	r, err := C.ibv_dealloc_pd(pd.c)
	if r != 0 {
		return retErr("ibv_dealloc_pd", r, err, "device %s", pd.ctx.info.Name)
	}
	pd.Release()
	return nil
}

// MR is a registered memory region (struct ibv_mr). It implements
// verbs.MR.
type MR struct {
	c          *C.struct_ibv_mr
	pd         *PD
	access     verbs.AccessFlags
	addr       uint64
	length     int
	lkey, rkey uint32
}

var _ verbs.MR = (*MR)(nil)

// RegMR implements ibv_reg_mr for memory from Alloc (or a part of it).
// Any other buffer is refused with EINVAL: the package cannot prove it is
// not on the Go heap, where the garbage collector may move or free it
// while the HCA still uses it. C memory is registered with RegMRAddr.
func (pd *PD) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "empty buffer")
	}
	addr := uintptr(unsafe.Pointer(&buf[0]))
	if !fromAlloc(addr, len(buf)) {
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL,
			"buffer %#x+%d is not from ibv.Alloc: Go-heap memory can move or be freed while the HCA uses it; allocate it with ibv.Alloc", addr, len(buf))
	}
	return pd.RegMRAddr(addr, len(buf), access)
}

// RegMRAddr implements ibv_reg_mr for memory the caller vouches for: C
// memory (malloc, mmap, the application's own buffers) that stays valid
// until Dereg. It must never be Go-heap memory.
func (pd *PD) RegMRAddr(addr uintptr, length int, access verbs.AccessFlags) (*MR, error) {
	m, err := C.ibp_reg_mr(pd.c, C.uintptr_t(addr), C.size_t(length), C.int(access))
	if m == nil {
		return nil, nullErr("ibv_reg_mr", err, "%#x+%d access %#x", addr, length, uint32(access))
	}
	return &MR{c: m, pd: pd, access: access, addr: uint64(uintptr(m.addr)), length: int(m.length),
		lkey: uint32(m.lkey), rkey: uint32(m.rkey)}, nil
}

// RegDmabufMR implements ibv_reg_dmabuf_mr (verbs.DmabufRegistrar):
// length bytes at offset of the dma-buf fd, at iova.
func (pd *PD) RegDmabufMR(offset uint64, length int, iova uint64, fd int, access verbs.AccessFlags) (verbs.MR, error) {
	if length <= 0 || fd < 0 {
		return nil, verbs.Errorf("ibv_reg_dmabuf_mr", verbs.EINVAL, "length %d, fd %d", length, fd)
	}
	m, err := C.ibp_reg_dmabuf_mr(pd.c, C.uint64_t(offset), C.size_t(length), C.uint64_t(iova), C.int(fd), C.int(access))
	if m == nil {
		return nil, nullErr("ibv_reg_dmabuf_mr", err, "fd %d offset %#x+%d iova %#x access %#x", fd, offset, length, iova, uint32(access))
	}
	return &MR{c: m, pd: pd, access: access, addr: uint64(uintptr(m.addr)), length: int(m.length),
		lkey: uint32(m.lkey), rkey: uint32(m.rkey)}, nil
}

var _ verbs.DmabufRegistrar = (*PD)(nil)

// RegImplicitODP implements an implicit on-demand-paging registration
// (verbs.ImplicitODPRegistrar): ibv_reg_mr(pd, NULL, SIZE_MAX, access)
// with IBV_ACCESS_ON_DEMAND. The device refuses it without
// IBV_ODP_SUPPORT_IMPLICIT.
func (pd *PD) RegImplicitODP(access verbs.AccessFlags) (verbs.MR, error) {
	access |= verbs.AccessOnDemand
	m, err := C.ibp_reg_mr(pd.c, 0, C.SIZE_MAX, C.int(access))
	if m == nil {
		return nil, nullErr("ibv_reg_mr", err, "implicit on-demand paging (NULL, SIZE_MAX) access %#x", uint32(access))
	}
	return &MR{c: m, pd: pd, access: access, addr: uint64(uintptr(m.addr)), length: verbs.ImplicitLen,
		lkey: uint32(m.lkey), rkey: uint32(m.rkey)}, nil
}

var _ verbs.ImplicitODPRegistrar = (*PD)(nil)

// CPtr is the struct ibv_mr*.
func (m *MR) CPtr() unsafe.Pointer { return unsafe.Pointer(m.c) }

// PD implements verbs.MR.
func (m *MR) PD() verbs.PD { return m.pd }

// Addr implements verbs.MR.
func (m *MR) Addr() uint64 { return m.addr }

// Len implements verbs.MR.
func (m *MR) Len() int { return m.length }

// LKey implements verbs.MR.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey implements verbs.MR.
func (m *MR) RKey() uint32 { return m.rkey }

// Access implements verbs.MR.
func (m *MR) Access() verbs.AccessFlags { return m.access }

// Dereg implements ibv_dereg_mr.
func (m *MR) Dereg() error {
	r, err := C.ibv_dereg_mr(m.c)
	if r != 0 {
		return retErr("ibv_dereg_mr", r, err, "lkey %#x", m.lkey)
	}
	return nil
}
