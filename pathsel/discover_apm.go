package pathsel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ibpath/ibpath/verbs"
)

// Kernel drivers of InfiniBand HCAs that implement Automatic Path
// Migration (they set IBV_DEVICE_AUTO_PATH_MIG).
var apmDrivers = map[string]bool{
	"mlx5_core": true, // ConnectX-4 and later
	"mlx4_core": true, // ConnectX-3
	"ib_mthca":  true, // InfiniHost
	"ib_qib":    true, // QLogic
	"hfi1":      true, // Omni-Path
}

// Soft RDMA drivers: they run on an Ethernet NIC and have no APM.
var softDrivers = map[string]bool{"rdma_rxe": true, "siw": true}

// readDriver names the kernel driver of the device whose sysfs directory is
// dir. rdma_rxe devices have a "parent" attribute (the netdev they run on);
// their device link, if any, leads to the NIC's driver, so the attribute
// is looked at first. Otherwise the driver is the target of device/driver.
func readDriver(dir string) (string, error) {
	_, err := os.Stat(filepath.Join(dir, "parent"))
	if err == nil {
		return "rdma_rxe", nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("stat rxe parent: %w", err)
	}
	link, err := os.Readlink(filepath.Join(dir, "device", "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("driver link: %w", err)
	}
	return filepath.Base(link), nil
}

// apmCapability decides whether a device can do APM. The real answer is
// IBV_DEVICE_AUTO_PATH_MIG in ibv_query_device's device_cap_flags, which
// sysfs does not show; until verbs/ibv queries the device, discovery
// decides by driver and link layer:
//
//   - rdma_rxe and siw (soft RoCE, soft iWARP): no;
//   - an iWARP device (node type RNIC): no;
//   - any port that is not InfiniBand (RoCE): no;
//   - an InfiniBand port on a driver known to implement APM: yes;
//   - anything else: no, with the driver named in the reason.
func apmCapability(h HCAInfo) (bool, string) {
	if softDrivers[h.Driver] {
		return false, fmt.Sprintf("%s is soft RDMA over Ethernet: no APM", h.Driver)
	}
	if h.NodeType == "RNIC" {
		return false, "iWARP (RNIC) has no APM"
	}
	if len(h.Ports) == 0 {
		return false, "no ports"
	}
	for _, p := range h.Ports {
		switch p.LinkLayer {
		case verbs.LinkLayerInfiniBand:
		case verbs.LinkLayerEthernet:
			return false, fmt.Sprintf("port %d is Ethernet: RoCE has no APM", p.Num)
		default:
			return false, fmt.Sprintf("port %d link layer is %v, not InfiniBand: no APM", p.Num, p.LinkLayer)
		}
	}
	if h.Driver == "" {
		return false, "driver unknown (no device/driver link): APM not assumed"
	}
	if !apmDrivers[h.Driver] {
		return false, fmt.Sprintf("driver %s not known to implement APM", h.Driver)
	}
	return true, fmt.Sprintf("%s InfiniBand HCA", h.Driver)
}
