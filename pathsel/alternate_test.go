package pathsel

import (
	"errors"
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

func gid(b byte) verbs.GID { var g verbs.GID; g[0], g[1], g[15] = 0xfe, 0x80, b; return g }

// dual builds a dual-port IB HCA whose port n has LID base+(n-1)*4, LMC lmc.
func dual(name string, base uint16, lmc uint8, states ...verbs.PortState) HCA {
	h := HCA{Name: name, APM: true}
	for i, s := range states {
		n := uint8(i + 1)
		h.Ports = append(h.Ports, Port{Num: n, State: s, LinkLayer: verbs.LinkLayerInfiniBand,
			LID: base + uint16(i)*4, LMC: lmc, GIDs: []verbs.GID{gid(byte(base) + n), gid(byte(base) + n + 100)}})
	}
	return h
}

const up, down = verbs.PortActive, verbs.PortDown

func primary(peer HCA, port uint8) Path {
	pp, _ := peer.Port(port)
	return Path{Port: port, PKeyIndex: 0, Timeout: 14,
		AH: verbs.AHAttr{DLID: pp.LID, SL: 3, StaticRate: 7, PortNum: port}}
}

func TestChoose(t *testing.T) {
	cases := []struct {
		name     string
		local    HCA
		peer     HCA
		port     uint8
		policy   Policy
		prefer   *Ref
		wantPort uint8
		wantBits uint8
		wantKind Kind
		wantErr  error
	}{
		{"other port first", dual("a", 8, 1, up, up), dual("b", 32, 1, up, up), 1, DefaultPolicy, nil, 2, 0, OtherPort, nil},
		{"lmc first by policy", dual("a", 8, 1, up, up), dual("b", 32, 1, up, up), 1, Policy{LMC, OtherPort}, nil, 1, 1, LMC, nil},
		{"local other port down: lmc", dual("a", 8, 1, up, down), dual("b", 32, 1, up, up), 1, DefaultPolicy, nil, 1, 1, LMC, nil},
		{"peer other port down: lmc", dual("a", 8, 1, up, up), dual("b", 32, 1, up, down), 1, DefaultPolicy, nil, 1, 1, LMC, nil},
		{"no lmc, other port down", dual("a", 8, 0, up, down), dual("b", 32, 0, up, up), 1, DefaultPolicy, nil, 0, 0, 0, ErrNoAlternate},
		{"primary port down: other port only", dual("a", 8, 1, down, up), dual("b", 32, 1, up, up), 1, DefaultPolicy, nil, 2, 0, OtherPort, nil},
		{"primary down, no other: none", dual("a", 8, 1, down, down), dual("b", 32, 1, up, up), 1, DefaultPolicy, nil, 0, 0, 0, ErrNoAlternate},
		{"prefer home over policy", dual("a", 8, 1, up, up), dual("b", 32, 1, up, up), 2, Policy{LMC, OtherPort}, &Ref{Port: 1}, 1, 0, OtherPort, nil},
		{"prefer unusable: policy", dual("a", 8, 1, down, up), dual("b", 32, 1, up, up), 2, DefaultPolicy, &Ref{Port: 1}, 2, 1, LMC, nil},
		{"single port lmc only", dual("a", 8, 2, up), dual("b", 32, 2, up), 1, DefaultPolicy, nil, 1, 1, LMC, nil},
		{"other-port only policy", dual("a", 8, 1, up, down), dual("b", 32, 1, up, up), 1, Policy{OtherPort}, nil, 0, 0, 0, ErrNoAlternate},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cur := primary(c.peer, c.port)
			a, err := Choose(c.local, c.peer, cur, c.prefer, c.policy)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Port != c.wantPort || a.Bits() != c.wantBits || a.Kind != c.wantKind {
				t.Fatalf("chose port %d bits %d (%v), want port %d bits %d (%v)", a.Port, a.Bits(), a.Kind, c.wantPort, c.wantBits, c.wantKind)
			}
			pp, _ := c.peer.Port(c.wantPort)
			if c.wantKind == LMC {
				pp, _ = c.peer.PortByLID(cur.AH.DLID)
			}
			if a.AH.DLID != pp.LID+uint16(c.wantBits) || a.AH.PortNum != c.wantPort {
				t.Fatalf("DLID %d port_num %d, want %d / %d", a.AH.DLID, a.AH.PortNum, pp.LID+uint16(c.wantBits), c.wantPort)
			}
			if a.AH.SL != 3 || a.AH.StaticRate != 7 || a.Timeout != 14 || a.PKeyIndex != 0 {
				t.Fatalf("path attributes not carried: %+v", a)
			}
		})
	}
}

func TestChooseCarriesGlobalRoute(t *testing.T) {
	local, peer := dual("a", 8, 0, up, up), dual("b", 32, 0, up, up)
	p1, _ := peer.Port(1)
	cur := Path{Port: 1, Timeout: 12, AH: verbs.AHAttr{DLID: p1.LID, IsGlobal: true,
		GRH: verbs.GlobalRoute{DGID: p1.GIDs[1], SGIDIndex: 1, HopLimit: 9, TrafficClass: 5, FlowLabel: 77}}}
	a, err := Choose(local, peer, cur, nil, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := peer.Port(2)
	g := a.AH.GRH
	if !a.AH.IsGlobal || g.DGID != p2.GIDs[1] || g.SGIDIndex != 1 || g.HopLimit != 9 || g.TrafficClass != 5 || g.FlowLabel != 77 {
		t.Fatalf("global route not carried to the peer's port 2 GID at index 1: %+v", a.AH)
	}
}

func TestSupport(t *testing.T) {
	roce := dual("rxe0", 0, 0, up)
	roce.Ports[0].LinkLayer = verbs.LinkLayerEthernet
	if err := Support(roce, 1); !errors.Is(err, ErrNoAPM) {
		t.Fatalf("RoCE: %v", err)
	}
	noCap := dual("x", 8, 0, up, up)
	noCap.APM = false
	if err := Support(noCap, 1); !errors.Is(err, ErrNoAPM) {
		t.Fatalf("no AUTO_PATH_MIG: %v", err)
	}
	if err := Support(dual("y", 8, 0, up), 3); !errors.Is(err, ErrNoAPM) {
		t.Fatalf("bad port: %v", err)
	}
	if err := Support(dual("z", 8, 0, up, up), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := Choose(roce, roce, Path{Port: 1}, nil, DefaultPolicy); !errors.Is(err, ErrNoAPM) {
		t.Fatalf("Choose on RoCE: %v", err)
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy("lmc, other-port")
	if err != nil || len(p) != 2 || p[0] != LMC || p[1] != OtherPort || p.String() != "lmc,other-port" {
		t.Fatalf("ParsePolicy = %v, %v", p, err)
	}
	for _, bad := range []string{"", "lmc,lmc", "spine"} {
		if _, err := ParsePolicy(bad); err == nil {
			t.Errorf("ParsePolicy(%q) accepted", bad)
		}
	}
}

func TestUsable(t *testing.T) {
	local, peer := dual("a", 8, 1, up, up), dual("b", 32, 1, up, up)
	cur := primary(peer, 2)
	if !Usable(local, peer, cur, Ref{Port: 1}, DefaultPolicy) {
		t.Fatal("home on port 1 is usable")
	}
	peer.Ports[0].State = down
	if Usable(local, peer, cur, Ref{Port: 1}, DefaultPolicy) {
		t.Fatal("home through the peer's down port 1 must not be usable")
	}
}
