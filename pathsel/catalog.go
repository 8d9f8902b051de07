package pathsel

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// Catalog resolves the destination of a path (a DLID or a DGID) to a
// description of the adapter behind it. Each entry describes one adapter
// on demand, so port states are current when the description is asked for.
// The replicated store will provide the same lookup across nodes.
type Catalog struct {
	describers []func() (HCA, error)
}

// Add registers a function that describes one adapter.
func (c *Catalog) Add(describe func() (HCA, error)) { c.describers = append(c.describers, describe) }

// Peer returns the adapter that owns the destination of ah: its DGID when
// the route is global, else its DLID.
func (c *Catalog) Peer(ah verbs.AHAttr) (HCA, error) {
	for _, d := range c.describers {
		h, err := d()
		if err != nil {
			continue // a dead adapter cannot be the destination of a new path
		}
		if ah.IsGlobal {
			if _, _, ok := h.PortByGID(ah.GRH.DGID); ok {
				return h, nil
			}
			continue
		}
		if _, ok := h.PortByLID(ah.DLID); ok {
			return h, nil
		}
	}
	if ah.IsGlobal {
		return HCA{}, fmt.Errorf("pathsel: no known adapter owns GID %v", ah.GRH.DGID)
	}
	return HCA{}, fmt.Errorf("pathsel: no known adapter owns LID %d", ah.DLID)
}
