package sim

import (
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

// memRegion maps a Go buffer to the simulated virtual address the host
// gave it. Registering the same memory on two HCAs (as shadow resources on
// a backup HCA do) yields the same address, as it would in one process.
type memRegion struct {
	base uintptr
	buf  []byte
	addr uint64
}

// addrOf returns the simulated address of buf, assigning a fresh range
// the first time memory is seen. ok is false when buf partly overlaps a
// known range without being inside it.
func (h *Host) addrOf(buf []byte) (uint64, bool) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	end := p + uintptr(len(buf))
	for _, r := range h.regions {
		rend := r.base + uintptr(len(r.buf))
		if p >= r.base && end <= rend {
			return r.addr + uint64(p-r.base), true
		}
		if p < rend && end > r.base {
			return 0, false
		}
	}
	f := h.fab
	addr := f.addrNext
	f.addrNext += (uint64(len(buf)) + 4095) &^ 4095
	f.addrNext += 4096 // a guard page between regions
	h.regions = append(h.regions, memRegion{base: p, buf: buf, addr: addr})
	return addr, true
}

// memAt returns the host memory at [addr, addr+n), or nil if that range is
// not known memory. It serves inline sends, which name memory by address.
func (h *Host) memAt(addr uint64, n uint32) []byte {
	for _, r := range h.regions {
		if addr >= r.addr && addr+uint64(n) <= r.addr+uint64(len(r.buf)) {
			off := addr - r.addr
			return r.buf[off : off+uint64(n)]
		}
	}
	return nil
}

// PD is a simulated protection domain. It implements verbs.PD.
type PD struct {
	ctx   *Context
	nMR   int
	nQP   int
	nSRQ  int
	freed bool
}

var _ verbs.PD = (*PD)(nil)

// AllocPD implements ibv_alloc_pd.
func (c *Context) AllocPD() (verbs.PD, error) {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.usable("ibv_alloc_pd"); err != nil {
		return nil, err
	}
	return &PD{ctx: c}, nil
}

// Context returns the device context of the PD.
func (pd *PD) Context() verbs.Context { return pd.ctx }

// Dealloc implements ibv_dealloc_pd: EBUSY while MRs or QPs use it.
func (pd *PD) Dealloc() error {
	f := pd.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if pd.freed {
		return verbs.Errorf("ibv_dealloc_pd", verbs.EINVAL, "already deallocated")
	}
	if pd.nMR > 0 || pd.nQP > 0 || pd.nSRQ > 0 {
		return verbs.Errorf("ibv_dealloc_pd", verbs.EBUSY, "%d MRs, %d QPs and %d SRQs still use the PD", pd.nMR, pd.nQP, pd.nSRQ)
	}
	pd.freed = true
	return nil
}

// MR is a simulated memory region. It implements verbs.MR.
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64
	key    uint32
	access verbs.AccessFlags
	valid  bool
	// implicit: an implicit on-demand-paging region (RegImplicitODP), at
	// address 0, over all of the host's memory
	implicit bool
}

var _ verbs.MR = (*MR)(nil)

var _ verbs.DeviceMem = (*MR)(nil)

// LoadMem implements verbs.DeviceMem: the bytes as the fabric, under
// its lock, last left them.
func (m *MR) LoadMem(dst []byte, off int) {
	f := m.pd.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	copy(dst, m.buf[off:])
}

// StoreMem implements verbs.DeviceMem.
func (m *MR) StoreMem(off int, src []byte) {
	f := m.pd.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	copy(m.buf[off:], src)
}

// RegMR implements ibv_reg_mr.
func (pd *PD) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MR, error) {
	f := pd.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := pd.ctx.usable("ibv_reg_mr"); err != nil {
		return nil, err
	}
	if pd.freed {
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "PD deallocated")
	}
	if len(buf) == 0 {
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "zero-length buffer")
	}
	// Remote write and remote atomic require local write (ib_check_mr_access).
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0 {
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE")
	}
	if access&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessMWBind) != 0 {
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EOPNOTSUPP, "access flags %#x not modelled", uint32(access))
	}
	h := pd.ctx.hca.host
	if f.cfg.StrictMem && !h.allocated(buf) {
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "buffer %#x+%d is not from AllocMem (Config.StrictMem)",
			uintptr(unsafe.Pointer(unsafe.SliceData(buf))), len(buf))
	}
	addr, ok := h.addrOf(buf)
	if !ok {
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "buffer partly overlaps registered memory (not modelled)")
	}
	a := pd.ctx.hca
	// mlx5-style keys: an index in the high 24 bits and a variant byte.
	key := a.nextKey<<8 | uint32(a.index+1)&0xff
	a.nextKey++
	mr := &MR{pd: pd, buf: buf, addr: addr, key: key, access: access, valid: true}
	a.mrs[key] = mr
	pd.nMR++
	return mr, nil
}

// PD returns the protection domain.
func (m *MR) PD() verbs.PD { return m.pd }

// Addr is the simulated virtual address of the first byte.
func (m *MR) Addr() uint64 { return m.addr }

// Len is the length in bytes (verbs.ImplicitLen for an implicit
// on-demand-paging region).
func (m *MR) Len() int {
	if m.implicit {
		return verbs.ImplicitLen
	}
	return len(m.buf)
}

// LKey is the local key.
func (m *MR) LKey() uint32 { return m.key }

// RKey is the remote key (equal to the local key, as on mlx5).
func (m *MR) RKey() uint32 { return m.key }

// Access returns the access flags.
func (m *MR) Access() verbs.AccessFlags { return m.access }

// Buf returns the registered memory (nil for an implicit on-demand-paging
// region).
func (m *MR) Buf() []byte { return m.buf }

// Dereg implements ibv_dereg_mr.
func (m *MR) Dereg() error {
	f := m.pd.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !m.valid {
		return verbs.Errorf("ibv_dereg_mr", verbs.EINVAL, "already deregistered")
	}
	m.valid = false
	delete(m.pd.ctx.hca.mrs, m.key)
	m.pd.nMR--
	return nil
}

// span resolves [addr, addr+n) through key on HCA a for a QP in pd,
// checking the PD and access flags: the memory checks of an HCA.
func (a *HCA) span(pd *PD, key uint32, addr uint64, n uint32, need verbs.AccessFlags) ([]byte, bool) {
	mr := a.mrs[key]
	if mr == nil || !mr.valid || mr.pd != pd || mr.access&need != need {
		return nil, false
	}
	if mr.implicit {
		// the page fault finds memory, or fails the access as a key miss
		b := a.host.memAt(addr, n)
		return b, b != nil
	}
	if addr < mr.addr || addr+uint64(n) > mr.addr+uint64(len(mr.buf)) || addr+uint64(n) < addr {
		return nil, false
	}
	off := addr - mr.addr
	return mr.buf[off : off+uint64(n)], true
}

var _ verbs.MemAllocator = (*PD)(nil)

// AllocMem implements verbs.MemAllocator: n zeroed bytes that RegMR of
// any PD of the host accepts, Config.StrictMem or not.
func (pd *PD) AllocMem(n int) ([]byte, error) {
	if n <= 0 {
		return nil, verbs.Errorf("mmap", verbs.EINVAL, "AllocMem of %d bytes", n)
	}
	b := make([]byte, n)
	f := pd.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	h := pd.ctx.hca.host
	h.allocs = append(h.allocs, b)
	return b, nil
}

// FreeMem implements verbs.MemAllocator. b must start where the memory
// AllocMem returned started.
func (pd *PD) FreeMem(b []byte) error {
	f := pd.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	h := pd.ctx.hca.host
	for i, a := range h.allocs {
		if len(b) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b) {
			h.allocs = append(h.allocs[:i], h.allocs[i+1:]...)
			return nil
		}
	}
	return verbs.Errorf("munmap", verbs.EINVAL, "FreeMem of memory not from AllocMem")
}

// allocated reports whether buf lies inside memory from AllocMem.
func (h *Host) allocated(buf []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	for _, a := range h.allocs {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
		if p >= base && p+uintptr(len(buf)) <= base+uintptr(len(a)) {
			return true
		}
	}
	return false
}
