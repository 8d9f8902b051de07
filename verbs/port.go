package verbs

import (
	"fmt"
	"net"
	"time"
)

// PortState mirrors enum ibv_port_state.
type PortState uint8

// Logical port states.
const (
	PortNOP         PortState = 0 // IBV_PORT_NOP
	PortDown        PortState = 1 // IBV_PORT_DOWN
	PortInit        PortState = 2 // IBV_PORT_INIT
	PortArmed       PortState = 3 // IBV_PORT_ARMED
	PortActive      PortState = 4 // IBV_PORT_ACTIVE
	PortActiveDefer PortState = 5 // IBV_PORT_ACTIVE_DEFER
)

// String is the state as the rdma tool names it (`rdma link`: "state
// ACTIVE"), which is also the name after the number in sysfs
// (ports/N/state: "4: ACTIVE").
func (s PortState) String() string {
	names := [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// PhysState is the port physical state as reported in phys_state (IB spec
// PortPhysicalState; also sysfs .../ports/N/phys_state).
type PhysState uint8

// Physical port states.
const (
	PhysSleep             PhysState = 1
	PhysPolling           PhysState = 2
	PhysDisabled          PhysState = 3
	PhysConfigTraining    PhysState = 4
	PhysLinkUp            PhysState = 5
	PhysLinkErrorRecovery PhysState = 6
	PhysPhyTest           PhysState = 7
)

// String is the physical state as the rdma tool names it (`rdma link`:
// "physical_state LINK_UP"; iproute2 rdma/link.c), the one vocabulary
// ibpath shows port states in. sysfs names them otherwise ("5: LinkUp");
// ibstat too. The rdma tool calls state 4 (PortConfigurationTraining in
// the IB spec) ARMED.
func (s PhysState) String() string {
	names := [...]string{"NOP", "SLEEP", "POLLING", "DISABLED", "ARMED", "LINK_UP", "LINK_ERROR_RECOVER", "PHY_TEST",
		"", "OPA_OFFLINE", "", "OPA_TEST"}
	if int(s) < len(names) && names[s] != "" {
		return names[s]
	}
	return fmt.Sprintf("PhysState(%d)", uint8(s))
}

// LinkLayer mirrors IBV_LINK_LAYER_*.
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0 // IBV_LINK_LAYER_UNSPECIFIED
	LinkLayerInfiniBand  LinkLayer = 1 // IBV_LINK_LAYER_INFINIBAND
	LinkLayerEthernet    LinkLayer = 2 // IBV_LINK_LAYER_ETHERNET
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unspecified"
}

// MTU mirrors enum ibv_mtu.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1 // IBV_MTU_256
	MTU512  MTU = 2 // IBV_MTU_512
	MTU1024 MTU = 3 // IBV_MTU_1024
	MTU2048 MTU = 4 // IBV_MTU_2048
	MTU4096 MTU = 5 // IBV_MTU_4096
)

// Bytes is the MTU in bytes, or 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return fmt.Sprint(b)
	}
	return fmt.Sprintf("MTU(%d)", uint8(m))
}

// Active width encodings (ibv_port_attr.active_width).
const (
	Width1X  uint8 = 1
	Width4X  uint8 = 2
	Width8X  uint8 = 4
	Width12X uint8 = 8
	Width2X  uint8 = 16
)

// Active speed encodings (ibv_port_attr.active_speed).
const (
	SpeedSDR   uint8 = 1   // 2.5 Gb/s per lane
	SpeedDDR   uint8 = 2   // 5 Gb/s
	SpeedQDR   uint8 = 4   // 10 Gb/s
	SpeedFDR10 uint8 = 8   // 10.3125 Gb/s
	SpeedFDR   uint8 = 16  // 14.0625 Gb/s
	SpeedEDR   uint8 = 32  // 25.78125 Gb/s
	SpeedHDR   uint8 = 64  // 53.125 Gb/s
	SpeedNDR   uint8 = 128 // 106.25 Gb/s
)

// LinkGbps is the data rate of a port in Gb/s for an active width and speed
// (lane count times the effective lane rate), or 0 if unknown.
func LinkGbps(width, speed uint8) float64 {
	lanes := map[uint8]float64{Width1X: 1, Width2X: 2, Width4X: 4, Width8X: 8, Width12X: 12}[width]
	lane := map[uint8]float64{SpeedSDR: 2, SpeedDDR: 4, SpeedQDR: 8, SpeedFDR10: 10,
		SpeedFDR: 13.64, SpeedEDR: 25, SpeedHDR: 50, SpeedNDR: 100}[speed]
	return lanes * lane
}

// PortAttr mirrors struct ibv_port_attr.
type PortAttr struct {
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	GIDTblLen    int
	PortCapFlags uint32
	MaxMsgSz     uint32
	PKeyTblLen   uint16
	LID          uint16
	SMLID        uint16
	LMC          uint8
	MaxVLNum     uint8
	SMSL         uint8
	ActiveWidth  uint8
	ActiveSpeed  uint8
	PhysState    PhysState
	LinkLayer    LinkLayer
}

// GID is a 128-bit global identifier (union ibv_gid).
type GID [16]byte

// String renders the GID as an IPv6 address, as rdma-core tools do.
func (g GID) String() string { return net.IP(g[:]).String() }

// IsZero reports whether the GID is all zeroes (an unused table entry).
func (g GID) IsZero() bool { return g == GID{} }

// GlobalRoute mirrors struct ibv_global_route.
type GlobalRoute struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr mirrors struct ibv_ah_attr: the address vector of a path.
type AHAttr struct {
	GRH         GlobalRoute
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	PortNum     uint8
}

// TimeoutDuration is the local ACK timeout encoded by an RC timeout
// attribute: 4.096 us * 2^t, with 0 meaning infinite (returned as 0).
func TimeoutDuration(t uint8) time.Duration {
	if t == 0 || t > 31 {
		return 0
	}
	return time.Duration(4096<<t) * time.Nanosecond
}

// rnrTimerMicros is the IB spec table of min_rnr_timer encodings, in us.
var rnrTimerMicros = [32]int64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480,
	640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960,
	61440, 81920, 122880, 163840, 245760, 327680, 491520}

// RNRTimerDuration is the receiver-not-ready delay encoded by min_rnr_timer.
func RNRTimerDuration(t uint8) time.Duration {
	return time.Duration(rnrTimerMicros[t&31]) * time.Microsecond
}
