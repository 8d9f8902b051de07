package pathsel

import (
	"fmt"
	"slices"
	"strings"
)

// ChangeKind says what happened to a device or a port between two
// discoveries.
type ChangeKind uint8

// Change kinds.
const (
	DeviceAdded ChangeKind = iota + 1
	DeviceRemoved
	PortAdded
	PortRemoved
	PortChanged
)

func (k ChangeKind) String() string {
	switch k {
	case DeviceAdded:
		return "device-added"
	case DeviceRemoved:
		return "device-removed"
	case PortAdded:
		return "port-added"
	case PortRemoved:
		return "port-removed"
	case PortChanged:
		return "port-changed"
	}
	return fmt.Sprintf("ChangeKind(%d)", uint8(k))
}

// Field is a set of port attributes that changed.
type Field uint16

// Port attributes DiffPorts compares.
const (
	FieldState Field = 1 << iota
	FieldPhysState
	FieldLinkLayer
	FieldLID
	FieldLMC
	FieldSMLID
	FieldRate
	FieldGIDs // an entry, its type or its netdev
)

var fieldNames = [...]string{"state", "phys-state", "link-layer", "lid", "lmc", "sm-lid", "rate", "gids"}

func (f Field) String() string {
	var s []string
	for i, n := range fieldNames {
		if f&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	if rest := f &^ (1<<len(fieldNames) - 1); rest != 0 {
		s = append(s, fmt.Sprintf("Field(%#x)", uint16(rest)))
	}
	return strings.Join(s, ",")
}

// PortChange is one difference between two discoveries.
type PortChange struct {
	Device string
	Port   uint8 // 0 for DeviceAdded and DeviceRemoved
	Kind   ChangeKind
	Fields Field    // PortChanged: the attributes that differ
	Old    PortInfo // zero for DeviceAdded, PortAdded
	New    PortInfo // zero for DeviceRemoved, PortRemoved
}

func (c PortChange) String() string {
	switch c.Kind {
	case DeviceAdded, DeviceRemoved:
		return fmt.Sprintf("%s: %v", c.Device, c.Kind)
	case PortChanged:
		return fmt.Sprintf("%s/%d: %v (%v): %v -> %v", c.Device, c.Port, c.Kind, c.Fields, c.Old.State, c.New.State)
	}
	return fmt.Sprintf("%s/%d: %v", c.Device, c.Port, c.Kind)
}

// DiffPorts compares two discoveries of the same node. Devices are
// matched by name; a device whose node GUID changed under the same name
// was replaced and is reported removed and added. Changes come in device
// name order; an added device is reported before its ports, a removed one
// after them, and ports in number order.
func DiffPorts(before, after []HCAInfo) []PortChange {
	byName := func(hs []HCAInfo) map[string]*HCAInfo {
		m := make(map[string]*HCAInfo, len(hs))
		for i := range hs {
			if _, dup := m[hs[i].Name]; !dup {
				m[hs[i].Name] = &hs[i]
			}
		}
		return m
	}
	olds, news := byName(before), byName(after)
	var names []string
	for n := range olds {
		names = append(names, n)
	}
	for n := range news {
		if olds[n] == nil {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, compareDeviceNames)

	var out []PortChange
	for _, name := range names {
		o, n := olds[name], news[name]
		if o != nil && n != nil && o.NodeGUID != n.NodeGUID {
			out = appendRemoved(out, o)
			out = appendAdded(out, n)
			continue
		}
		switch {
		case o == nil:
			out = appendAdded(out, n)
		case n == nil:
			out = appendRemoved(out, o)
		default:
			out = appendPortDiff(out, o, n)
		}
	}
	return out
}

func appendAdded(out []PortChange, h *HCAInfo) []PortChange {
	out = append(out, PortChange{Device: h.Name, Kind: DeviceAdded})
	for _, p := range h.Ports {
		out = append(out, PortChange{Device: h.Name, Port: p.Num, Kind: PortAdded, New: p})
	}
	return out
}

func appendRemoved(out []PortChange, h *HCAInfo) []PortChange {
	for _, p := range h.Ports {
		out = append(out, PortChange{Device: h.Name, Port: p.Num, Kind: PortRemoved, Old: p})
	}
	return append(out, PortChange{Device: h.Name, Kind: DeviceRemoved})
}

func appendPortDiff(out []PortChange, o, n *HCAInfo) []PortChange {
	nums := map[uint8]bool{}
	for _, p := range o.Ports {
		nums[p.Num] = true
	}
	for _, p := range n.Ports {
		nums[p.Num] = true
	}
	sorted := make([]uint8, 0, len(nums))
	for k := range nums {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	find := func(h *HCAInfo, num uint8) (PortInfo, bool) {
		for _, p := range h.Ports {
			if p.Num == num {
				return p, true
			}
		}
		return PortInfo{}, false
	}
	for _, num := range sorted {
		op, inOld := find(o, num)
		np, inNew := find(n, num)
		switch {
		case !inOld:
			out = append(out, PortChange{Device: n.Name, Port: num, Kind: PortAdded, New: np})
		case !inNew:
			out = append(out, PortChange{Device: o.Name, Port: num, Kind: PortRemoved, Old: op})
		default:
			if f := portFields(op, np); f != 0 {
				out = append(out, PortChange{Device: n.Name, Port: num, Kind: PortChanged, Fields: f, Old: op, New: np})
			}
		}
	}
	return out
}

// portFields is the set of attributes that differ between a and b.
func portFields(a, b PortInfo) Field {
	var f Field
	if a.State != b.State {
		f |= FieldState
	}
	if a.PhysState != b.PhysState {
		f |= FieldPhysState
	}
	if a.LinkLayer != b.LinkLayer {
		f |= FieldLinkLayer
	}
	if a.LID != b.LID {
		f |= FieldLID
	}
	if a.LMC != b.LMC {
		f |= FieldLMC
	}
	if a.SMLID != b.SMLID {
		f |= FieldSMLID
	}
	if a.Rate != b.Rate {
		f |= FieldRate
	}
	if !slices.Equal(a.GIDs, b.GIDs) {
		f |= FieldGIDs
	}
	return f
}
