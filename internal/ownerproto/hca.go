package ownerproto

import (
	"fmt"

	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// HCA is an adapter description (pathsel.HCA) as the protocol carries
// it, the answer to lookup_hca: what layer 1 needs of the adapter at the
// other end of a path to choose an alternate. Port states and link layers
// are the libibverbs numbers (IBV_PORT_ACTIVE is 4, InfiniBand is 1);
// GIDs[i] is GID table index i.
type HCA struct {
	Name  string    `json:"name"`
	GUID  uint64    `json:"guid,omitempty"`
	APM   bool      `json:"apm,omitempty"`
	Ports []HCAPort `json:"ports"`
}

// HCAPort is one port of an HCA.
type HCAPort struct {
	Num       uint8           `json:"num"`
	State     verbs.PortState `json:"state"`
	LinkLayer verbs.LinkLayer `json:"link_layer"`
	LID       uint16          `json:"lid,omitempty"`
	LMC       uint8           `json:"lmc,omitempty"`
	GIDs      []verbs.GID     `json:"gids,omitempty"`
}

// HCAFrom renders a description for the protocol.
func HCAFrom(h pathsel.HCA) HCA {
	out := HCA{Name: h.Name, GUID: h.GUID, APM: h.APM, Ports: make([]HCAPort, 0, len(h.Ports))}
	for _, p := range h.Ports {
		out.Ports = append(out.Ports, HCAPort{Num: p.Num, State: p.State, LinkLayer: p.LinkLayer, LID: p.LID, LMC: p.LMC,
			GIDs: append([]verbs.GID(nil), p.GIDs...)})
	}
	return out
}

// Pathsel is the description path choice takes.
func (h HCA) Pathsel() pathsel.HCA {
	out := pathsel.HCA{Name: h.Name, GUID: h.GUID, APM: h.APM}
	for _, p := range h.Ports {
		out.Ports = append(out.Ports, pathsel.Port{Num: p.Num, State: p.State, LinkLayer: p.LinkLayer, LID: p.LID, LMC: p.LMC,
			GIDs: append([]verbs.GID(nil), p.GIDs...)})
	}
	return out
}

// maxLMC is the largest LMC InfiniBand allows (128 LIDs per port).
const maxLMC = 7

func (h HCA) validate() error {
	if h.Name == "" {
		return fmt.Errorf("an adapter needs a name")
	}
	seen := map[uint8]bool{}
	for _, p := range h.Ports {
		switch {
		case p.Num == 0:
			return fmt.Errorf("adapter %s: port number 0", h.Name)
		case seen[p.Num]:
			return fmt.Errorf("adapter %s: port %d twice", h.Name, p.Num)
		case p.LMC > maxLMC:
			return fmt.Errorf("adapter %s port %d: LMC %d (at most %d)", h.Name, p.Num, p.LMC, maxLMC)
		}
		seen[p.Num] = true
	}
	return nil
}
