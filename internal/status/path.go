package status

import "fmt"

// Path is one path of a QP as seen from its own end: the port it leaves
// from and its source address there. The process that owns the QP
// reports Device, Port, PathBits and GIDIndex; ibpathd fills LID, GID
// and PortState from its view of the node's ports when it renders the
// status (they are empty when the port is not one ibpathd knows).
type Path struct {
	Device string `json:"device"`
	Port   uint8  `json:"port"`
	// PathBits are the path's source path bits (ibv_ah_attr.src_path_bits):
	// with an LMC, the paths of one port differ by them.
	PathBits uint8 `json:"path_bits"`
	// GIDIndex is the source GID's index in the port's GID table
	// (ibv_global_route.sgid_index); it names the GID on RoCE.
	GIDIndex uint8 `json:"gid_index,omitempty"`
	// LID is the path's source LID on InfiniBand: the port's LID plus
	// PathBits; 0 on RoCE.
	LID uint16 `json:"lid,omitempty"`
	// GID is the path's source GID on RoCE (entry GIDIndex of the port's
	// table); empty on InfiniBand, whose paths are told apart by LID.
	GID string `json:"gid,omitempty"`
	// PortState is the state of the port the path leaves from (Port.State).
	PortState string `json:"port_state,omitempty"`
}

// String names the path as the tables show it: "port 1", or "port 1+2"
// for path bits 2; "-" for no path.
func (p Path) String() string {
	switch {
	case p.Port == 0:
		return "-"
	case p.PathBits == 0:
		return fmt.Sprintf("port %d", p.Port)
	}
	return fmt.Sprintf("port %d+%d", p.Port, p.PathBits)
}

// Remote is the other end of a connected QP.
type Remote struct {
	LID uint16 `json:"lid,omitempty"` // its LID (InfiniBand, a route without a GRH)
	GID string `json:"gid,omitempty"` // its GID (RoCE, or a global route)
	QPN uint32 `json:"qpn"`
}

// String names the other end: "lid 33 qpn 0x1e2" or "fe80::1 qpn 0x1e2";
// "-" for none.
func (r Remote) String() string {
	switch {
	case r == Remote{}:
		return "-"
	case r.GID != "":
		return fmt.Sprintf("%s qpn %#x", r.GID, r.QPN)
	}
	return fmt.Sprintf("lid %d qpn %#x", r.LID, r.QPN)
}

// Backup is the QP that layer 2 fails a QP over to, on another HCA.
type Backup struct {
	Device string `json:"device"`
	QPN    uint32 `json:"qpn"`
	// Connected: the backup QP is connected to the peer's backup, ready
	// to carry the traffic.
	Connected bool `json:"connected"`
}

// String names the backup QP: "mlx5_1 0x1c3", with " (connecting)" until
// it is connected; "-" for none.
func (b Backup) String() string {
	if b.Device == "" {
		return "-"
	}
	s := fmt.Sprintf("%s %#x", b.Device, b.QPN)
	if !b.Connected {
		s += " (connecting)"
	}
	return s
}

// QPState is a QP's layer-1 state and primary path at one moment: what an
// action (arm, migrate) found and what it left.
type QPState struct {
	APM     string `json:"apm,omitempty"` // as QP.APM; empty when not known (the state a dry run would reach)
	Primary Path   `json:"primary,omitzero"`
}

// String is the state and path as one phrase: "armed port 1"; "-" for
// nothing known.
func (s QPState) String() string {
	switch {
	case s.APM == "":
		return s.Primary.String()
	case s.Primary.Port == 0:
		return s.APM
	}
	return s.APM + " " + s.Primary.String()
}
