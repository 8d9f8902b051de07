package verbs

// NodeType mirrors enum ibv_node_type.
type NodeType uint8

// Node types.
const (
	NodeCA     NodeType = 1 // IBV_NODE_CA
	NodeSwitch NodeType = 2 // IBV_NODE_SWITCH
	NodeRouter NodeType = 3 // IBV_NODE_ROUTER
	NodeRNIC   NodeType = 4 // IBV_NODE_RNIC
)

// DeviceCapFlags mirrors enum ibv_device_cap_flags.
type DeviceCapFlags uint32

// Device capability bits ibpath looks at.
const (
	DeviceResizeMaxWR     DeviceCapFlags = 1 << 0  // IBV_DEVICE_RESIZE_MAX_WR
	DeviceBadPKeyCntr     DeviceCapFlags = 1 << 1  // IBV_DEVICE_BAD_PKEY_CNTR
	DeviceBadQKeyCntr     DeviceCapFlags = 1 << 2  // IBV_DEVICE_BAD_QKEY_CNTR
	DeviceRawMulti        DeviceCapFlags = 1 << 3  // IBV_DEVICE_RAW_MULTI
	DeviceAutoPathMig     DeviceCapFlags = 1 << 4  // IBV_DEVICE_AUTO_PATH_MIG
	DeviceChangePhyPort   DeviceCapFlags = 1 << 5  // IBV_DEVICE_CHANGE_PHY_PORT
	DeviceCurrQPStateMod  DeviceCapFlags = 1 << 7  // IBV_DEVICE_CURR_QP_STATE_MOD
	DevicePortActiveEvent DeviceCapFlags = 1 << 10 // IBV_DEVICE_PORT_ACTIVE_EVENT
	DeviceRCRNRNAKGen     DeviceCapFlags = 1 << 12 // IBV_DEVICE_RC_RNR_NAK_GEN
	DeviceNNotifyCQ       DeviceCapFlags = 1 << 14 // IBV_DEVICE_N_NOTIFY_CQ
)

// AtomicCap mirrors enum ibv_atomic_cap.
type AtomicCap uint8

// Atomic capability levels.
const (
	AtomicNone AtomicCap = 0 // IBV_ATOMIC_NONE
	AtomicHCA  AtomicCap = 1 // IBV_ATOMIC_HCA
	AtomicGlob AtomicCap = 2 // IBV_ATOMIC_GLOB
)

// DeviceInfo identifies a device as ibv_get_device_list reports it.
type DeviceInfo struct {
	Name     string
	GUID     uint64
	NodeType NodeType
}

// DeviceAttr mirrors the fields of struct ibv_device_attr that ibpath uses.
type DeviceAttr struct {
	FWVer           string
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int
	DeviceCapFlags  DeviceCapFlags
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	AtomicCap       AtomicCap
	MaxPKeys        int
	PhysPortCnt     uint8
	MaxInlineData   int // not in ibv_device_attr; the provider's limit for cap.max_inline_data
}

// QPCap mirrors struct ibv_qp_cap.
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr mirrors struct ibv_qp_init_attr.
type QPInitAttr struct {
	SendCQ CQ
	RecvCQ CQ
	// SRQ, when set, is the shared receive queue the QP receives
	// through; Cap's receive fields are then ignored.
	SRQ      SRQ
	Cap      QPCap
	QPType   QPType
	SQSigAll bool
	UserCtx  any // qp_context
}

// QPAttr mirrors struct ibv_qp_attr. Which fields matter is given by the
// QPAttrMask passed beside it.
type QPAttr struct {
	QPState          QPState
	CurQPState       QPState
	PathMTU          MTU
	PathMigState     MigState
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPN          uint32
	QPAccessFlags    AccessFlags
	Cap              QPCap
	AHAttr           AHAttr
	AltAHAttr        AHAttr
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      uint8
	MaxDestRdAtomic  uint8
	MinRNRTimer      uint8
	PortNum          uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	AltPortNum       uint8
	AltTimeout       uint8
	RateLimit        uint32
}

// SGE mirrors struct ibv_sge.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR mirrors struct ibv_send_wr for RC (the rdma and atomic members of
// its union are flattened). The caller keeps ownership of SGList: a
// provider copies what it needs at post time.
type SendWR struct {
	WRID       uint64
	SGList     []SGE
	Opcode     WROpcode
	SendFlags  SendFlags
	ImmData    uint32 // host order here; libibverbs carries imm_data in network order
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64 // compare for CMP_AND_SWP, add for FETCH_AND_ADD
	Swap       uint64
}

// RecvWR mirrors struct ibv_recv_wr.
type RecvWR struct {
	WRID   uint64
	SGList []SGE
}

// WC mirrors struct ibv_wc.
type WC struct {
	WRID         uint64
	Status       WCStatus
	Opcode       WCOpcode
	VendorErr    uint32
	ByteLen      uint32
	ImmData      uint32 // host order; valid when WCFlags has WCFlagWithImm
	QPNum        uint32 // local QP number
	SrcQP        uint32
	WCFlags      WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
}

// AsyncEvent mirrors struct ibv_async_event. Which element is valid follows
// from Type.Scope().
type AsyncEvent struct {
	Type EventType
	QP   QP
	CQ   CQ
	SRQ  SRQ
	Port uint8
}

// SRQAttr mirrors struct ibv_srq_attr.
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	// Limit arms SRQ_LIMIT_REACHED: raised once when fewer WRs than
	// Limit are left, then 0 (disarmed) until armed again. 0: not armed.
	Limit int
}

// SRQAttrMask mirrors enum ibv_srq_attr_mask.
type SRQAttrMask int

// SRQ attribute mask bits.
const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0 // IBV_SRQ_MAX_WR
	SRQAttrLimit SRQAttrMask = 1 << 1 // IBV_SRQ_LIMIT
)

// Apply copies into a the fields of b that mask names (as a modify with
// that mask would set them; QPAttrState sets QPState).
func (a *QPAttr) Apply(b *QPAttr, mask QPAttrMask) {
	set := func(m QPAttrMask, f func()) {
		if mask&m != 0 {
			f()
		}
	}
	set(QPAttrState, func() { a.QPState = b.QPState })
	set(QPAttrCurState, func() { a.CurQPState = b.CurQPState })
	set(QPAttrEnSQDAsyncNotify, func() { a.EnSQDAsyncNotify = b.EnSQDAsyncNotify })
	set(QPAttrAccessFlags, func() { a.QPAccessFlags = b.QPAccessFlags })
	set(QPAttrPKeyIndex, func() { a.PKeyIndex = b.PKeyIndex })
	set(QPAttrPort, func() { a.PortNum = b.PortNum })
	set(QPAttrQKey, func() { a.QKey = b.QKey })
	set(QPAttrAV, func() { a.AHAttr = b.AHAttr })
	set(QPAttrPathMTU, func() { a.PathMTU = b.PathMTU })
	set(QPAttrTimeout, func() { a.Timeout = b.Timeout })
	set(QPAttrRetryCnt, func() { a.RetryCnt = b.RetryCnt })
	set(QPAttrRNRRetry, func() { a.RNRRetry = b.RNRRetry })
	set(QPAttrRQPSN, func() { a.RQPSN = b.RQPSN })
	set(QPAttrMaxQPRdAtomic, func() { a.MaxRdAtomic = b.MaxRdAtomic })
	set(QPAttrAltPath, func() {
		a.AltAHAttr, a.AltPKeyIndex, a.AltPortNum, a.AltTimeout = b.AltAHAttr, b.AltPKeyIndex, b.AltPortNum, b.AltTimeout
	})
	set(QPAttrMinRNRTimer, func() { a.MinRNRTimer = b.MinRNRTimer })
	set(QPAttrSQPSN, func() { a.SQPSN = b.SQPSN })
	set(QPAttrMaxDestRdAtomic, func() { a.MaxDestRdAtomic = b.MaxDestRdAtomic })
	set(QPAttrPathMigState, func() { a.PathMigState = b.PathMigState })
	set(QPAttrCap, func() { a.Cap = b.Cap })
	set(QPAttrDestQPN, func() { a.DestQPN = b.DestQPN })
	set(QPAttrRateLimit, func() { a.RateLimit = b.RateLimit })
}
