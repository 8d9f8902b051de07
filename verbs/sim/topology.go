package sim

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// Host is one server: a set of HCAs sharing one memory. A Host is a
// verbs.Provider.
type Host struct {
	fab     *Fabric
	name    string
	index   int
	hcas    []*HCA
	regions []memRegion
	allocs  [][]byte       // from PD.AllocMem, not freed yet (Config.StrictMem)
	dmabufs map[int][]byte // ExportDmabuf's descriptors
}

// HCA is one adapter with one or two ports.
type HCA struct {
	host      *Host
	name      string
	index     int
	guid      uint64
	linkLayer verbs.LinkLayer
	apm       bool
	implicit  bool // takes implicit on-demand-paging registrations
	ports     []*Port
	alive     bool
	gen       uint32        // incarnation: bumped when the HCA dies
	diedAt    time.Duration // when it last died (-1: never)
	contexts  []*Context
	qps       map[uint32]*QP
	qpList    []*QP
	nextQPN   uint32
	mrs       map[uint32]*MR
	nextKey   uint32
	// cqeDelay: how long a completion takes to reach the CQ after the
	// HCA made it (SetCQEDelay); one still on its way when the HCA dies
	// is lost.
	cqeDelay time.Duration
}

// Port is one HCA port, cabled to a leaf switch.
type Port struct {
	hca       *HCA
	num       uint8
	guid      uint64
	leaf      *Switch
	cable     bool // the cable is plugged and not pulled
	state     verbs.PortState
	phys      verbs.PhysState
	lid       uint16
	lmc       uint8
	gids      []verbs.GID
	width     uint8
	speed     uint8
	gbps      float64
	reqLoss   float64
	respLoss  float64
	delay     time.Duration // SetDelay: extra latency drawn in [0, delay] per packet
	mark      float64       // SetCongestion: probability a packet delivered to the port is marked CE
	busyUntil time.Duration
	// waiters are the QPs with requests to send while the port was busy,
	// served one message each, round robin, as it frees (arbitrate.go);
	// wakeAt is when the next serving is scheduled (0: none).
	waiters []*QP
	wakeAt  time.Duration
	downAt  time.Duration // when the link last went down (-1: never)
	cnt     portCounters  // the port's counters (counters.go)
	upGen   uint32        // bumped on every link change, to cancel a stale activation
}

// Switch is a leaf (ports are cabled to it) or a spine (joins leaves).
type Switch struct {
	fab   *Fabric
	name  string
	alive bool
	spine bool
	ports []*Port
}

// HCASpec describes an adapter to add to a host.
type HCASpec struct {
	Name      string          // device name, e.g. "mlx5_0"
	Ports     int             // 1 or 2
	LinkLayer verbs.LinkLayer // InfiniBand (default) or Ethernet (RoCE)
	LMC       uint8           // LID mask control for IB ports (0..7)
	NoAPM     bool            // clear IBV_DEVICE_AUTO_PATH_MIG
	// NoImplicitODP: the device refuses implicit on-demand-paging
	// registrations (no IBV_ODP_SUPPORT_IMPLICIT, as rdma_rxe), EINVAL.
	NoImplicitODP bool
	Width         uint8 // active width (default 4x)
	Speed         uint8 // active speed (default EDR)
}

func spineName(i int) string { return fmt.Sprintf("spine%d", i) }

// Name returns the host name.
func (h *Host) Name() string { return h.name }

// Fabric returns the fabric the host belongs to.
func (h *Host) Fabric() *Fabric { return h.fab }

// HCAs returns the host's adapters in the order they were added.
func (h *Host) HCAs() []*HCA { return append([]*HCA(nil), h.hcas...) }

// HCA returns the adapter with the given device name, or nil.
func (h *Host) HCA(name string) *HCA {
	for _, a := range h.hcas {
		if a.name == name {
			return a
		}
	}
	return nil
}

// Name returns the device name.
func (a *HCA) Name() string { return a.name }

// Host returns the host the HCA sits in.
func (a *HCA) Host() *Host { return a.host }

// Port returns port n (1-based), or nil.
func (a *HCA) Port(n uint8) *Port {
	if n < 1 || int(n) > len(a.ports) {
		return nil
	}
	return a.ports[n-1]
}

// Alive reports whether the HCA is working.
func (a *HCA) Alive() bool {
	a.host.fab.mu.Lock()
	defer a.host.fab.mu.Unlock()
	return a.alive
}

// HCA returns the adapter the port belongs to.
func (p *Port) HCA() *HCA { return p.hca }

// Num returns the port number.
func (p *Port) Num() uint8 { return p.num }

// LID returns the port's base LID (0 on RoCE).
func (p *Port) LID() uint16 {
	p.hca.host.fab.mu.Lock()
	defer p.hca.host.fab.mu.Unlock()
	return p.lid
}

// GID returns entry i of the port's GID table, or a zero GID.
func (p *Port) GID(i int) verbs.GID {
	p.hca.host.fab.mu.Lock()
	defer p.hca.host.fab.mu.Unlock()
	if i < 0 || i >= len(p.gids) {
		return verbs.GID{}
	}
	return p.gids[i]
}

// State returns the logical port state.
func (p *Port) State() verbs.PortState {
	p.hca.host.fab.mu.Lock()
	defer p.hca.host.fab.mu.Unlock()
	return p.state
}

// Leaf returns the switch the port is cabled to.
func (p *Port) Leaf() *Switch { return p.leaf }

func (p *Port) String() string { return fmt.Sprintf("%s/%s:%d", p.hca.host.name, p.hca.name, p.num) }

// Name returns the switch name.
func (s *Switch) Name() string { return s.name }

// AddHost adds a host.
func (f *Fabric) AddHost(name string) (*Host, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name == "" {
		return nil, fmt.Errorf("sim: add host: empty name")
	}
	for _, h := range f.hosts {
		if h.name == name {
			return nil, fmt.Errorf("sim: add host %q: already exists", name)
		}
	}
	h := &Host{fab: f, name: name, index: len(f.hosts)}
	f.hosts = append(f.hosts, h)
	return h, nil
}

// AddLeaf adds a leaf switch.
func (f *Fabric) AddLeaf(name string) (*Switch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name == "" {
		return nil, fmt.Errorf("sim: add leaf: empty name")
	}
	for _, s := range f.leaves {
		if s.name == name {
			return nil, fmt.Errorf("sim: add leaf %q: already exists", name)
		}
	}
	s := &Switch{fab: f, name: name, alive: true}
	f.leaves = append(f.leaves, s)
	return s, nil
}

// Leaf returns the leaf switch with the given name, or nil.
func (f *Fabric) Leaf(name string) *Switch {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.leaves {
		if s.name == name {
			return s
		}
	}
	return nil
}

// Spine returns spine switch i, or nil.
func (f *Fabric) Spine(i int) *Switch {
	if i < 0 || i >= len(f.spines) {
		return nil
	}
	return f.spines[i]
}

// AddHCA adds an adapter to the host. Its ports stay DOWN until cabled.
func (h *Host) AddHCA(spec HCASpec) (*HCA, error) {
	f := h.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	if spec.Name == "" {
		return nil, fmt.Errorf("sim: add HCA to %s: empty name", h.name)
	}
	if h.HCA(spec.Name) != nil {
		return nil, fmt.Errorf("sim: add HCA %s to %s: already exists", spec.Name, h.name)
	}
	if spec.Ports < 1 || spec.Ports > 2 {
		return nil, fmt.Errorf("sim: add HCA %s: %d ports (want 1 or 2)", spec.Name, spec.Ports)
	}
	if spec.LMC > 7 {
		return nil, fmt.Errorf("sim: add HCA %s: LMC %d (want 0..7)", spec.Name, spec.LMC)
	}
	ll := spec.LinkLayer
	if ll == verbs.LinkLayerUnspecified {
		ll = verbs.LinkLayerInfiniBand
	}
	if ll == verbs.LinkLayerEthernet && spec.LMC != 0 {
		return nil, fmt.Errorf("sim: add HCA %s: LMC on an Ethernet link layer", spec.Name)
	}
	width, speed := spec.Width, spec.Speed
	if width == 0 {
		width = verbs.Width4X
	}
	if speed == 0 {
		speed = verbs.SpeedEDR
	}
	gbps := verbs.LinkGbps(width, speed)
	if gbps == 0 {
		return nil, fmt.Errorf("sim: add HCA %s: unknown width %d / speed %d", spec.Name, width, speed)
	}
	a := &HCA{
		host: h, name: spec.Name, index: len(h.hcas), linkLayer: ll, apm: !spec.NoAPM, implicit: !spec.NoImplicitODP,
		alive: true, diedAt: -1, qps: map[uint32]*QP{}, nextQPN: 0x100, mrs: map[uint32]*MR{}, nextKey: 1,
	}
	a.guid = 0x0002c90300000000 | uint64(h.index)<<16 | uint64(a.index)<<8
	for i := 1; i <= spec.Ports; i++ {
		p := &Port{hca: a, num: uint8(i), guid: a.guid + uint64(i), lmc: spec.LMC,
			width: width, speed: speed, gbps: gbps, state: verbs.PortDown, phys: verbs.PhysPolling, downAt: -1}
		p.gids = portGIDs(p)
		a.ports = append(a.ports, p)
	}
	h.hcas = append(h.hcas, a)
	return a, nil
}

// portGIDs builds a port's GID table: the link-local GID from the port GUID
// and, on Ethernet, a RoCEv2 IPv4-mapped GID 10.<hca>.<host>.<port>.
func portGIDs(p *Port) []verbs.GID {
	var ll verbs.GID
	ll[0], ll[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(ll[8:], p.guid)
	if p.hca.linkLayer != verbs.LinkLayerEthernet {
		return []verbs.GID{ll}
	}
	var v4 verbs.GID
	v4[10], v4[11] = 0xff, 0xff
	v4[12], v4[13], v4[14], v4[15] = 10, byte(p.hca.index), byte(p.hca.host.index), p.num
	return []verbs.GID{ll, v4}
}

// Cable plugs port p into leaf switch s. At build time the port comes up
// ACTIVE at once with its LIDs assigned, as after the subnet manager's first
// sweep; no events are raised.
func (f *Fabric) Cable(p *Port, s *Switch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == nil || s == nil {
		return fmt.Errorf("sim: cable: nil port or switch")
	}
	if s.spine {
		return fmt.Errorf("sim: cable %v: %s is a spine; ports are cabled to leaves", p, s.name)
	}
	if p.leaf != nil {
		return fmt.Errorf("sim: cable %v: already cabled to %s", p, p.leaf.name)
	}
	p.leaf = s
	s.ports = append(s.ports, p)
	p.cable = true
	if p.hca.linkLayer == verbs.LinkLayerInfiniBand {
		step := uint16(1) << p.lmc
		base := (f.nextLID + step - 1) &^ (step - 1)
		if int(base)+int(step) > 0xbfff {
			return fmt.Errorf("sim: cable %v: unicast LID space exhausted", p)
		}
		f.nextLID = base + step
		p.lid = base
		for i := uint16(0); i < step; i++ {
			f.lids[base+i] = p
		}
	}
	for _, g := range p.gids {
		f.gids[g] = p
	}
	if p.hca.alive && s.alive {
		p.state, p.phys = verbs.PortActive, verbs.PhysLinkUp
	}
	return nil
}

// RailSpec describes a rail-optimized cluster: HCA i of every host is on
// rail i; port n of those HCAs is cabled to leaf "rail<i>-p<n>", and all
// leaves are joined by the spines.
type RailSpec struct {
	Config      Config
	Hosts       int
	HCAsPerHost int
	PortsPerHCA int
	LMC         uint8
	LinkLayer   verbs.LinkLayer
	NoAPM       bool
	// NoImplicitODP: no HCA takes implicit on-demand-paging
	// registrations (HCASpec.NoImplicitODP).
	NoImplicitODP bool
}

// NewRailFabric builds a rail-optimized fabric. Hosts are named node0,
// node1, ...; HCAs mlx5_0, mlx5_1, ... (rxe0, rxe1, ... on Ethernet).
func NewRailFabric(spec RailSpec) (*Fabric, error) {
	if spec.Hosts < 1 || spec.HCAsPerHost < 1 {
		return nil, fmt.Errorf("sim: rail fabric: need at least one host and one HCA per host, got %d x %d", spec.Hosts, spec.HCAsPerHost)
	}
	if spec.PortsPerHCA == 0 {
		spec.PortsPerHCA = 1
	}
	f := New(spec.Config)
	prefix := "mlx5_"
	if spec.LinkLayer == verbs.LinkLayerEthernet {
		prefix = "rxe"
	}
	leaves := map[string]*Switch{}
	for r := 0; r < spec.HCAsPerHost; r++ {
		for p := 1; p <= spec.PortsPerHCA; p++ {
			name := fmt.Sprintf("rail%d-p%d", r, p)
			s, err := f.AddLeaf(name)
			if err != nil {
				return nil, err
			}
			leaves[name] = s
		}
	}
	for i := 0; i < spec.Hosts; i++ {
		h, err := f.AddHost(fmt.Sprintf("node%d", i))
		if err != nil {
			return nil, err
		}
		for r := 0; r < spec.HCAsPerHost; r++ {
			a, err := h.AddHCA(HCASpec{Name: fmt.Sprintf("%s%d", prefix, r), Ports: spec.PortsPerHCA,
				LinkLayer: spec.LinkLayer, LMC: spec.LMC, NoAPM: spec.NoAPM, NoImplicitODP: spec.NoImplicitODP})
			if err != nil {
				return nil, err
			}
			for p := 1; p <= spec.PortsPerHCA; p++ {
				if err := f.Cable(a.Port(uint8(p)), leaves[fmt.Sprintf("rail%d-p%d", r, p)]); err != nil {
					return nil, err
				}
			}
		}
	}
	return f, nil
}
