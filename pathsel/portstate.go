package pathsel

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/ibpath/ibpath/verbs"
)

// The port poll of ibpathd runs every second. Discover reads everything,
// including every entry of every port's GID table (rdma_rxe has 1024 GID
// files per port, and gid_attrs/types and gid_attrs/ndevs beside each
// non-zero one): thousands of open/read/close calls a poll. ReadPortStates
// is the light read a poll can make instead: the devices, their node GUIDs
// and ports, and the few port attributes that change at run time, never a
// file under gids/ or gid_attrs/. PortStatesDiffer tells whether that read
// differs from the last full inventory; when it does, the caller runs
// Discover and diffs the two full inventories with DiffPorts as before.
// A GID table follows the network configuration (RoCE GIDs are the port's
// IP addresses), which the light read does not see: a caller must still
// run Discover now and then.

// PortRuntime is what changes on a port while it is registered: its
// logical and physical state, its LID and LMC (assigned by the subnet
// manager), the subnet manager's LID (SM failover) and the rate the link
// trained to.
type PortRuntime struct {
	Num       uint8
	State     verbs.PortState
	PhysState verbs.PhysState
	LID       uint16
	LMC       uint8
	SMLID     uint16
	Rate      string // as sysfs writes it: "100 Gb/sec (4X EDR)"
}

// DevicePorts is what ReadPortStates reads of one device. The node GUID
// (one file) tells a device replaced under the same name, which DiffPorts
// reports as removed and added.
type DevicePorts struct {
	Name     string
	NodeGUID uint64
	Ports    []PortRuntime // in port number order
}

// Runtime is the part of p that ReadPortStates reads.
func (p PortInfo) Runtime() PortRuntime {
	return PortRuntime{Num: p.Num, State: p.State, PhysState: p.PhysState, LID: p.LID, LMC: p.LMC, SMLID: p.SMLID, Rate: p.Rate}
}

// ReadPortStates lists the devices of the running system or of a fixture
// tree like Discover (same options, same device and port listing) and
// reads of each only node_guid and, of each port, state, phys_state, lid,
// lid_mask_count, sm_lid and rate: six small files a port and one a
// device, whatever the size of the GID tables. The attributes are parsed
// as Discover parses them, so an unchanged port compares equal. Errors
// name the device and the file like Discover's; the devices that were read
// are returned with them.
func ReadPortStates(opts DiscoverOptions) ([]DevicePorts, error) {
	src, classDir := sourceFor(opts.SysfsRoot)
	names, err := src.devices()
	if err != nil {
		return nil, fmt.Errorf("pathsel: read port states: %w", err)
	}
	slices.SortFunc(names, compareDeviceNames)
	out := make([]DevicePorts, 0, len(names))
	var errs []error
	for _, name := range names {
		d, err := readDevicePorts(src, filepath.Join(classDir, name), name)
		if err != nil {
			errs = append(errs, fmt.Errorf("pathsel: read port states %s: %w", name, err))
			continue
		}
		out = append(out, d)
	}
	return out, errors.Join(errs...)
}

func readDevicePorts(src source, dir, name string) (DevicePorts, error) {
	d := DevicePorts{Name: name}
	var err error
	if d.NodeGUID, err = parseAttr(filepath.Join(dir, "node_guid"), parseNodeGUID); err != nil {
		return d, err
	}
	portNames, err := src.ports(name)
	if err != nil {
		return d, err
	}
	for _, pn := range portNames {
		n, err := parsePortDir(dir, pn)
		if err != nil {
			return d, err
		}
		p, err := readPortRuntime(filepath.Join(dir, "ports", pn), n)
		if err != nil {
			return d, err
		}
		d.Ports = append(d.Ports, p)
	}
	slices.SortFunc(d.Ports, func(a, b PortRuntime) int { return cmp.Compare(a.Num, b.Num) })
	return d, nil
}

// parsePortDir reads the name of a directory under the device's ports/.
func parsePortDir(devDir, pn string) (uint8, error) {
	n, err := strconv.ParseUint(pn, 10, 8)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s: %w: port directory %q is not a port number 1-255", filepath.Join(devDir, "ports"), ErrMalformed, pn)
	}
	return uint8(n), nil
}

// readPortRuntime reads the run-time attributes of the port whose sysfs
// directory is dir. Discover's readPort reads them with it.
func readPortRuntime(dir string, num uint8) (PortRuntime, error) {
	p := PortRuntime{Num: num}
	var err error
	if p.State, err = parseAttr(filepath.Join(dir, "state"), parsePortState); err != nil {
		return p, err
	}
	if p.PhysState, err = parseAttr(filepath.Join(dir, "phys_state"), parsePhysState); err != nil {
		return p, err
	}
	if p.LID, err = parseAttr(filepath.Join(dir, "lid"), parseLID); err != nil {
		return p, err
	}
	if p.LMC, err = parseAttr(filepath.Join(dir, "lid_mask_count"), parseLMC); err != nil {
		return p, err
	}
	if p.SMLID, err = parseAttr(filepath.Join(dir, "sm_lid"), parseLID); err != nil {
		return p, err
	}
	// Parsed, not only read, so that the light read fails where Discover
	// would.
	if p.Rate, err = parseAttr(filepath.Join(dir, "rate"), func(s string) (string, error) {
		_, err := parseRate(s)
		return s, err
	}); err != nil {
		return p, err
	}
	return p, nil
}

// PortStatesDiffer reports whether a light read differs from inv, a full
// inventory from Discover: a device added or removed, a device whose node
// GUID changed, a port added or removed, or a port whose run-time
// attributes (PortRuntime) changed. Devices are matched by name and ports
// by number, whatever their order. When it reports false, Discover would
// find the same devices and ports with the same run-time attributes;
// DiffPorts could then only differ in what ReadPortStates does not read
// (GIDs, link layer, firmware, driver, uverbs device).
func PortStatesDiffer(inv []HCAInfo, light []DevicePorts) bool {
	if len(inv) != len(light) {
		return true
	}
	byName := make(map[string]*HCAInfo, len(inv))
	for i := range inv {
		byName[inv[i].Name] = &inv[i]
	}
	if len(byName) != len(inv) {
		return true // duplicate names: not a Discover result
	}
	for _, d := range light {
		h := byName[d.Name]
		delete(byName, d.Name) // a name twice in light is then unmatched
		if h == nil || h.NodeGUID != d.NodeGUID || len(h.Ports) != len(d.Ports) {
			return true
		}
		for _, p := range d.Ports {
			i := slices.IndexFunc(h.Ports, func(q PortInfo) bool { return q.Num == p.Num })
			if i < 0 || h.Ports[i].Runtime() != p {
				return true
			}
		}
	}
	return false
}
