package pathsel

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/Mellanox/rdmamap"

	"github.com/ibpath/ibpath/verbs"
)

// HCAInfo is what discovery reads of one RDMA device from sysfs.
type HCAInfo struct {
	Name     string
	NodeGUID uint64
	NodeType string // the kernel's name: "CA", "RNIC", "switch", ...
	FW       string // "" when the driver reports none (rdma_rxe)
	// Driver is the kernel driver: the base name of device/driver
	// ("mlx5_core", "mlx4_core", "hfi1"), or "rdma_rxe" for a device with
	// rxe's parent attribute; "" when sysfs names none.
	Driver string
	// APM is whether the device can do Automatic Path Migration, and
	// APMReason why (see apmCapability).
	APM       bool
	APMReason string
	Uverbs    string // "/dev/infiniband/uverbsN", "" if none is registered
	Ports     []PortInfo
}

// PortInfo is what discovery reads of one port.
type PortInfo struct {
	Num       uint8
	State     verbs.PortState
	PhysState verbs.PhysState
	LinkLayer verbs.LinkLayer
	LID       uint16
	LMC       uint8
	SMLID     uint16
	Rate      string  // as sysfs writes it: "100 Gb/sec (4X EDR)"
	RateGbps  float64 // 100
	GIDs      []GIDEntry
	// Netdev is the network device of the port's first GID that has one
	// (RoCE); "" on InfiniBand.
	Netdev string
}

// GIDEntry is one non-zero entry of a port's GID table.
type GIDEntry struct {
	Index  int
	GID    verbs.GID
	Type   string // gid_attrs/types: "IB/RoCE v1", "RoCE v2"; "" if unreadable
	Netdev string // gid_attrs/ndevs: "eth0"; "" on InfiniBand
}

// DiscoverOptions configures Discover.
type DiscoverOptions struct {
	// SysfsRoot is a directory standing in for /sys: fixture trees hold
	// class/infiniband/... under it. "", "/" and "/sys" mean the running
	// system, whose devices are listed with rdmamap.
	SysfsRoot string
}

// Discover lists the RDMA devices of a node and reads their ports. No
// devices at all is not an error: the result is empty. A device that
// cannot be read makes an error naming it and the file; the devices that
// were read are returned with it.
func Discover(opts DiscoverOptions) ([]HCAInfo, error) {
	src, classDir := sourceFor(opts.SysfsRoot)
	names, err := src.devices()
	if err != nil {
		return nil, fmt.Errorf("pathsel: discover: %w", err)
	}
	slices.SortFunc(names, compareDeviceNames)
	hcas := make([]HCAInfo, 0, len(names))
	var errs []error
	for _, name := range names {
		h, err := readHCA(src, filepath.Join(classDir, name), name)
		if err != nil {
			errs = append(errs, fmt.Errorf("pathsel: discover %s: %w", name, err))
			continue
		}
		hcas = append(hcas, h)
	}
	return hcas, errors.Join(errs...)
}

// source lists what rdmamap lists on the running system, and what a
// directory walk lists in a fixture tree. Attribute files are read the same
// way for both.
type source interface {
	devices() ([]string, error)
	ports(dev string) ([]string, error)
	uverbs(dev string) (string, error)
}

func sourceFor(root string) (source, string) {
	if root == "" || filepath.Clean(root) == "/" || filepath.Clean(root) == "/sys" {
		return rdmamapSource{}, rdmamap.RdmaClassDir
	}
	return dirSource{root: root}, filepath.Join(root, "class", "infiniband")
}

// uverbsDev is the prefix rdmamap gives uverbs character devices.
const uverbsDev = "/dev/infiniband/uverbs"

// rdmamapSource lists devices of the running system with rdmamap, which
// reads /sys/class/infiniband (a missing directory is no devices).
type rdmamapSource struct{}

func (rdmamapSource) devices() ([]string, error) { return rdmamap.GetRdmaDeviceList(), nil }

func (rdmamapSource) ports(dev string) ([]string, error) {
	ps := rdmamap.GetPorts(dev)
	if len(ps) == 0 {
		return nil, fmt.Errorf("rdmamap: no ports listed under %s", filepath.Join(rdmamap.RdmaClassDir, dev, rdmamap.RdmaPortsdir))
	}
	return ps, nil
}

func (rdmamapSource) uverbs(dev string) (string, error) {
	for _, c := range rdmamap.GetRdmaCharDevices(dev) {
		if strings.HasPrefix(c, uverbsDev) {
			return c, nil
		}
	}
	return "", nil
}

// dirSource lists devices of a tree laid out like /sys.
type dirSource struct{ root string }

func (s dirSource) devices() ([]string, error) {
	dir := filepath.Join(s.root, "class", "infiniband")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	var names []string
	for _, e := range ents {
		// In /sys the entries are symlinks to the device directories.
		if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && fi.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (s dirSource) ports(dev string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.root, "class", "infiniband", dev, "ports"))
	if err != nil {
		return nil, fmt.Errorf("list ports: %w", err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (s dirSource) uverbs(dev string) (string, error) {
	dir := filepath.Join(s.root, "class", "infiniband_verbs")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("list uverbs devices: %w", err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue
		}
		ibdev, err := readAttr(filepath.Join(dir, e.Name(), "ibdev"))
		if err != nil {
			return "", err
		}
		if ibdev == dev {
			return "/dev/infiniband/" + e.Name(), nil
		}
	}
	return "", nil
}

// readHCA reads the device whose sysfs directory is dir.
func readHCA(src source, dir, name string) (HCAInfo, error) {
	h := HCAInfo{Name: name}
	var err error
	if h.NodeGUID, err = parseAttr(filepath.Join(dir, "node_guid"), parseNodeGUID); err != nil {
		return h, err
	}
	if h.NodeType, err = parseAttr(filepath.Join(dir, "node_type"), parseNodeType); err != nil {
		return h, err
	}
	if h.FW, err = optionalAttr(filepath.Join(dir, "fw_ver")); err != nil {
		return h, err
	}
	if h.Driver, err = readDriver(dir); err != nil {
		return h, err
	}
	if h.Uverbs, err = src.uverbs(name); err != nil {
		return h, err
	}
	portNames, err := src.ports(name)
	if err != nil {
		return h, err
	}
	for _, pn := range portNames {
		n, err := parsePortDir(dir, pn)
		if err != nil {
			return h, err
		}
		p, err := readPort(filepath.Join(dir, "ports", pn), n)
		if err != nil {
			return h, err
		}
		h.Ports = append(h.Ports, p)
	}
	slices.SortFunc(h.Ports, func(a, b PortInfo) int { return cmp.Compare(a.Num, b.Num) })
	h.APM, h.APMReason = apmCapability(h)
	return h, nil
}

// readPort reads the port whose sysfs directory is dir: the run-time
// attributes ReadPortStates also reads, then the link layer and the GID
// table.
func readPort(dir string, num uint8) (PortInfo, error) {
	p := PortInfo{Num: num}
	rt, err := readPortRuntime(dir, num)
	if err != nil {
		return p, err
	}
	p.State, p.PhysState, p.LID, p.LMC, p.SMLID, p.Rate = rt.State, rt.PhysState, rt.LID, rt.LMC, rt.SMLID, rt.Rate
	if p.RateGbps, err = parseRate(p.Rate); err != nil {
		return p, fmt.Errorf("%s: %w", filepath.Join(dir, "rate"), err)
	}
	if p.LinkLayer, err = parseAttr(filepath.Join(dir, "link_layer"), parseLinkLayer); err != nil {
		return p, err
	}
	if p.GIDs, err = readGIDs(dir); err != nil {
		return p, err
	}
	for _, g := range p.GIDs {
		if g.Netdev != "" {
			p.Netdev = g.Netdev
			break
		}
	}
	return p, nil
}

// readGIDs reads the non-zero entries of a port's GID table in index
// order, with their type and network device where the kernel has them.
func readGIDs(portDir string) ([]GIDEntry, error) {
	dir := filepath.Join(portDir, "gids")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list GIDs: %w", err)
	}
	idx := make([]int, 0, len(ents))
	for _, e := range ents {
		i, err := strconv.ParseUint(e.Name(), 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: GID file %q is not an index", dir, ErrMalformed, e.Name())
		}
		idx = append(idx, int(i))
	}
	slices.Sort(idx)
	var gids []GIDEntry
	for _, i := range idx {
		name := strconv.Itoa(i)
		g, err := parseAttr(filepath.Join(dir, name), parseGID)
		if err != nil {
			return nil, err
		}
		if g.IsZero() {
			continue
		}
		e := GIDEntry{Index: i, GID: g}
		attrs := filepath.Join(portDir, "gid_attrs")
		if e.Type, err = optionalAttr(filepath.Join(attrs, "types", name)); err != nil {
			return nil, err
		}
		if e.Netdev, err = optionalAttr(filepath.Join(attrs, "ndevs", name)); err != nil {
			return nil, err
		}
		gids = append(gids, e)
	}
	return gids, nil
}

// optionalAttr reads an attribute that may be absent: older kernels lack
// gid_attrs, and the kernel fails the read of gid_attrs/ndevs/I with
// EINVAL when the entry has no network device (InfiniBand).
func optionalAttr(path string) (string, error) {
	s, err := readAttr(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) {
		return "", nil
	}
	return s, err
}

// compareDeviceNames orders "mlx5_2" before "mlx5_10": the same prefix
// compares by its numeric suffix, so the order follows the kernel's
// numbering (rail order on a rail-optimised node).
func compareDeviceNames(a, b string) int {
	pa, na := splitDigits(a)
	pb, nb := splitDigits(b)
	if c := cmp.Compare(pa, pb); c != 0 {
		return c
	}
	if na >= 0 && nb >= 0 {
		if c := cmp.Compare(na, nb); c != 0 {
			return c
		}
	}
	return cmp.Compare(a, b)
}

func splitDigits(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return s, -1
	}
	return s[:i], n
}

// HCA is the description path choice uses. Its GID table is indexed like
// the device's: entries discovery skipped as zero are zero again.
func (h HCAInfo) HCA() HCA {
	d := HCA{Name: h.Name, GUID: h.NodeGUID, APM: h.APM}
	for _, p := range h.Ports {
		d.Ports = append(d.Ports, p.Port())
	}
	return d
}

// Port is the description path choice uses.
func (p PortInfo) Port() Port {
	q := Port{Num: p.Num, State: p.State, LinkLayer: p.LinkLayer, LID: p.LID, LMC: p.LMC}
	if n := len(p.GIDs); n > 0 {
		q.GIDs = make([]verbs.GID, p.GIDs[n-1].Index+1)
		for _, g := range p.GIDs {
			q.GIDs[g.Index] = g.GID
		}
	}
	return q
}
