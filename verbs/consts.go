package verbs

import "fmt"

// QPState mirrors enum ibv_qp_state.
type QPState uint8

// QP states.
const (
	QPSReset   QPState = 0 // IBV_QPS_RESET
	QPSInit    QPState = 1 // IBV_QPS_INIT
	QPSRTR     QPState = 2 // IBV_QPS_RTR
	QPSRTS     QPState = 3 // IBV_QPS_RTS
	QPSSQD     QPState = 4 // IBV_QPS_SQD
	QPSSQE     QPState = 5 // IBV_QPS_SQE
	QPSErr     QPState = 6 // IBV_QPS_ERR
	QPSUnknown QPState = 7 // IBV_QPS_UNKNOWN
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// MigState mirrors enum ibv_mig_state, the path-migration state of a QP.
type MigState uint8

// Path migration states.
const (
	MigMigrated MigState = 0 // IBV_MIG_MIGRATED
	MigRearm    MigState = 1 // IBV_MIG_REARM
	MigArmed    MigState = 2 // IBV_MIG_ARMED
)

func (m MigState) String() string {
	switch m {
	case MigMigrated:
		return "MIGRATED"
	case MigRearm:
		return "REARM"
	case MigArmed:
		return "ARMED"
	}
	return fmt.Sprintf("MigState(%d)", uint8(m))
}

// QPType mirrors enum ibv_qp_type.
type QPType uint8

// QP transport types.
const (
	QPTRC QPType = 2 // IBV_QPT_RC
	QPTUC QPType = 3 // IBV_QPT_UC
	QPTUD QPType = 4 // IBV_QPT_UD
	// QPTRawPacket, QPTXRCSend and QPTXRCRecv are named for status
	// reasons only: no layer protects them.
	QPTRawPacket QPType = 8  // IBV_QPT_RAW_PACKET
	QPTXRCSend   QPType = 9  // IBV_QPT_XRC_SEND
	QPTXRCRecv   QPType = 10 // IBV_QPT_XRC_RECV
)

func (t QPType) String() string {
	switch t {
	case QPTRC:
		return "RC"
	case QPTUC:
		return "UC"
	case QPTUD:
		return "UD"
	case QPTRawPacket:
		return "raw packet"
	case QPTXRCSend:
		return "XRC send"
	case QPTXRCRecv:
		return "XRC receive"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPAttrMask mirrors enum ibv_qp_attr_mask: which fields of a QPAttr a
// Modify or Query call uses.
type QPAttrMask uint32

// QP attribute mask bits.
const (
	QPAttrState            QPAttrMask = 1 << 0  // IBV_QP_STATE
	QPAttrCurState         QPAttrMask = 1 << 1  // IBV_QP_CUR_STATE
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	QPAttrAccessFlags      QPAttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS
	QPAttrPKeyIndex        QPAttrMask = 1 << 4  // IBV_QP_PKEY_INDEX
	QPAttrPort             QPAttrMask = 1 << 5  // IBV_QP_PORT
	QPAttrQKey             QPAttrMask = 1 << 6  // IBV_QP_QKEY
	QPAttrAV               QPAttrMask = 1 << 7  // IBV_QP_AV
	QPAttrPathMTU          QPAttrMask = 1 << 8  // IBV_QP_PATH_MTU
	QPAttrTimeout          QPAttrMask = 1 << 9  // IBV_QP_TIMEOUT
	QPAttrRetryCnt         QPAttrMask = 1 << 10 // IBV_QP_RETRY_CNT
	QPAttrRNRRetry         QPAttrMask = 1 << 11 // IBV_QP_RNR_RETRY
	QPAttrRQPSN            QPAttrMask = 1 << 12 // IBV_QP_RQ_PSN
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC
	QPAttrAltPath          QPAttrMask = 1 << 14 // IBV_QP_ALT_PATH
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	QPAttrSQPSN            QPAttrMask = 1 << 16 // IBV_QP_SQ_PSN
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
	QPAttrPathMigState     QPAttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE
	QPAttrCap              QPAttrMask = 1 << 19 // IBV_QP_CAP
	QPAttrDestQPN          QPAttrMask = 1 << 20 // IBV_QP_DEST_QPN
	QPAttrRateLimit        QPAttrMask = 1 << 25 // IBV_QP_RATE_LIMIT
)

var maskNames = []struct {
	bit  QPAttrMask
	name string
}{
	{QPAttrState, "STATE"}, {QPAttrCurState, "CUR_STATE"},
	{QPAttrEnSQDAsyncNotify, "EN_SQD_ASYNC_NOTIFY"}, {QPAttrAccessFlags, "ACCESS_FLAGS"},
	{QPAttrPKeyIndex, "PKEY_INDEX"}, {QPAttrPort, "PORT"}, {QPAttrQKey, "QKEY"},
	{QPAttrAV, "AV"}, {QPAttrPathMTU, "PATH_MTU"}, {QPAttrTimeout, "TIMEOUT"},
	{QPAttrRetryCnt, "RETRY_CNT"}, {QPAttrRNRRetry, "RNR_RETRY"}, {QPAttrRQPSN, "RQ_PSN"},
	{QPAttrMaxQPRdAtomic, "MAX_QP_RD_ATOMIC"}, {QPAttrAltPath, "ALT_PATH"},
	{QPAttrMinRNRTimer, "MIN_RNR_TIMER"}, {QPAttrSQPSN, "SQ_PSN"},
	{QPAttrMaxDestRdAtomic, "MAX_DEST_RD_ATOMIC"}, {QPAttrPathMigState, "PATH_MIG_STATE"},
	{QPAttrCap, "CAP"}, {QPAttrDestQPN, "DEST_QPN"}, {QPAttrRateLimit, "RATE_LIMIT"},
}

// String renders the mask as IBV_QP_* names joined by '|'.
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	s := ""
	for _, n := range maskNames {
		if m&n.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
			m &^= n.bit
		}
	}
	if m != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("%#x", uint32(m))
	}
	return s
}

// AccessFlags mirrors enum ibv_access_flags.
type AccessFlags uint32

// Access flags for MRs and QPs.
const (
	AccessLocalWrite   AccessFlags = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  AccessFlags = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   AccessFlags = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic AccessFlags = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind       AccessFlags = 1 << 4 // IBV_ACCESS_MW_BIND
	AccessZeroBased    AccessFlags = 1 << 5 // IBV_ACCESS_ZERO_BASED
	AccessOnDemand     AccessFlags = 1 << 6 // IBV_ACCESS_ON_DEMAND
)

// WROpcode mirrors enum ibv_wr_opcode.
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite        WROpcode = 0  // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm WROpcode = 1  // IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend             WROpcode = 2  // IBV_WR_SEND
	WRSendWithImm      WROpcode = 3  // IBV_WR_SEND_WITH_IMM
	WRRDMARead         WROpcode = 4  // IBV_WR_RDMA_READ
	WRAtomicCmpAndSwp  WROpcode = 5  // IBV_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAdd   WROpcode = 6  // IBV_WR_ATOMIC_FETCH_AND_ADD
	WRLocalInv         WROpcode = 7  // IBV_WR_LOCAL_INV
	WRBindMW           WROpcode = 8  // IBV_WR_BIND_MW
	WRSendWithInv      WROpcode = 9  // IBV_WR_SEND_WITH_INV
	WRTSO              WROpcode = 10 // IBV_WR_TSO
)

var wrOpNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM",
	"RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW",
	"SEND_WITH_INV", "TSO"}

func (o WROpcode) String() string {
	if int(o) < len(wrOpNames) {
		return wrOpNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// IsAtomic reports whether the opcode is a remote atomic, which is never
// safe to execute twice.
func (o WROpcode) IsAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAdd }

// ConsumesRecv reports whether the opcode consumes a receive WR at the
// responder (SEND variants and RDMA_WRITE_WITH_IMM).
func (o WROpcode) ConsumesRecv() bool {
	return o == WRSend || o == WRSendWithImm || o == WRRDMAWriteWithImm || o == WRSendWithInv
}

// SendFlags mirrors enum ibv_send_flags.
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE
	SendIPCsum    SendFlags = 1 << 4 // IBV_SEND_IP_CSUM
)

// WCStatus mirrors enum ibv_wc_status.
type WCStatus uint8

// Work completion status codes.
const (
	WCSuccess          WCStatus = 0  // IBV_WC_SUCCESS
	WCLocLenErr        WCStatus = 1  // IBV_WC_LOC_LEN_ERR
	WCLocQPOpErr       WCStatus = 2  // IBV_WC_LOC_QP_OP_ERR
	WCLocEECOpErr      WCStatus = 3  // IBV_WC_LOC_EEC_OP_ERR
	WCLocProtErr       WCStatus = 4  // IBV_WC_LOC_PROT_ERR
	WCWRFlushErr       WCStatus = 5  // IBV_WC_WR_FLUSH_ERR
	WCMWBindErr        WCStatus = 6  // IBV_WC_MW_BIND_ERR
	WCBadRespErr       WCStatus = 7  // IBV_WC_BAD_RESP_ERR
	WCLocAccessErr     WCStatus = 8  // IBV_WC_LOC_ACCESS_ERR
	WCRemInvReqErr     WCStatus = 9  // IBV_WC_REM_INV_REQ_ERR
	WCRemAccessErr     WCStatus = 10 // IBV_WC_REM_ACCESS_ERR
	WCRemOpErr         WCStatus = 11 // IBV_WC_REM_OP_ERR
	WCRetryExcErr      WCStatus = 12 // IBV_WC_RETRY_EXC_ERR
	WCRNRRetryExcErr   WCStatus = 13 // IBV_WC_RNR_RETRY_EXC_ERR
	WCLocRDDViolErr    WCStatus = 14 // IBV_WC_LOC_RDD_VIOL_ERR
	WCRemInvRdReqErr   WCStatus = 15 // IBV_WC_REM_INV_RD_REQ_ERR
	WCRemAbortErr      WCStatus = 16 // IBV_WC_REM_ABORT_ERR
	WCInvEECNErr       WCStatus = 17 // IBV_WC_INV_EECN_ERR
	WCInvEECStateErr   WCStatus = 18 // IBV_WC_INV_EEC_STATE_ERR
	WCFatalErr         WCStatus = 19 // IBV_WC_FATAL_ERR
	WCRespTimeoutErr   WCStatus = 20 // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr       WCStatus = 21 // IBV_WC_GENERAL_ERR
	WCTMErr            WCStatus = 22 // IBV_WC_TM_ERR
	WCTMRndvIncomplete WCStatus = 23 // IBV_WC_TM_RNDV_INCOMPLETE
)

// String matches ibv_wc_status_str().
func (s WCStatus) String() string {
	names := [...]string{"success", "local length error", "local QP operation error",
		"local EE context operation error", "local protection error", "Work Request Flushed Error",
		"memory management operation error", "bad response error", "local access error",
		"remote invalid request error", "remote access error", "remote operation error",
		"transport retry counter exceeded", "RNR retry counter exceeded",
		"local RDD violation error", "remote invalid RD request", "aborted error",
		"invalid EE context number", "invalid EE context state", "fatal error",
		"response timeout error", "general error", "TM error", "TM software rendezvous"}
	if int(s) < len(names) {
		return names[s]
	}
	return "unknown"
}

// WCOpcode mirrors enum ibv_wc_opcode.
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IBV_WC_LOCAL_INV
	WCTSO             WCOpcode = 7   // IBV_WC_TSO
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCTSO:
		return "TSO"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCOpcodeFor is the completion opcode a requester reports for a send WR.
func WCOpcodeFor(op WROpcode) WCOpcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	case WRTSO:
		return WCTSO
	}
	return WCSend
}

// WCFlags mirrors enum ibv_wc_flags.
type WCFlags uint32

// Work completion flags.
const (
	WCFlagGRH     WCFlags = 1 << 0 // IBV_WC_GRH
	WCFlagWithImm WCFlags = 1 << 1 // IBV_WC_WITH_IMM
	WCFlagWithInv WCFlags = 1 << 3 // IBV_WC_WITH_INV
)

// EventType mirrors enum ibv_event_type.
type EventType uint8

// Async event types.
const (
	EventCQErr            EventType = 0  // IBV_EVENT_CQ_ERR
	EventQPFatal          EventType = 1  // IBV_EVENT_QP_FATAL
	EventQPReqErr         EventType = 2  // IBV_EVENT_QP_REQ_ERR
	EventQPAccessErr      EventType = 3  // IBV_EVENT_QP_ACCESS_ERR
	EventCommEst          EventType = 4  // IBV_EVENT_COMM_EST
	EventSQDrained        EventType = 5  // IBV_EVENT_SQ_DRAINED
	EventPathMig          EventType = 6  // IBV_EVENT_PATH_MIG
	EventPathMigErr       EventType = 7  // IBV_EVENT_PATH_MIG_ERR
	EventDeviceFatal      EventType = 8  // IBV_EVENT_DEVICE_FATAL
	EventPortActive       EventType = 9  // IBV_EVENT_PORT_ACTIVE
	EventPortErr          EventType = 10 // IBV_EVENT_PORT_ERR
	EventLIDChange        EventType = 11 // IBV_EVENT_LID_CHANGE
	EventPKeyChange       EventType = 12 // IBV_EVENT_PKEY_CHANGE
	EventSMChange         EventType = 13 // IBV_EVENT_SM_CHANGE
	EventSRQErr           EventType = 14 // IBV_EVENT_SRQ_ERR
	EventSRQLimitReached  EventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQEReached EventType = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
	EventClientReregister EventType = 17 // IBV_EVENT_CLIENT_REREGISTER
	EventGIDChange        EventType = 18 // IBV_EVENT_GID_CHANGE
	EventWQFatal          EventType = 19 // IBV_EVENT_WQ_FATAL
)

var eventNames = [...]string{"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST",
	"SQ_DRAINED", "PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR",
	"LID_CHANGE", "PKEY_CHANGE", "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED",
	"QP_LAST_WQE_REACHED", "CLIENT_REREGISTER", "GID_CHANGE", "WQ_FATAL"}

func (e EventType) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("EventType(%d)", uint8(e))
}

// Scope says which element of an AsyncEvent is valid for this type, as the
// union in struct ibv_async_event does.
func (e EventType) Scope() EventScope {
	switch e {
	case EventCQErr:
		return ScopeCQ
	case EventQPFatal, EventQPReqErr, EventQPAccessErr, EventCommEst, EventSQDrained,
		EventPathMig, EventPathMigErr, EventQPLastWQEReached:
		return ScopeQP
	case EventSRQErr, EventSRQLimitReached:
		return ScopeSRQ
	case EventPortActive, EventPortErr, EventLIDChange, EventPKeyChange, EventSMChange,
		EventClientReregister, EventGIDChange:
		return ScopePort
	case EventWQFatal:
		return ScopeWQ
	}
	return ScopeDevice
}

// EventScope names the element an async event refers to.
type EventScope uint8

// Event scopes.
const (
	ScopeDevice EventScope = iota
	ScopePort
	ScopeQP
	ScopeCQ
	ScopeSRQ
	ScopeWQ
)
