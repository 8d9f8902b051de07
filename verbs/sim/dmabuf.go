package sim

import "github.com/ibpath/ibpath/verbs"

// ExportDmabuf stands for a device driver exporting memory as a dma-buf
// (a GPU's memory, through its driver): it returns a file descriptor that
// names buf on this host, which ibv_reg_dmabuf_mr (PD.RegDmabufMR) of any
// of the host's HCAs registers. The simulator keeps device memory in host
// memory; the descriptor stays valid for the fabric's life.
func (h *Host) ExportDmabuf(buf []byte) int {
	f := h.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.dmabufs == nil {
		h.dmabufs = map[int][]byte{}
	}
	fd := firstDmabufFD + len(h.dmabufs)
	h.dmabufs[fd] = buf
	return fd
}

// firstDmabufFD is the first descriptor ExportDmabuf hands out (clear of
// stdin, stdout and stderr, like a process's next free descriptor).
const firstDmabufFD = 100

var _ verbs.DmabufRegistrar = (*PD)(nil)

// RegDmabufMR implements ibv_reg_dmabuf_mr: length bytes at offset of the
// dma-buf fd (ExportDmabuf). A descriptor the host did not export is
// EBADF, a range past the buffer EINVAL (ib_umem_dmabuf_get). The MR is
// at the address the memory has on the host: iova must be that address
// (a real HCA maps the dma-buf at any iova; the simulator does not remap).
func (pd *PD) RegDmabufMR(offset uint64, length int, iova uint64, fd int, access verbs.AccessFlags) (verbs.MR, error) {
	f := pd.ctx.fab()
	f.mu.Lock()
	b, ok := pd.ctx.hca.host.dmabufs[fd]
	f.mu.Unlock()
	switch {
	case !ok:
		return nil, verbs.Errorf("ibv_reg_dmabuf_mr", verbs.EBADF, "fd %d is no dma-buf of this host", fd)
	case length <= 0 || offset+uint64(length) > uint64(len(b)):
		return nil, verbs.Errorf("ibv_reg_dmabuf_mr", verbs.EINVAL, "offset %d length %d past the dma-buf's %d bytes", offset, length, len(b))
	}
	mr, err := pd.RegMR(b[offset:offset+uint64(length)], access)
	if err != nil {
		return nil, err
	}
	if mr.Addr() != iova {
		if derr := mr.Dereg(); derr != nil {
			return nil, derr
		}
		return nil, verbs.Errorf("ibv_reg_dmabuf_mr", verbs.EINVAL, "iova %#x: the memory is at %#x (the simulator does not remap)", iova, mr.Addr())
	}
	return mr, nil
}
