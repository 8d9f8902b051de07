package verbs

import "time"

// Provider enumerates and opens RDMA devices (ibv_get_device_list and
// ibv_open_device). A simulated host and the real libibverbs are both
// providers.
type Provider interface {
	Devices() ([]DeviceInfo, error)
	Open(name string) (Context, error)
}

// Context is an open device (struct ibv_context).
type Context interface {
	Device() DeviceInfo
	QueryDevice() (DeviceAttr, error)
	QueryPort(port uint8) (PortAttr, error)
	QueryGID(port uint8, index int) (GID, error)
	AllocPD() (PD, error)
	CreateCompChannel() (CompChannel, error)
	CreateCQ(cqe int, ch CompChannel, compVector int) (CQ, error)
	// GetAsyncEvent returns the next async event of this context. It
	// behaves like ibv_get_async_event on an async fd set to O_NONBLOCK:
	// with nothing pending it fails with EAGAIN. Every event returned must
	// be acknowledged with AckAsyncEvent before the QP or CQ it names can be
	// destroyed.
	GetAsyncEvent() (AsyncEvent, error)
	AckAsyncEvent(ev AsyncEvent)
	Close() error
}

// PD is a protection domain (struct ibv_pd).
type PD interface {
	Context() Context
	// RegMR registers buf (ibv_reg_mr). The memory must stay valid and
	// unmoved until Dereg; MR.Addr is the address to use in SGEs and as a
	// remote address.
	RegMR(buf []byte, access AccessFlags) (MR, error)
	CreateQP(init QPInitAttr) (QP, error)
	Dealloc() error
}

// MemAllocator is implemented by a PD whose RegMR accepts only memory
// it allocated (verbs/ibv: memory outside the Go heap, which cannot move
// or be freed under the HCA). Code that registers buffers of its own,
// not the application's, allocates them here when the PD offers it.
type MemAllocator interface {
	// AllocMem returns n zeroed bytes that RegMR of any PD of the same
	// process (host) accepts.
	AllocMem(n int) ([]byte, error)
	// FreeMem releases memory from AllocMem, once every MR over it is
	// deregistered.
	FreeMem(b []byte) error
}

// DeviceMem is implemented by a region whose device accesses it
// concurrently with the program in a way the program's memory model must
// see (the simulator, whose device runs under its own lock). Code that
// reads or writes a region the peer's device writes at any time, with no
// completion to order the two (a mailbox), goes through it when the
// region offers it; on a real device plain loads and stores are the
// device's view (with a checksum to catch a torn record).
type DeviceMem interface {
	// LoadMem copies len(dst) bytes of the region from offset off.
	LoadMem(dst []byte, off int)
	// StoreMem copies src into the region at offset off.
	StoreMem(off int, src []byte)
}

// DmabufRegistrar is implemented by a PD that registers dma-buf memory
// (ibv_reg_dmabuf_mr): device memory, a GPU's, exported as a dma-buf
// file descriptor, which the CPU may be unable to read. The MR's Addr is
// iova, the address SGEs and remote peers use.
type DmabufRegistrar interface {
	RegDmabufMR(offset uint64, length int, iova uint64, fd int, access AccessFlags) (MR, error)
}

// ImplicitODPRegistrar is implemented by a PD that registers the whole
// address space on demand: ibv_reg_mr(pd, NULL, SIZE_MAX, access) with
// IBV_ACCESS_ON_DEMAND, an implicit on-demand-paging region. Its MR has
// Addr 0 and Len ImplicitLen; an SGE or a remote address anywhere in the
// process's mapped memory is valid through its keys, the HCA faulting the
// pages in as it reaches them. A device without implicit ODP
// (IBV_ODP_SUPPORT_IMPLICIT: mlx5 with the capability has it, rdma_rxe
// not) refuses with EINVAL (rdma_rxe of a 6.1 kernel, which has no ODP
// at all, too); kernels whose core check refuses ODP on a device without
// it may answer EOPNOTSUPP.
type ImplicitODPRegistrar interface {
	RegImplicitODP(access AccessFlags) (MR, error)
}

// ImplicitLen is the Len of an implicit on-demand-paging MR (the C
// length is SIZE_MAX, which an int cannot hold).
const ImplicitLen = int(^uint(0) >> 1)

// IsImplicitODP reports whether mr is an implicit on-demand-paging
// region (ImplicitODPRegistrar).
func IsImplicitODP(mr MR) bool {
	return mr.Addr() == 0 && mr.Len() == ImplicitLen && mr.Access()&AccessOnDemand != 0
}

// SRQCreator is implemented by a PD whose device has shared receive
// queues (ibv_create_srq).
type SRQCreator interface {
	CreateSRQ(attr SRQAttr) (SRQ, error)
}

// SRQ is a shared receive queue (struct ibv_srq): receive WRs that the
// QPs created on it (QPInitAttr.SRQ) consume, in the order posted,
// whichever QP a message arrives on.
type SRQ interface {
	PD() PD
	// PostRecv posts wrs in order (ibv_post_srq_recv) and returns how
	// many were accepted; on error, wrs[n] is the bad WR.
	PostRecv(wrs []RecvWR) (int, error)
	// Modify sets the fields mask names (ibv_modify_srq): SRQAttrLimit
	// arms the limit event, SRQAttrMaxWR resizes.
	Modify(attr SRQAttr, mask SRQAttrMask) error
	Query() (SRQAttr, error)
	Destroy() error
}

// MR is a registered memory region (struct ibv_mr).
type MR interface {
	PD() PD
	Addr() uint64
	Len() int
	LKey() uint32
	RKey() uint32
	Access() AccessFlags
	Dereg() error
}

// CompChannel is a completion event channel (struct ibv_comp_channel).
type CompChannel interface {
	// GetCQEvent returns the CQ whose notification fired, or EAGAIN when
	// none is pending (a non-blocking channel fd).
	GetCQEvent() (CQ, error)
	AckCQEvents(cq CQ, n int)
	Destroy() error
}

// CQ is a completion queue (struct ibv_cq).
type CQ interface {
	Context() Context
	// CQE is the actual capacity, which may exceed what was asked for.
	CQE() int
	// Poll fills wc with up to len(wc) completions and returns how many.
	Poll(wc []WC) (int, error)
	ReqNotify(solicitedOnly bool) error
	Destroy() error
}

// QP is a queue pair (struct ibv_qp). Only RC is required of providers.
type QP interface {
	PD() PD
	QPN() uint32
	// State is the last state set by Modify or entered by the device, as
	// the state field of struct ibv_qp.
	State() QPState
	Modify(attr *QPAttr, mask QPAttrMask) error
	Query(mask QPAttrMask) (QPAttr, QPInitAttr, error)
	// PostSend posts wrs in order and returns how many were accepted; on
	// error, wrs[n] is the bad WR (bad_wr in ibv_post_send).
	PostSend(wrs []SendWR) (int, error)
	PostRecv(wrs []RecvWR) (int, error)
	Destroy() error
}

// Clock gives monotonic time. The simulated fabric provides virtual time;
// layers that must be replayable take time only from a Clock.
type Clock interface {
	Now() time.Duration
}

// PortCounterReader is implemented by contexts that read a port's
// counters, keyed by the names the kernel gives them under sysfs
// (counters/ and hw_counters/; pathsel.ReadPortCounters, which reads
// them on hardware, classes them).
type PortCounterReader interface {
	PortCounters(port uint8) (map[string]uint64, error)
}

// AsyncNotifier is implemented by contexts that can say when an async event
// may be pending, so an event pump can wait instead of spinning. A value
// arrives on the channel (coalesced: one may stand for several events)
// after events are queued; the pump then reads with GetAsyncEvent until
// EAGAIN. The channel is never closed.
type AsyncNotifier interface {
	AsyncReady() <-chan struct{}
}
