package pathsel

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ibpath/ibpath/verbs"
)

// Kind is a way of finding an alternate path.
type Kind uint8

// Alternate path kinds.
const (
	// OtherPort: the other port of a dual-port HCA, to the peer's port
	// with the same number (the same plane of the fabric).
	OtherPort Kind = iota + 1
	// LMC: the same ports, another LID of the LMC range (other source path
	// bits and DLID), which the subnet manager routes another way.
	LMC
)

func (k Kind) String() string {
	switch k {
	case OtherPort:
		return "other-port"
	case LMC:
		return "lmc"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Policy is the order in which kinds are tried.
type Policy []Kind

// DefaultPolicy tries the other port first: it survives a cable or port
// failure, which an LMC path on the same port does not.
var DefaultPolicy = Policy{OtherPort, LMC}

// ParsePolicy reads a comma-separated list such as "other-port,lmc".
func ParsePolicy(s string) (Policy, error) {
	var p Policy
	seen := map[Kind]bool{}
	for _, f := range strings.Split(s, ",") {
		var k Kind
		switch strings.TrimSpace(f) {
		case "other-port":
			k = OtherPort
		case "lmc":
			k = LMC
		default:
			return nil, fmt.Errorf("pathsel: policy %q: unknown kind %q (want other-port or lmc)", s, f)
		}
		if seen[k] {
			return nil, fmt.Errorf("pathsel: policy %q: %v twice", s, k)
		}
		seen[k] = true
		p = append(p, k)
	}
	return p, nil
}

func (p Policy) String() string {
	s := make([]string, len(p))
	for i, k := range p {
		s[i] = k.String()
	}
	return strings.Join(s, ",")
}

// Errors of path choice.
var (
	// ErrNoAPM: APM cannot work for this QP at all (RoCE link layer, or a
	// device without IBV_DEVICE_AUTO_PATH_MIG).
	ErrNoAPM = errors.New("pathsel: APM not possible")
	// ErrNoAlternate: no healthy alternate path exists now.
	ErrNoAlternate = errors.New("pathsel: no healthy alternate path")
)

// Path is a QP path as ibv_modify_qp takes it.
type Path struct {
	Port      uint8
	AH        verbs.AHAttr
	PKeyIndex uint16
	Timeout   uint8
}

// Bits are the LMC path bits of the path.
func (p Path) Bits() uint8 { return p.AH.SrcPathBits }

// Alternate is a chosen alternate path and the kind that found it.
type Alternate struct {
	Path
	Kind Kind
}

// Ref names a path by local port and path bits.
type Ref struct {
	Port uint8
	Bits uint8
}

// Support reports why APM cannot protect a QP on port of local, or nil.
func Support(local HCA, port uint8) error {
	p, ok := local.Port(port)
	if !ok {
		return fmt.Errorf("%w: %s has no port %d", ErrNoAPM, local.Name, port)
	}
	if p.LinkLayer != verbs.LinkLayerInfiniBand {
		return fmt.Errorf("%w: %s port %d is %v; alternate paths exist only on InfiniBand", ErrNoAPM, local.Name, port, p.LinkLayer)
	}
	if !local.APM {
		return fmt.Errorf("%w: %s lacks IBV_DEVICE_AUTO_PATH_MIG", ErrNoAPM, local.Name)
	}
	return nil
}

// Choose picks the alternate for a QP whose primary path is cur, from
// local to peer. prefer, when set, is tried first (the home path, for
// failback). Kinds are tried in policy order; a path whose local or peer
// port is not ACTIVE is never chosen. The alternate carries the primary's
// SL, static rate, P_Key index, timeout and global route (with the peer
// port's GID at the same table index).
func Choose(local, peer HCA, cur Path, prefer *Ref, policy Policy) (Alternate, error) {
	if err := Support(local, cur.Port); err != nil {
		return Alternate{}, err
	}
	peerCur, gidIdx, err := peerPort(peer, cur.AH)
	if err != nil {
		return Alternate{}, err
	}
	var cands []Alternate
	for _, k := range policy {
		cands = append(cands, candidates(local, peer, cur, peerCur, gidIdx, k)...)
	}
	if prefer != nil {
		for _, c := range cands {
			if c.Port == prefer.Port && c.Bits() == prefer.Bits {
				return c, nil
			}
		}
	}
	if len(cands) == 0 {
		return Alternate{}, fmt.Errorf("%w from %s port %d (policy %v)", ErrNoAlternate, local.Name, cur.Port, policy)
	}
	return cands[0], nil
}

// Usable reports whether the path named by ref would be chosen as an
// alternate now (both its ports ACTIVE and its path bits in range).
func Usable(local, peer HCA, cur Path, ref Ref, policy Policy) bool {
	a, err := Choose(local, peer, cur, &ref, policy)
	return err == nil && a.Port == ref.Port && a.Bits() == ref.Bits
}

// peerPort finds the peer port the primary path leads to, and the index of
// the DGID in its table when the route is global.
func peerPort(peer HCA, ah verbs.AHAttr) (Port, int, error) {
	if ah.IsGlobal {
		if p, i, ok := peer.PortByGID(ah.GRH.DGID); ok {
			return p, i, nil
		}
	}
	if p, ok := peer.PortByLID(ah.DLID); ok {
		return p, 0, nil
	}
	return Port{}, 0, fmt.Errorf("%w: the primary path's destination (DLID %d) is not a port of peer %s", ErrNoAlternate, ah.DLID, peer.Name)
}

// candidates lists the usable alternates of one kind, best first.
func candidates(local, peer HCA, cur Path, peerCur Port, gidIdx int, k Kind) []Alternate {
	lcur, _ := local.Port(cur.Port)
	var out []Alternate
	switch k {
	case OtherPort:
		for _, lp := range local.Ports {
			if lp.Num == cur.Port || !lp.Active() || lp.LinkLayer != verbs.LinkLayerInfiniBand {
				continue
			}
			pp, ok := peer.Port(lp.Num)
			if !ok || pp.Num == peerCur.Num || !pp.Active() {
				continue
			}
			out = append(out, build(cur, lp, pp, 0, gidIdx, k))
		}
	case LMC:
		n := min(uint8(1)<<lcur.LMC, uint8(1)<<peerCur.LMC)
		if !lcur.Active() || !peerCur.Active() || n < 2 {
			return nil
		}
		for b := uint8(0); b < n; b++ {
			if b != cur.Bits() {
				out = append(out, build(cur, lcur, peerCur, b, gidIdx, k))
			}
		}
	}
	return out
}

func build(cur Path, lp, pp Port, bits uint8, gidIdx int, k Kind) Alternate {
	ah := cur.AH
	ah.PortNum = lp.Num
	ah.SrcPathBits = bits
	ah.DLID = pp.LID + uint16(bits)
	if ah.IsGlobal && gidIdx < len(pp.GIDs) {
		ah.GRH.DGID = pp.GIDs[gidIdx]
	}
	return Alternate{Path: Path{Port: lp.Num, AH: ah, PKeyIndex: cur.PKeyIndex, Timeout: cur.Timeout}, Kind: k}
}
