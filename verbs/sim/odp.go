package sim

import (
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

var _ verbs.ImplicitODPRegistrar = (*PD)(nil)

// RegImplicitODP implements an implicit on-demand-paging registration,
// ibv_reg_mr(pd, NULL, SIZE_MAX, access|IBV_ACCESS_ON_DEMAND): one MR over
// the host's whole address space. An SGE or remote address through its
// keys is valid wherever the host has memory (memory it gave an address:
// Host.Addr, or any registration). The access rules of RegMR hold; access
// must include IBV_ACCESS_ON_DEMAND (mlx5 `create_user_odp_mr` is reached
// only with it). A device without implicit ODP (HCASpec.NoImplicitODP)
// refuses with EINVAL, as mlx5 without IB_ODP_SUPPORT_IMPLICIT and
// rdma_rxe do (the lab's 6.1 rxe: seen by its ibvtest-local row).
func (pd *PD) RegImplicitODP(access verbs.AccessFlags) (verbs.MR, error) {
	f := pd.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := pd.ctx.usable("ibv_reg_mr"); err != nil {
		return nil, err
	}
	a := pd.ctx.hca
	switch {
	case pd.freed:
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "PD deallocated")
	case access&verbs.AccessOnDemand == 0:
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "NULL, SIZE_MAX without IBV_ACCESS_ON_DEMAND")
	case access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0:
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE")
	case access&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessOnDemand) != 0:
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EOPNOTSUPP, "access flags %#x not modelled", uint32(access))
	case !a.implicit:
		return nil, verbs.Errorf("ibv_reg_mr", verbs.EINVAL, "%s has no implicit on-demand paging (IBV_ODP_SUPPORT_IMPLICIT)", a.name)
	}
	key := a.nextKey<<8 | uint32(a.index+1)&0xff
	a.nextKey++
	mr := &MR{pd: pd, key: key, access: access, valid: true, implicit: true}
	a.mrs[key] = mr
	pd.nMR++
	return mr, nil
}

// Addr is the address buf has in the host's simulated address space,
// what a pointer to it is in a real process: the address to use with an
// implicit on-demand-paging MR. buf is mapped (given a fresh range) the
// first time the host sees it; one that partly overlaps known memory is
// EINVAL.
func (h *Host) Addr(buf []byte) (uint64, error) {
	f := h.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(buf) == 0 {
		return 0, verbs.Errorf("mmap", verbs.EINVAL, "empty buffer")
	}
	addr, ok := h.addrOf(buf)
	if !ok {
		return 0, verbs.Errorf("mmap", verbs.EINVAL, "buffer %#x+%d partly overlaps known memory (not modelled)",
			uintptr(unsafe.Pointer(unsafe.SliceData(buf))), len(buf))
	}
	return addr, nil
}
