package verbs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

func TestQPAttrMaskString(t *testing.T) {
	for _, tc := range []struct {
		m    QPAttrMask
		want string
	}{
		{0, "0"},
		{QPAttrState, "STATE"},
		{QPAttrState | QPAttrAV, "STATE|AV"},
		{QPAttrAV | QPAttrState, "STATE|AV"},
		{QPAttrRateLimit, "RATE_LIMIT"},
		{QPAttrDestQPN | QPAttrCap | QPAttrPathMigState, "PATH_MIG_STATE|CAP|DEST_QPN"},
		{QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic,
			"TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|SQ_PSN"},
		{1 << 21, "0x200000"},
		{1<<21 | 1<<31, "0x80200000"},
		{QPAttrState | 1<<21, "STATE|0x200000"},
		{QPAttrCurState | QPAttrEnSQDAsyncNotify | QPAttrQKey | 1<<24,
			"CUR_STATE|EN_SQD_ASYNC_NOTIFY|QKEY|0x1000000"},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("QPAttrMask(%#x).String() = %q, want %q", uint32(tc.m), got, tc.want)
		}
	}
}

func TestQPAttrMaskStringEveryBit(t *testing.T) {
	names := map[QPAttrMask]string{
		1 << 0: "STATE", 1 << 1: "CUR_STATE", 1 << 2: "EN_SQD_ASYNC_NOTIFY",
		1 << 3: "ACCESS_FLAGS", 1 << 4: "PKEY_INDEX", 1 << 5: "PORT", 1 << 6: "QKEY",
		1 << 7: "AV", 1 << 8: "PATH_MTU", 1 << 9: "TIMEOUT", 1 << 10: "RETRY_CNT",
		1 << 11: "RNR_RETRY", 1 << 12: "RQ_PSN", 1 << 13: "MAX_QP_RD_ATOMIC",
		1 << 14: "ALT_PATH", 1 << 15: "MIN_RNR_TIMER", 1 << 16: "SQ_PSN",
		1 << 17: "MAX_DEST_RD_ATOMIC", 1 << 18: "PATH_MIG_STATE", 1 << 19: "CAP",
		1 << 20: "DEST_QPN", 1 << 25: "RATE_LIMIT",
	}
	for i := range 32 {
		bit := QPAttrMask(1) << i
		want, ok := names[bit]
		if !ok {
			want = fmt.Sprintf("%#x", uint32(bit))
		}
		if got := bit.String(); got != want {
			t.Errorf("bit %d: String() = %q, want %q", i, got, want)
		}
	}
}

func TestMTUBytes(t *testing.T) {
	for _, tc := range []struct {
		m    MTU
		want int
	}{
		{0, 0},
		{MTU256, 256},
		{MTU512, 512},
		{MTU1024, 1024},
		{MTU2048, 2048},
		{MTU4096, 4096},
		{6, 0},
		{7, 0},
		{255, 0},
	} {
		if got := tc.m.Bytes(); got != tc.want {
			t.Errorf("MTU(%d).Bytes() = %d, want %d", uint8(tc.m), got, tc.want)
		}
	}
	if s := MTU4096.String(); s != "4096" {
		t.Errorf("MTU4096.String() = %q", s)
	}
	if s := MTU(9).String(); s != "MTU(9)" {
		t.Errorf("MTU(9).String() = %q", s)
	}
}

func TestTimeoutDuration(t *testing.T) {
	for _, tc := range []struct {
		t    uint8
		want time.Duration
	}{
		{0, 0}, // infinite
		{1, 8192 * time.Nanosecond},
		{14, 67108864 * time.Nanosecond}, // 67.108864 ms
		{18, 1073741824 * time.Nanosecond},
		{31, 8796093022208 * time.Nanosecond}, // 4.096 us * 2^31, the largest encoding
		{32, 0},
		{255, 0},
	} {
		if got := TimeoutDuration(tc.t); got != tc.want {
			t.Errorf("TimeoutDuration(%d) = %v, want %v", tc.t, got, tc.want)
		}
	}
	if TimeoutDuration(14).String() != "67.108864ms" {
		t.Errorf("TimeoutDuration(14) = %v, want 67.108864ms", TimeoutDuration(14))
	}
	largest := TimeoutDuration(31)
	for i := uint8(1); i < 31; i++ {
		if TimeoutDuration(i) >= largest || TimeoutDuration(i+1) != 2*TimeoutDuration(i) {
			t.Errorf("TimeoutDuration not doubling at %d", i)
		}
	}
}

func TestRNRTimerDuration(t *testing.T) {
	for _, tc := range []struct {
		t    uint8
		want time.Duration
	}{
		{0, 655360 * time.Microsecond}, // 655.36 ms
		{1, 10 * time.Microsecond},
		{2, 20 * time.Microsecond},
		{5, 60 * time.Microsecond},
		{12, 640 * time.Microsecond},
		{14, 1280 * time.Microsecond},
		{24, 40960 * time.Microsecond},
		{31, 491520 * time.Microsecond}, // 491.52 ms
	} {
		if got := RNRTimerDuration(tc.t); got != tc.want {
			t.Errorf("RNRTimerDuration(%d) = %v, want %v", tc.t, got, tc.want)
		}
	}
}

func TestWCStatusString(t *testing.T) {
	// Strings of ibv_wc_status_str() in rdma-core libibverbs/enum_strs.c.
	for _, tc := range []struct {
		s    WCStatus
		want string
	}{
		{0, "success"},
		{4, "local protection error"},
		{5, "Work Request Flushed Error"},
		{10, "remote access error"},
		{12, "transport retry counter exceeded"},
		{13, "RNR retry counter exceeded"},
		{20, "response timeout error"},
		{23, "TM software rendezvous"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("WCStatus(%d).String() = %q, want %q", uint8(tc.s), got, tc.want)
		}
	}
	if got := WCStatus(24).String(); got != "unknown" {
		t.Errorf("WCStatus(24).String() = %q, want \"unknown\" as ibv_wc_status_str", got)
	}
}

func TestEventTypeScope(t *testing.T) {
	// The member of struct ibv_async_event's element union that is valid.
	want := map[EventType]EventScope{
		EventCQErr:            ScopeCQ,
		EventQPFatal:          ScopeQP,
		EventQPReqErr:         ScopeQP,
		EventQPAccessErr:      ScopeQP,
		EventCommEst:          ScopeQP,
		EventSQDrained:        ScopeQP,
		EventPathMig:          ScopeQP,
		EventPathMigErr:       ScopeQP,
		EventDeviceFatal:      ScopeDevice,
		EventPortActive:       ScopePort,
		EventPortErr:          ScopePort,
		EventLIDChange:        ScopePort,
		EventPKeyChange:       ScopePort,
		EventSMChange:         ScopePort,
		EventSRQErr:           ScopeSRQ,
		EventSRQLimitReached:  ScopeSRQ,
		EventQPLastWQEReached: ScopeQP,
		EventClientReregister: ScopePort,
		EventGIDChange:        ScopePort,
		EventWQFatal:          ScopeWQ,
	}
	if len(want) != 20 {
		t.Fatalf("expectation covers %d events, want 20", len(want))
	}
	for e := EventType(0); e < 20; e++ {
		w, ok := want[e]
		if !ok {
			t.Fatalf("event %d missing from expectations", e)
		}
		if got := e.Scope(); got != w {
			t.Errorf("%v.Scope() = %d, want %d", e, got, w)
		}
	}
}

func TestWCOpcodeFor(t *testing.T) {
	want := map[WROpcode]WCOpcode{
		WRRDMAWrite:        WCRDMAWrite,
		WRRDMAWriteWithImm: WCRDMAWrite,
		WRSend:             WCSend,
		WRSendWithImm:      WCSend,
		WRRDMARead:         WCRDMARead,
		WRAtomicCmpAndSwp:  WCCompSwap,
		WRAtomicFetchAdd:   WCFetchAdd,
		WRLocalInv:         WCLocalInv,
		WRBindMW:           WCBindMW,
		WRSendWithInv:      WCSend,
		WRTSO:              WCTSO,
	}
	for op := WROpcode(0); op <= WRTSO; op++ {
		w, ok := want[op]
		if !ok {
			t.Fatalf("opcode %v missing from expectations", op)
		}
		if got := WCOpcodeFor(op); got != w {
			t.Errorf("WCOpcodeFor(%v) = %v, want %v", op, got, w)
		}
	}
}

func TestErrnoOf(t *testing.T) {
	inner := Errorf("ibv_modify_qp", EINVAL, "bad %s", "mask")
	wrapped := fmt.Errorf("x: %w", inner)
	if got := ErrnoOf(wrapped); got != EINVAL {
		t.Errorf("ErrnoOf(wrapped) = %v, want EINVAL", got)
	}
	if !errors.Is(wrapped, EINVAL) || errors.Is(wrapped, EBUSY) {
		t.Errorf("errors.Is through wrapped *Error wrong for %v", wrapped)
	}
	var ve *Error
	if !errors.As(wrapped, &ve) || ve.Op != "ibv_modify_qp" || ve.Detail != "bad mask" {
		t.Errorf("errors.As(wrapped) = %#v", ve)
	}
	if want := "x: ibv_modify_qp: " + syscall.EINVAL.Error() + ": bad mask"; wrapped.Error() != want {
		t.Errorf("Error() = %q, want %q", wrapped.Error(), want)
	}
	if got := ErrnoOf(fmt.Errorf("y: %w", Errorf("ibv_post_send", ENOMEM, ""))); got != ENOMEM {
		t.Errorf("ErrnoOf = %v, want ENOMEM", got)
	}
	if got := (&Error{Op: "ibv_reg_mr", Errno: EACCES}).Error(); got != "ibv_reg_mr: "+syscall.EACCES.Error() {
		t.Errorf("Error() without detail = %q", got)
	}
	if got := ErrnoOf(errors.New("plain")); got != 0 {
		t.Errorf("ErrnoOf(plain) = %v, want 0", got)
	}
	if got := ErrnoOf(nil); got != 0 {
		t.Errorf("ErrnoOf(nil) = %v, want 0", got)
	}
}

func TestLinkGbps(t *testing.T) {
	for _, tc := range []struct {
		width, speed uint8
		want         float64
	}{
		{Width4X, SpeedEDR, 100},
		{Width4X, SpeedHDR, 200},
		{Width4X, SpeedNDR, 400},
		{Width4X, SpeedQDR, 32},
		{Width1X, SpeedSDR, 2},
		{Width12X, SpeedDDR, 48},
		{Width2X, SpeedHDR, 100},
		{3, SpeedEDR, 0},
		{Width4X, 3, 0},
	} {
		if got := LinkGbps(tc.width, tc.speed); got != tc.want {
			t.Errorf("LinkGbps(%d, %d) = %v, want %v", tc.width, tc.speed, got, tc.want)
		}
	}
}

// TestConstantsMatchLibibverbs checks numeric values against
// <infiniband/verbs.h> from rdma-core.
func TestConstantsMatchLibibverbs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want uint64
	}{
		{"IBV_QP_STATE", uint64(QPAttrState), 1 << 0},
		{"IBV_QP_CUR_STATE", uint64(QPAttrCurState), 1 << 1},
		{"IBV_QP_EN_SQD_ASYNC_NOTIFY", uint64(QPAttrEnSQDAsyncNotify), 1 << 2},
		{"IBV_QP_ACCESS_FLAGS", uint64(QPAttrAccessFlags), 1 << 3},
		{"IBV_QP_PKEY_INDEX", uint64(QPAttrPKeyIndex), 1 << 4},
		{"IBV_QP_PORT", uint64(QPAttrPort), 1 << 5},
		{"IBV_QP_QKEY", uint64(QPAttrQKey), 1 << 6},
		{"IBV_QP_AV", uint64(QPAttrAV), 1 << 7},
		{"IBV_QP_PATH_MTU", uint64(QPAttrPathMTU), 1 << 8},
		{"IBV_QP_TIMEOUT", uint64(QPAttrTimeout), 1 << 9},
		{"IBV_QP_RETRY_CNT", uint64(QPAttrRetryCnt), 1 << 10},
		{"IBV_QP_RNR_RETRY", uint64(QPAttrRNRRetry), 1 << 11},
		{"IBV_QP_RQ_PSN", uint64(QPAttrRQPSN), 1 << 12},
		{"IBV_QP_MAX_QP_RD_ATOMIC", uint64(QPAttrMaxQPRdAtomic), 1 << 13},
		{"IBV_QP_ALT_PATH", uint64(QPAttrAltPath), 1 << 14},
		{"IBV_QP_MIN_RNR_TIMER", uint64(QPAttrMinRNRTimer), 1 << 15},
		{"IBV_QP_SQ_PSN", uint64(QPAttrSQPSN), 1 << 16},
		{"IBV_QP_MAX_DEST_RD_ATOMIC", uint64(QPAttrMaxDestRdAtomic), 1 << 17},
		{"IBV_QP_PATH_MIG_STATE", uint64(QPAttrPathMigState), 1 << 18},
		{"IBV_QP_CAP", uint64(QPAttrCap), 1 << 19},
		{"IBV_QP_DEST_QPN", uint64(QPAttrDestQPN), 1 << 20},
		{"IBV_QP_RATE_LIMIT", uint64(QPAttrRateLimit), 1 << 25},

		{"IBV_QPS_RESET", uint64(QPSReset), 0},
		{"IBV_QPS_RTS", uint64(QPSRTS), 3},
		{"IBV_QPS_SQE", uint64(QPSSQE), 5},
		{"IBV_QPS_ERR", uint64(QPSErr), 6},
		{"IBV_QPS_UNKNOWN", uint64(QPSUnknown), 7},

		{"IBV_MIG_MIGRATED", uint64(MigMigrated), 0},
		{"IBV_MIG_REARM", uint64(MigRearm), 1},
		{"IBV_MIG_ARMED", uint64(MigArmed), 2},

		{"IBV_QPT_RC", uint64(QPTRC), 2},
		{"IBV_QPT_UD", uint64(QPTUD), 4},

		{"IBV_EVENT_CQ_ERR", uint64(EventCQErr), 0},
		{"IBV_EVENT_COMM_EST", uint64(EventCommEst), 4},
		{"IBV_EVENT_PATH_MIG", uint64(EventPathMig), 6},
		{"IBV_EVENT_PATH_MIG_ERR", uint64(EventPathMigErr), 7},
		{"IBV_EVENT_DEVICE_FATAL", uint64(EventDeviceFatal), 8},
		{"IBV_EVENT_PORT_ERR", uint64(EventPortErr), 10},
		{"IBV_EVENT_QP_LAST_WQE_REACHED", uint64(EventQPLastWQEReached), 16},
		{"IBV_EVENT_GID_CHANGE", uint64(EventGIDChange), 18},
		{"IBV_EVENT_WQ_FATAL", uint64(EventWQFatal), 19},

		{"IBV_WC_SUCCESS", uint64(WCSuccess), 0},
		{"IBV_WC_WR_FLUSH_ERR", uint64(WCWRFlushErr), 5},
		{"IBV_WC_REM_ACCESS_ERR", uint64(WCRemAccessErr), 10},
		{"IBV_WC_RETRY_EXC_ERR", uint64(WCRetryExcErr), 12},
		{"IBV_WC_RNR_RETRY_EXC_ERR", uint64(WCRNRRetryExcErr), 13},
		{"IBV_WC_RESP_TIMEOUT_ERR", uint64(WCRespTimeoutErr), 20},
		{"IBV_WC_GENERAL_ERR", uint64(WCGeneralErr), 21},

		{"IBV_WC_SEND", uint64(WCSend), 0},
		{"IBV_WC_FETCH_ADD", uint64(WCFetchAdd), 4},
		{"IBV_WC_LOCAL_INV", uint64(WCLocalInv), 6},
		{"IBV_WC_RECV", uint64(WCRecv), 1 << 7},
		{"IBV_WC_RECV_RDMA_WITH_IMM", uint64(WCRecvRDMAWithImm), 129},

		{"IBV_WC_GRH", uint64(WCFlagGRH), 1 << 0},
		{"IBV_WC_WITH_IMM", uint64(WCFlagWithImm), 1 << 1},
		{"IBV_WC_WITH_INV", uint64(WCFlagWithInv), 1 << 3},

		{"IBV_WR_RDMA_WRITE", uint64(WRRDMAWrite), 0},
		{"IBV_WR_SEND", uint64(WRSend), 2},
		{"IBV_WR_RDMA_READ", uint64(WRRDMARead), 4},
		{"IBV_WR_ATOMIC_CMP_AND_SWP", uint64(WRAtomicCmpAndSwp), 5},
		{"IBV_WR_ATOMIC_FETCH_AND_ADD", uint64(WRAtomicFetchAdd), 6},
		{"IBV_WR_SEND_WITH_INV", uint64(WRSendWithInv), 9},
		{"IBV_WR_TSO", uint64(WRTSO), 10},

		{"IBV_SEND_FENCE", uint64(SendFence), 1 << 0},
		{"IBV_SEND_SIGNALED", uint64(SendSignaled), 1 << 1},
		{"IBV_SEND_INLINE", uint64(SendInline), 1 << 3},

		{"IBV_ACCESS_LOCAL_WRITE", uint64(AccessLocalWrite), 1 << 0},
		{"IBV_ACCESS_REMOTE_WRITE", uint64(AccessRemoteWrite), 1 << 1},
		{"IBV_ACCESS_REMOTE_READ", uint64(AccessRemoteRead), 1 << 2},
		{"IBV_ACCESS_REMOTE_ATOMIC", uint64(AccessRemoteAtomic), 1 << 3},
		{"IBV_ACCESS_ON_DEMAND", uint64(AccessOnDemand), 1 << 6},

		{"IBV_DEVICE_AUTO_PATH_MIG", uint64(DeviceAutoPathMig), 1 << 4},
		{"IBV_DEVICE_CURR_QP_STATE_MOD", uint64(DeviceCurrQPStateMod), 1 << 7},
		{"IBV_DEVICE_PORT_ACTIVE_EVENT", uint64(DevicePortActiveEvent), 1 << 10},
		{"IBV_DEVICE_RC_RNR_NAK_GEN", uint64(DeviceRCRNRNAKGen), 1 << 12},
		{"IBV_DEVICE_N_NOTIFY_CQ", uint64(DeviceNNotifyCQ), 1 << 14},

		{"IBV_ATOMIC_HCA", uint64(AtomicHCA), 1},
		{"IBV_NODE_CA", uint64(NodeCA), 1},
		{"IBV_NODE_RNIC", uint64(NodeRNIC), 4},

		{"IBV_PORT_DOWN", uint64(PortDown), 1},
		{"IBV_PORT_ACTIVE", uint64(PortActive), 4},
		{"IBV_PORT_ACTIVE_DEFER", uint64(PortActiveDefer), 5},
		{"IBV_LINK_LAYER_INFINIBAND", uint64(LinkLayerInfiniBand), 1},
		{"IBV_LINK_LAYER_ETHERNET", uint64(LinkLayerEthernet), 2},

		{"IBV_MTU_256", uint64(MTU256), 1},
		{"IBV_MTU_4096", uint64(MTU4096), 5},

		{"IB_WIDTH_4X", uint64(Width4X), 2},
		{"IB_WIDTH_12X", uint64(Width12X), 8},
		{"IB_WIDTH_2X", uint64(Width2X), 16},
		{"IB_SPEED_EDR", uint64(SpeedEDR), 32},
		{"IB_SPEED_NDR", uint64(SpeedNDR), 128},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

// TestPortStateNames: port states read as the rdma tool prints them
// (`rdma link`: "state ACTIVE physical_state LINK_UP"), the one vocabulary
// of ibpath's status.
func TestPortStateNames(t *testing.T) {
	for s, want := range map[PortState]string{PortDown: "DOWN", PortInit: "INIT", PortArmed: "ARMED", PortActive: "ACTIVE",
		PortActiveDefer: "ACTIVE_DEFER", 9: "PortState(9)"} {
		if got := s.String(); got != want {
			t.Errorf("PortState(%d) = %q, want %q", uint8(s), got, want)
		}
	}
	for s, want := range map[PhysState]string{PhysSleep: "SLEEP", PhysPolling: "POLLING", PhysDisabled: "DISABLED",
		PhysConfigTraining: "ARMED", PhysLinkUp: "LINK_UP", PhysLinkErrorRecovery: "LINK_ERROR_RECOVER", PhysPhyTest: "PHY_TEST",
		9: "OPA_OFFLINE", 8: "PhysState(8)", 12: "PhysState(12)"} {
		if got := s.String(); got != want {
			t.Errorf("PhysState(%d) = %q, want %q", uint8(s), got, want)
		}
	}
}
