package pathsel

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// DiscoverContext reads an open device through verbs into the HCAInfo
// Discover reads from sysfs: for devices with no sysfs of their own (the
// simulated fabric). Its driver is "sim"; its APM capability is the
// device's IBV_DEVICE_AUTO_PATH_MIG flag.
func DiscoverContext(name string, c verbs.Context) (HCAInfo, error) {
	da, err := c.QueryDevice()
	if err != nil {
		return HCAInfo{}, fmt.Errorf("ibv_query_device %s: %w", name, err)
	}
	h := HCAInfo{Name: name, NodeGUID: da.NodeGUID, NodeType: "CA", FW: da.FWVer, Driver: "sim",
		APM: da.DeviceCapFlags&verbs.DeviceAutoPathMig != 0}
	if !h.APM {
		h.APMReason = "the device does not report IBV_DEVICE_AUTO_PATH_MIG"
	}
	for p := uint8(1); p <= da.PhysPortCnt; p++ {
		pa, err := c.QueryPort(p)
		if err != nil {
			return h, fmt.Errorf("ibv_query_port %s/%d: %w", name, p, err)
		}
		pi := PortInfo{Num: p, State: pa.State, PhysState: pa.PhysState, LinkLayer: pa.LinkLayer,
			LID: pa.LID, LMC: pa.LMC, SMLID: pa.SMLID, Rate: rateOf(pa.ActiveWidth, pa.ActiveSpeed)}
		for i := 0; i < pa.GIDTblLen && i < 4; i++ {
			g, err := c.QueryGID(p, i)
			if err != nil || g.IsZero() {
				continue
			}
			pi.GIDs = append(pi.GIDs, GIDEntry{Index: i, GID: g})
		}
		h.Ports = append(h.Ports, pi)
	}
	return h, nil
}

// rate renders an IB active width and speed as the kernel's sysfs rate
// file does ("100 Gb/sec (4X EDR)"), with nominal per-lane rates.
func rateOf(width, speed uint8) string {
	lanes := map[uint8]int{1: 1, 2: 4, 4: 8, 8: 12, 16: 2}[width]
	perLane := map[uint8]float64{1: 2.5, 2: 5, 4: 10, 8: 10, 16: 14, 32: 25, 64: 50, 128: 100}[speed]
	name := map[uint8]string{1: "SDR", 2: "DDR", 4: "QDR", 8: "FDR10", 16: "FDR", 32: "EDR", 64: "HDR", 128: "NDR"}[speed]
	if lanes == 0 || name == "" {
		return ""
	}
	return fmt.Sprintf("%g Gb/sec (%dX %s)", perLane*float64(lanes), lanes, name)
}
