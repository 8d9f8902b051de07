// Package ibv implements the verbs interfaces over rdma-core's libibverbs
// through cgo: device enumeration and opening, protection domains, memory
// regions, completion queues and channels, RC queue pairs, work requests,
// completions, QP attributes and async events.
//
// It owns the mapping between the Go model in package verbs and the C
// structures of <infiniband/verbs.h>, the C memory used to post work
// requests and poll completions, the memory rule for registered buffers
// (Alloc and Free: memory outside the Go heap), and the wrappers that let
// the LD_PRELOAD shim drive C objects the application created itself
// (WrapContext, WrapPD, WrapCQ, WrapQP and the CPtr accessors).
//
// The package needs cgo and libibverbs (libibverbs-dev to build); without
// cgo it is empty. docs/IBV.md describes thread-safety, the async-event
// design and how to run the lab tests against soft-RoCE devices.
package ibv
