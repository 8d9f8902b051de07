package pathsel

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// Port is what path choice needs to know of one HCA port.
type Port struct {
	Num       uint8
	State     verbs.PortState
	LinkLayer verbs.LinkLayer
	LID       uint16
	LMC       uint8
	GIDs      []verbs.GID
}

// Active reports whether the port can carry traffic.
func (p Port) Active() bool { return p.State == verbs.PortActive }

// HasLID reports whether lid is in the port's LMC range.
func (p Port) HasLID(lid uint16) bool {
	return p.LID != 0 && lid >= p.LID && uint32(lid) < uint32(p.LID)+1<<p.LMC
}

// HCA describes an adapter: its name, whether it can do APM, and its ports.
type HCA struct {
	Name  string
	GUID  uint64
	APM   bool // IBV_DEVICE_AUTO_PATH_MIG
	Ports []Port
}

// Port returns port n.
func (h HCA) Port(n uint8) (Port, bool) {
	for _, p := range h.Ports {
		if p.Num == n {
			return p, true
		}
	}
	return Port{}, false
}

// PortByLID returns the port whose LMC range holds lid.
func (h HCA) PortByLID(lid uint16) (Port, bool) {
	for _, p := range h.Ports {
		if p.HasLID(lid) {
			return p, true
		}
	}
	return Port{}, false
}

// PortByGID returns the port whose GID table holds g, and the GID's index.
func (h HCA) PortByGID(g verbs.GID) (Port, int, bool) {
	for _, p := range h.Ports {
		for i, x := range p.GIDs {
			if x == g {
				return p, i, true
			}
		}
	}
	return Port{}, 0, false
}

// Describe reads an adapter's description through an open context.
func Describe(ctx verbs.Context) (HCA, error) {
	da, err := ctx.QueryDevice()
	if err != nil {
		return HCA{}, fmt.Errorf("pathsel: describe %s: %w", ctx.Device().Name, err)
	}
	h := HCA{Name: ctx.Device().Name, GUID: ctx.Device().GUID, APM: da.DeviceCapFlags&verbs.DeviceAutoPathMig != 0}
	for n := uint8(1); n <= da.PhysPortCnt; n++ {
		pa, err := ctx.QueryPort(n)
		if err != nil {
			return HCA{}, fmt.Errorf("pathsel: describe %s port %d: %w", h.Name, n, err)
		}
		p := Port{Num: n, State: pa.State, LinkLayer: pa.LinkLayer, LID: pa.LID, LMC: pa.LMC}
		// The populated entries come first (GIDs[i] is index i); a real
		// table (rxe: 1024 entries) is mostly empty after them.
		for i := 0; i < pa.GIDTblLen; i++ {
			g, err := ctx.QueryGID(n, i)
			if err != nil {
				return HCA{}, fmt.Errorf("pathsel: describe %s port %d gid %d: %w", h.Name, n, i, err)
			}
			if g.IsZero() {
				break
			}
			p.GIDs = append(p.GIDs, g)
		}
		h.Ports = append(h.Ports, p)
	}
	return h, nil
}
