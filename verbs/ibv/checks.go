//go:build linux && cgo

package ibv

// Hooks for the package tests, which cannot use cgo themselves: the C
// values of the libibverbs enums beside the verbs constants that mirror
// them, and the C-side dumpers and fillers behind the conversion tests.

/*
#include "helpers.h"
#include <stdlib.h>
*/
import "C"

import (
	"unsafe"

	"github.com/ibpath/ibpath/verbs"
)

type constPair struct {
	name string
	c, g int64
}

func constPairs() []constPair {
	return []constPair{
		{"IBV_NODE_CA", C.IBV_NODE_CA, int64(verbs.NodeCA)},
		{"IBV_NODE_SWITCH", C.IBV_NODE_SWITCH, int64(verbs.NodeSwitch)},
		{"IBV_NODE_ROUTER", C.IBV_NODE_ROUTER, int64(verbs.NodeRouter)},
		{"IBV_NODE_RNIC", C.IBV_NODE_RNIC, int64(verbs.NodeRNIC)},
		{"IBV_DEVICE_RESIZE_MAX_WR", C.IBV_DEVICE_RESIZE_MAX_WR, int64(verbs.DeviceResizeMaxWR)},
		{"IBV_DEVICE_BAD_PKEY_CNTR", C.IBV_DEVICE_BAD_PKEY_CNTR, int64(verbs.DeviceBadPKeyCntr)},
		{"IBV_DEVICE_BAD_QKEY_CNTR", C.IBV_DEVICE_BAD_QKEY_CNTR, int64(verbs.DeviceBadQKeyCntr)},
		{"IBV_DEVICE_RAW_MULTI", C.IBV_DEVICE_RAW_MULTI, int64(verbs.DeviceRawMulti)},
		{"IBV_DEVICE_AUTO_PATH_MIG", C.IBV_DEVICE_AUTO_PATH_MIG, int64(verbs.DeviceAutoPathMig)},
		{"IBV_DEVICE_CHANGE_PHY_PORT", C.IBV_DEVICE_CHANGE_PHY_PORT, int64(verbs.DeviceChangePhyPort)},
		{"IBV_DEVICE_CURR_QP_STATE_MOD", C.IBV_DEVICE_CURR_QP_STATE_MOD, int64(verbs.DeviceCurrQPStateMod)},
		{"IBV_DEVICE_PORT_ACTIVE_EVENT", C.IBV_DEVICE_PORT_ACTIVE_EVENT, int64(verbs.DevicePortActiveEvent)},
		{"IBV_DEVICE_RC_RNR_NAK_GEN", C.IBV_DEVICE_RC_RNR_NAK_GEN, int64(verbs.DeviceRCRNRNAKGen)},
		{"IBV_DEVICE_N_NOTIFY_CQ", C.IBV_DEVICE_N_NOTIFY_CQ, int64(verbs.DeviceNNotifyCQ)},
		{"IBV_ATOMIC_NONE", C.IBV_ATOMIC_NONE, int64(verbs.AtomicNone)},
		{"IBV_ATOMIC_HCA", C.IBV_ATOMIC_HCA, int64(verbs.AtomicHCA)},
		{"IBV_ATOMIC_GLOB", C.IBV_ATOMIC_GLOB, int64(verbs.AtomicGlob)},
		{"IBV_QPS_RESET", C.IBV_QPS_RESET, int64(verbs.QPSReset)},
		{"IBV_QPS_INIT", C.IBV_QPS_INIT, int64(verbs.QPSInit)},
		{"IBV_QPS_RTR", C.IBV_QPS_RTR, int64(verbs.QPSRTR)},
		{"IBV_QPS_RTS", C.IBV_QPS_RTS, int64(verbs.QPSRTS)},
		{"IBV_QPS_SQD", C.IBV_QPS_SQD, int64(verbs.QPSSQD)},
		{"IBV_QPS_SQE", C.IBV_QPS_SQE, int64(verbs.QPSSQE)},
		{"IBV_QPS_ERR", C.IBV_QPS_ERR, int64(verbs.QPSErr)},
		{"IBV_QPS_UNKNOWN", C.IBV_QPS_UNKNOWN, int64(verbs.QPSUnknown)},
		{"IBV_MIG_MIGRATED", C.IBV_MIG_MIGRATED, int64(verbs.MigMigrated)},
		{"IBV_MIG_REARM", C.IBV_MIG_REARM, int64(verbs.MigRearm)},
		{"IBV_MIG_ARMED", C.IBV_MIG_ARMED, int64(verbs.MigArmed)},
		{"IBV_QPT_RC", C.IBV_QPT_RC, int64(verbs.QPTRC)},
		{"IBV_QPT_UC", C.IBV_QPT_UC, int64(verbs.QPTUC)},
		{"IBV_QPT_UD", C.IBV_QPT_UD, int64(verbs.QPTUD)},
		{"IBV_QPT_RAW_PACKET", C.IBV_QPT_RAW_PACKET, int64(verbs.QPTRawPacket)},
		{"IBV_QPT_XRC_SEND", C.IBV_QPT_XRC_SEND, int64(verbs.QPTXRCSend)},
		{"IBV_QPT_XRC_RECV", C.IBV_QPT_XRC_RECV, int64(verbs.QPTXRCRecv)},
		{"IBV_QP_STATE", C.IBV_QP_STATE, int64(verbs.QPAttrState)},
		{"IBV_QP_CUR_STATE", C.IBV_QP_CUR_STATE, int64(verbs.QPAttrCurState)},
		{"IBV_QP_EN_SQD_ASYNC_NOTIFY", C.IBV_QP_EN_SQD_ASYNC_NOTIFY, int64(verbs.QPAttrEnSQDAsyncNotify)},
		{"IBV_QP_ACCESS_FLAGS", C.IBV_QP_ACCESS_FLAGS, int64(verbs.QPAttrAccessFlags)},
		{"IBV_QP_PKEY_INDEX", C.IBV_QP_PKEY_INDEX, int64(verbs.QPAttrPKeyIndex)},
		{"IBV_QP_PORT", C.IBV_QP_PORT, int64(verbs.QPAttrPort)},
		{"IBV_QP_QKEY", C.IBV_QP_QKEY, int64(verbs.QPAttrQKey)},
		{"IBV_QP_AV", C.IBV_QP_AV, int64(verbs.QPAttrAV)},
		{"IBV_QP_PATH_MTU", C.IBV_QP_PATH_MTU, int64(verbs.QPAttrPathMTU)},
		{"IBV_QP_TIMEOUT", C.IBV_QP_TIMEOUT, int64(verbs.QPAttrTimeout)},
		{"IBV_QP_RETRY_CNT", C.IBV_QP_RETRY_CNT, int64(verbs.QPAttrRetryCnt)},
		{"IBV_QP_RNR_RETRY", C.IBV_QP_RNR_RETRY, int64(verbs.QPAttrRNRRetry)},
		{"IBV_QP_RQ_PSN", C.IBV_QP_RQ_PSN, int64(verbs.QPAttrRQPSN)},
		{"IBV_QP_MAX_QP_RD_ATOMIC", C.IBV_QP_MAX_QP_RD_ATOMIC, int64(verbs.QPAttrMaxQPRdAtomic)},
		{"IBV_QP_ALT_PATH", C.IBV_QP_ALT_PATH, int64(verbs.QPAttrAltPath)},
		{"IBV_QP_MIN_RNR_TIMER", C.IBV_QP_MIN_RNR_TIMER, int64(verbs.QPAttrMinRNRTimer)},
		{"IBV_QP_SQ_PSN", C.IBV_QP_SQ_PSN, int64(verbs.QPAttrSQPSN)},
		{"IBV_QP_MAX_DEST_RD_ATOMIC", C.IBV_QP_MAX_DEST_RD_ATOMIC, int64(verbs.QPAttrMaxDestRdAtomic)},
		{"IBV_QP_PATH_MIG_STATE", C.IBV_QP_PATH_MIG_STATE, int64(verbs.QPAttrPathMigState)},
		{"IBV_QP_CAP", C.IBV_QP_CAP, int64(verbs.QPAttrCap)},
		{"IBV_QP_DEST_QPN", C.IBV_QP_DEST_QPN, int64(verbs.QPAttrDestQPN)},
		{"IBV_QP_RATE_LIMIT", C.IBV_QP_RATE_LIMIT, int64(verbs.QPAttrRateLimit)},
		{"IBV_ACCESS_LOCAL_WRITE", C.IBV_ACCESS_LOCAL_WRITE, int64(verbs.AccessLocalWrite)},
		{"IBV_ACCESS_REMOTE_WRITE", C.IBV_ACCESS_REMOTE_WRITE, int64(verbs.AccessRemoteWrite)},
		{"IBV_ACCESS_REMOTE_READ", C.IBV_ACCESS_REMOTE_READ, int64(verbs.AccessRemoteRead)},
		{"IBV_ACCESS_REMOTE_ATOMIC", C.IBV_ACCESS_REMOTE_ATOMIC, int64(verbs.AccessRemoteAtomic)},
		{"IBV_ACCESS_MW_BIND", C.IBV_ACCESS_MW_BIND, int64(verbs.AccessMWBind)},
		{"IBV_ACCESS_ZERO_BASED", C.IBV_ACCESS_ZERO_BASED, int64(verbs.AccessZeroBased)},
		{"IBV_ACCESS_ON_DEMAND", C.IBV_ACCESS_ON_DEMAND, int64(verbs.AccessOnDemand)},
		{"IBV_WR_RDMA_WRITE", C.IBV_WR_RDMA_WRITE, int64(verbs.WRRDMAWrite)},
		{"IBV_WR_RDMA_WRITE_WITH_IMM", C.IBV_WR_RDMA_WRITE_WITH_IMM, int64(verbs.WRRDMAWriteWithImm)},
		{"IBV_WR_SEND", C.IBV_WR_SEND, int64(verbs.WRSend)},
		{"IBV_WR_SEND_WITH_IMM", C.IBV_WR_SEND_WITH_IMM, int64(verbs.WRSendWithImm)},
		{"IBV_WR_RDMA_READ", C.IBV_WR_RDMA_READ, int64(verbs.WRRDMARead)},
		{"IBV_WR_ATOMIC_CMP_AND_SWP", C.IBV_WR_ATOMIC_CMP_AND_SWP, int64(verbs.WRAtomicCmpAndSwp)},
		{"IBV_WR_ATOMIC_FETCH_AND_ADD", C.IBV_WR_ATOMIC_FETCH_AND_ADD, int64(verbs.WRAtomicFetchAdd)},
		{"IBV_WR_LOCAL_INV", C.IBV_WR_LOCAL_INV, int64(verbs.WRLocalInv)},
		{"IBV_WR_BIND_MW", C.IBV_WR_BIND_MW, int64(verbs.WRBindMW)},
		{"IBV_WR_SEND_WITH_INV", C.IBV_WR_SEND_WITH_INV, int64(verbs.WRSendWithInv)},
		{"IBV_WR_TSO", C.IBV_WR_TSO, int64(verbs.WRTSO)},
		{"IBV_SEND_FENCE", C.IBV_SEND_FENCE, int64(verbs.SendFence)},
		{"IBV_SEND_SIGNALED", C.IBV_SEND_SIGNALED, int64(verbs.SendSignaled)},
		{"IBV_SEND_SOLICITED", C.IBV_SEND_SOLICITED, int64(verbs.SendSolicited)},
		{"IBV_SEND_INLINE", C.IBV_SEND_INLINE, int64(verbs.SendInline)},
		{"IBV_SEND_IP_CSUM", C.IBV_SEND_IP_CSUM, int64(verbs.SendIPCsum)},
		{"IBV_WC_SUCCESS", C.IBV_WC_SUCCESS, int64(verbs.WCSuccess)},
		{"IBV_WC_LOC_LEN_ERR", C.IBV_WC_LOC_LEN_ERR, int64(verbs.WCLocLenErr)},
		{"IBV_WC_LOC_QP_OP_ERR", C.IBV_WC_LOC_QP_OP_ERR, int64(verbs.WCLocQPOpErr)},
		{"IBV_WC_LOC_EEC_OP_ERR", C.IBV_WC_LOC_EEC_OP_ERR, int64(verbs.WCLocEECOpErr)},
		{"IBV_WC_LOC_PROT_ERR", C.IBV_WC_LOC_PROT_ERR, int64(verbs.WCLocProtErr)},
		{"IBV_WC_WR_FLUSH_ERR", C.IBV_WC_WR_FLUSH_ERR, int64(verbs.WCWRFlushErr)},
		{"IBV_WC_MW_BIND_ERR", C.IBV_WC_MW_BIND_ERR, int64(verbs.WCMWBindErr)},
		{"IBV_WC_BAD_RESP_ERR", C.IBV_WC_BAD_RESP_ERR, int64(verbs.WCBadRespErr)},
		{"IBV_WC_LOC_ACCESS_ERR", C.IBV_WC_LOC_ACCESS_ERR, int64(verbs.WCLocAccessErr)},
		{"IBV_WC_REM_INV_REQ_ERR", C.IBV_WC_REM_INV_REQ_ERR, int64(verbs.WCRemInvReqErr)},
		{"IBV_WC_REM_ACCESS_ERR", C.IBV_WC_REM_ACCESS_ERR, int64(verbs.WCRemAccessErr)},
		{"IBV_WC_REM_OP_ERR", C.IBV_WC_REM_OP_ERR, int64(verbs.WCRemOpErr)},
		{"IBV_WC_RETRY_EXC_ERR", C.IBV_WC_RETRY_EXC_ERR, int64(verbs.WCRetryExcErr)},
		{"IBV_WC_RNR_RETRY_EXC_ERR", C.IBV_WC_RNR_RETRY_EXC_ERR, int64(verbs.WCRNRRetryExcErr)},
		{"IBV_WC_LOC_RDD_VIOL_ERR", C.IBV_WC_LOC_RDD_VIOL_ERR, int64(verbs.WCLocRDDViolErr)},
		{"IBV_WC_REM_INV_RD_REQ_ERR", C.IBV_WC_REM_INV_RD_REQ_ERR, int64(verbs.WCRemInvRdReqErr)},
		{"IBV_WC_REM_ABORT_ERR", C.IBV_WC_REM_ABORT_ERR, int64(verbs.WCRemAbortErr)},
		{"IBV_WC_INV_EECN_ERR", C.IBV_WC_INV_EECN_ERR, int64(verbs.WCInvEECNErr)},
		{"IBV_WC_INV_EEC_STATE_ERR", C.IBV_WC_INV_EEC_STATE_ERR, int64(verbs.WCInvEECStateErr)},
		{"IBV_WC_FATAL_ERR", C.IBV_WC_FATAL_ERR, int64(verbs.WCFatalErr)},
		{"IBV_WC_RESP_TIMEOUT_ERR", C.IBV_WC_RESP_TIMEOUT_ERR, int64(verbs.WCRespTimeoutErr)},
		{"IBV_WC_GENERAL_ERR", C.IBV_WC_GENERAL_ERR, int64(verbs.WCGeneralErr)},
		{"IBV_WC_TM_ERR", C.IBV_WC_TM_ERR, int64(verbs.WCTMErr)},
		{"IBV_WC_TM_RNDV_INCOMPLETE", C.IBV_WC_TM_RNDV_INCOMPLETE, int64(verbs.WCTMRndvIncomplete)},
		{"IBV_WC_SEND", C.IBV_WC_SEND, int64(verbs.WCSend)},
		{"IBV_WC_RDMA_WRITE", C.IBV_WC_RDMA_WRITE, int64(verbs.WCRDMAWrite)},
		{"IBV_WC_RDMA_READ", C.IBV_WC_RDMA_READ, int64(verbs.WCRDMARead)},
		{"IBV_WC_COMP_SWAP", C.IBV_WC_COMP_SWAP, int64(verbs.WCCompSwap)},
		{"IBV_WC_FETCH_ADD", C.IBV_WC_FETCH_ADD, int64(verbs.WCFetchAdd)},
		{"IBV_WC_BIND_MW", C.IBV_WC_BIND_MW, int64(verbs.WCBindMW)},
		{"IBV_WC_LOCAL_INV", C.IBV_WC_LOCAL_INV, int64(verbs.WCLocalInv)},
		{"IBV_WC_TSO", C.IBV_WC_TSO, int64(verbs.WCTSO)},
		{"IBV_WC_RECV", C.IBV_WC_RECV, int64(verbs.WCRecv)},
		{"IBV_WC_RECV_RDMA_WITH_IMM", C.IBV_WC_RECV_RDMA_WITH_IMM, int64(verbs.WCRecvRDMAWithImm)},
		{"IBV_WC_GRH", C.IBV_WC_GRH, int64(verbs.WCFlagGRH)},
		{"IBV_WC_WITH_IMM", C.IBV_WC_WITH_IMM, int64(verbs.WCFlagWithImm)},
		{"IBV_WC_WITH_INV", C.IBV_WC_WITH_INV, int64(verbs.WCFlagWithInv)},
		{"IBV_EVENT_CQ_ERR", C.IBV_EVENT_CQ_ERR, int64(verbs.EventCQErr)},
		{"IBV_EVENT_QP_FATAL", C.IBV_EVENT_QP_FATAL, int64(verbs.EventQPFatal)},
		{"IBV_EVENT_QP_REQ_ERR", C.IBV_EVENT_QP_REQ_ERR, int64(verbs.EventQPReqErr)},
		{"IBV_EVENT_QP_ACCESS_ERR", C.IBV_EVENT_QP_ACCESS_ERR, int64(verbs.EventQPAccessErr)},
		{"IBV_EVENT_COMM_EST", C.IBV_EVENT_COMM_EST, int64(verbs.EventCommEst)},
		{"IBV_EVENT_SQ_DRAINED", C.IBV_EVENT_SQ_DRAINED, int64(verbs.EventSQDrained)},
		{"IBV_EVENT_PATH_MIG", C.IBV_EVENT_PATH_MIG, int64(verbs.EventPathMig)},
		{"IBV_EVENT_PATH_MIG_ERR", C.IBV_EVENT_PATH_MIG_ERR, int64(verbs.EventPathMigErr)},
		{"IBV_EVENT_DEVICE_FATAL", C.IBV_EVENT_DEVICE_FATAL, int64(verbs.EventDeviceFatal)},
		{"IBV_EVENT_PORT_ACTIVE", C.IBV_EVENT_PORT_ACTIVE, int64(verbs.EventPortActive)},
		{"IBV_EVENT_PORT_ERR", C.IBV_EVENT_PORT_ERR, int64(verbs.EventPortErr)},
		{"IBV_EVENT_LID_CHANGE", C.IBV_EVENT_LID_CHANGE, int64(verbs.EventLIDChange)},
		{"IBV_EVENT_PKEY_CHANGE", C.IBV_EVENT_PKEY_CHANGE, int64(verbs.EventPKeyChange)},
		{"IBV_EVENT_SM_CHANGE", C.IBV_EVENT_SM_CHANGE, int64(verbs.EventSMChange)},
		{"IBV_EVENT_SRQ_ERR", C.IBV_EVENT_SRQ_ERR, int64(verbs.EventSRQErr)},
		{"IBV_EVENT_SRQ_LIMIT_REACHED", C.IBV_EVENT_SRQ_LIMIT_REACHED, int64(verbs.EventSRQLimitReached)},
		{"IBV_EVENT_QP_LAST_WQE_REACHED", C.IBV_EVENT_QP_LAST_WQE_REACHED, int64(verbs.EventQPLastWQEReached)},
		{"IBV_EVENT_CLIENT_REREGISTER", C.IBV_EVENT_CLIENT_REREGISTER, int64(verbs.EventClientReregister)},
		{"IBV_EVENT_GID_CHANGE", C.IBV_EVENT_GID_CHANGE, int64(verbs.EventGIDChange)},
		{"IBV_EVENT_WQ_FATAL", C.IBV_EVENT_WQ_FATAL, int64(verbs.EventWQFatal)},
		{"IBV_PORT_NOP", C.IBV_PORT_NOP, int64(verbs.PortNOP)},
		{"IBV_PORT_DOWN", C.IBV_PORT_DOWN, int64(verbs.PortDown)},
		{"IBV_PORT_INIT", C.IBV_PORT_INIT, int64(verbs.PortInit)},
		{"IBV_PORT_ARMED", C.IBV_PORT_ARMED, int64(verbs.PortArmed)},
		{"IBV_PORT_ACTIVE", C.IBV_PORT_ACTIVE, int64(verbs.PortActive)},
		{"IBV_PORT_ACTIVE_DEFER", C.IBV_PORT_ACTIVE_DEFER, int64(verbs.PortActiveDefer)},
		{"IBV_LINK_LAYER_UNSPECIFIED", C.IBV_LINK_LAYER_UNSPECIFIED, int64(verbs.LinkLayerUnspecified)},
		{"IBV_LINK_LAYER_INFINIBAND", C.IBV_LINK_LAYER_INFINIBAND, int64(verbs.LinkLayerInfiniBand)},
		{"IBV_LINK_LAYER_ETHERNET", C.IBV_LINK_LAYER_ETHERNET, int64(verbs.LinkLayerEthernet)},
		{"IBV_MTU_256", C.IBV_MTU_256, int64(verbs.MTU256)},
		{"IBV_MTU_512", C.IBV_MTU_512, int64(verbs.MTU512)},
		{"IBV_MTU_1024", C.IBV_MTU_1024, int64(verbs.MTU1024)},
		{"IBV_MTU_2048", C.IBV_MTU_2048, int64(verbs.MTU2048)},
		{"IBV_MTU_4096", C.IBV_MTU_4096, int64(verbs.MTU4096)},
		{"IBV_GID_TYPE_IB", C.IBV_GID_TYPE_IB, int64(GIDTypeIB)},
		{"IBV_GID_TYPE_ROCE_V1", C.IBV_GID_TYPE_ROCE_V1, int64(GIDTypeRoCEv1)},
		{"IBV_GID_TYPE_ROCE_V2", C.IBV_GID_TYPE_ROCE_V2, int64(GIDTypeRoCEv2)},
	}
}

const dumpLen = 1 << 16

// dumpQPAttr converts a to struct ibv_qp_attr and has C print it by C
// field name.
func dumpQPAttr(a *verbs.QPAttr) string {
	var c C.struct_ibv_qp_attr
	qpAttrToC(a, &c)
	buf := (*C.char)(C.malloc(dumpLen))
	defer C.free(unsafe.Pointer(buf))
	n := C.ibp_dump_qp_attr(&c, buf, dumpLen)
	return C.GoStringN(buf, n)
}

// filledQPAttr is the struct ibv_qp_attr C fills with distinct values,
// converted to Go.
func filledQPAttr() verbs.QPAttr {
	var c C.struct_ibv_qp_attr
	C.ibp_fill_qp_attr(&c)
	return qpAttrFromC(&c)
}

// dumpSendChain builds the struct ibv_send_wr chain PostSend would post
// and has C print it.
func dumpSendChain(wrs []verbs.SendWR) string {
	s := C.ibp_scratch_new()
	defer C.ibp_scratch_free(s)
	if fillSend(s, wrs) < 0 {
		return "fill failed"
	}
	buf := (*C.char)(C.malloc(dumpLen))
	defer C.free(unsafe.Pointer(buf))
	n := C.ibp_dump_send_chain(s, C.int(len(wrs)), buf, dumpLen)
	return C.GoStringN(buf, n)
}

func dumpRecvChain(wrs []verbs.RecvWR) string {
	s := C.ibp_scratch_new()
	defer C.ibp_scratch_free(s)
	if fillRecv(s, wrs) < 0 {
		return "fill failed"
	}
	buf := (*C.char)(C.malloc(dumpLen))
	defer C.free(unsafe.Pointer(buf))
	n := C.ibp_dump_recv_chain(s, C.int(len(wrs)), buf, dumpLen)
	return C.GoStringN(buf, n)
}

// filledWC is the struct ibv_wc C fills with distinct values, converted.
func filledWC() verbs.WC {
	var c C.struct_ibv_wc
	C.ibp_fill_wc(&c)
	return wcFromC(&c)
}

// retErrFor exposes retErr's errno rules to the tests.
func retErrFor(op string, ret int, errno error) error { return retErr(op, C.int(ret), errno, "") }

// fillAndBuild runs the Go and C halves of PostSend short of the post
// itself, on a scratch made for the purpose; allocs counts Go-heap
// allocations per call over runs.
func fillAndBuildAllocs(wrs []verbs.SendWR, runs int, allocs func(int, func()) float64) float64 {
	s := C.ibp_scratch_new()
	defer C.ibp_scratch_free(s)
	return allocs(runs, func() {
		fillSend(s, wrs)
		C.ibp_build_send(s, C.int(len(wrs)))
	})
}

// sendChainRoundTrip builds the C chain PostSend would post and reads it
// back with SendWRsFromC.
func sendChainRoundTrip(wrs []verbs.SendWR) []verbs.SendWR {
	s := C.ibp_scratch_new()
	defer C.ibp_scratch_free(s)
	if fillSend(s, wrs) < 0 {
		return nil
	}
	C.ibp_build_send(s, C.int(len(wrs)))
	return SendWRsFromC(unsafe.Pointer(s.ssend), nil)
}

func recvChainRoundTrip(wrs []verbs.RecvWR) []verbs.RecvWR {
	s := C.ibp_scratch_new()
	defer C.ibp_scratch_free(s)
	if fillRecv(s, wrs) < 0 {
		return nil
	}
	C.ibp_build_recv(s, C.int(len(wrs)))
	return RecvWRsFromC(unsafe.Pointer(s.rrecv), nil)
}

// wcRoundTrip writes w with WCToC and reads it back with WCFromC.
func wcRoundTrip(w verbs.WC) verbs.WC {
	p := C.malloc(C.sizeof_struct_ibv_wc)
	defer C.free(p)
	WCToC(&w, p)
	return WCFromC(p)
}

// keepStateAfter runs QP.keepState on a struct ibv_qp in C memory whose
// state field reads now after a call of this package (mask) that set it
// to set, on a QP created here (app false) or wrapped (app true); it
// returns the field as keepState leaves it.
func keepStateAfter(app bool, seen, set, now uint32, mask verbs.QPAttrMask) uint32 {
	c := (*C.struct_ibv_qp)(C.calloc(1, C.sizeof_struct_ibv_qp))
	defer C.free(unsafe.Pointer(c))
	c.state = now
	q := &QP{c: c, app: app}
	q.keepState(seen, set, mask)
	return uint32(c.state)
}
