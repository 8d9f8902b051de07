package daemon

import (
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// A QP's owner reports its paths as device, port, path bits and GID
// index; the rest of what a status path shows (source LID or GID, the
// port's state) is this node's, read from the port poll's inventory when
// the status is rendered, so every path of every owner says the same of
// one port, and what an owner claims of a port is not shown.

// pathPort is what a path shows of the port it leaves from.
type pathPort struct {
	state string
	lid   uint16
	roce  bool
	gids  map[uint8]string // by table index (RoCE)
}

type portRef struct {
	dev string
	num uint8
}

// pathPorts indexes the inventory's ports for fillPath.
func pathPorts(inv []pathsel.HCAInfo) map[portRef]pathPort {
	out := map[portRef]pathPort{}
	for _, h := range inv {
		for _, p := range h.Ports {
			pp := pathPort{state: p.State.String(), lid: p.LID, roce: p.LinkLayer == verbs.LinkLayerEthernet}
			if pp.roce {
				pp.gids = map[uint8]string{}
				for _, g := range p.GIDs {
					if g.Index >= 0 && g.Index <= 0xff {
						pp.gids[uint8(g.Index)] = g.GID.String()
					}
				}
			}
			out[portRef{h.Name, p.Num}] = pp
		}
	}
	return out
}

// pathPorts indexes the port poll's last inventory for fillPath.
func (d *Daemon) pathPorts() map[portRef]pathPort {
	d.invMu.Lock()
	defer d.invMu.Unlock()
	return pathPorts(d.inv)
}

// fillPath sets p's source LID (InfiniBand: the port's LID plus the path
// bits) or GID (RoCE: the port's entry GIDIndex) and its port's state; a
// port this node does not have leaves them empty.
func fillPath(ports map[portRef]pathPort, p *status.Path) {
	p.LID, p.GID, p.PortState = 0, "", ""
	pp, ok := ports[portRef{p.Device, p.Port}]
	if p.Port == 0 || !ok {
		return
	}
	p.PortState = pp.state
	switch {
	case pp.roce:
		p.GID = pp.gids[p.GIDIndex]
	case pp.lid != 0:
		p.LID = pp.lid + uint16(p.PathBits)
	}
}

// fillPaths fills the paths of q (a copy: the owner's own record is not
// touched).
func fillPaths(ports map[portRef]pathPort, q *status.QP) {
	fillPath(ports, &q.Primary)
	fillPath(ports, &q.Alternate)
	fillPath(ports, &q.Home)
}
