package pathsel

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

func TestParsePortState(t *testing.T) {
	good := map[string]verbs.PortState{"1: DOWN": verbs.PortDown, "2: INIT": verbs.PortInit, "3: ARMED": verbs.PortArmed,
		"4: ACTIVE": verbs.PortActive, "5: ACTIVE_DEFER": verbs.PortActiveDefer, "0: NOP": verbs.PortNOP, "9: UNKNOWN": 9}
	for s, want := range good {
		if got, err := parsePortState(s); err != nil || got != want {
			t.Errorf("parsePortState(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "ACTIVE", "4:ACTIVE", "4: DOWN", "4: ", "x: ACTIVE", "256: UNKNOWN", "-1: DOWN", "4: ACTIVE\n", " 4: ACTIVE"} {
		if _, err := parsePortState(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("parsePortState(%q) error %v, want ErrMalformed", s, err)
		}
	}
}

func TestParsePhysState(t *testing.T) {
	good := map[string]verbs.PhysState{"5: LinkUp": verbs.PhysLinkUp, "2: Polling": verbs.PhysPolling,
		"3: Disabled": verbs.PhysDisabled, "7: Phy Test": verbs.PhysPhyTest, "0: <unknown>": 0, "9: <unknown>": 9}
	for s, want := range good {
		if got, err := parsePhysState(s); err != nil || got != want {
			t.Errorf("parsePhysState(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "LinkUp", "5: Polling", "5:LinkUp"} {
		if _, err := parsePhysState(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("parsePhysState(%q) error %v, want ErrMalformed", s, err)
		}
	}
	// sysfs's names are read, the rdma tool's are shown
	for s, want := range map[string]string{"5: LinkUp": "LINK_UP", "3: Disabled": "DISABLED", "2: Polling": "POLLING",
		"4: PortConfigurationTraining": "ARMED", "6: LinkErrorRecovery": "LINK_ERROR_RECOVER"} {
		if got, err := parsePhysState(s); err != nil || got.String() != want {
			t.Errorf("parsePhysState(%q) shows as %q (%v), want %q", s, got, err, want)
		}
	}
}

func TestParseNumbers(t *testing.T) {
	lids := map[string]uint16{"0x0": 0, "0x1a": 26, "0xffff": 0xffff, "0xC000": 0xc000}
	for s, want := range lids {
		if got, err := parseLID(s); err != nil || got != want {
			t.Errorf("parseLID(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "26", "0x", "0x10000", "0x-1", "0x+1", "0x1g", "0X1a"} {
		if _, err := parseLID(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("parseLID(%q) error %v, want ErrMalformed", s, err)
		}
	}
	for s, want := range map[string]uint8{"0": 0, "2": 2, "7": 7} {
		if got, err := parseLMC(s); err != nil || got != want {
			t.Errorf("parseLMC(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "8", "-1", "0x1", "2 "} {
		if _, err := parseLMC(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("parseLMC(%q) error %v, want ErrMalformed", s, err)
		}
	}
	if g, err := parseNodeGUID("b8ce:f603:00a1:b2c0"); err != nil || g != 0xb8cef60300a1b2c0 {
		t.Errorf("parseNodeGUID = %#x, %v", g, err)
	}
	for _, s := range []string{"", "b8ce:f603:00a1", "b8cef60300a1b2c0", "b8ce:f603:00a1:b2cg", "b8ce-f603-00a1-b2c0"} {
		if _, err := parseNodeGUID(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("parseNodeGUID(%q) error %v, want ErrMalformed", s, err)
		}
	}
	for s, want := range map[string]string{"1: CA": "CA", "4: RNIC": "RNIC", "6: usNIC UDP": "usNIC UDP"} {
		if got, err := parseNodeType(s); err != nil || got != want {
			t.Errorf("parseNodeType(%q) = %q, %v", s, got, err)
		}
	}
}

func TestParseGID(t *testing.T) {
	good := map[string]string{
		"fe80:0000:0000:0000:0248:caff:fe00:0101": "fe80::248:caff:fe00:101",
		"0000:0000:0000:0000:0000:ffff:c0a8:7a0b": "192.168.122.11",
		"0000:0000:0000:0000:0000:0000:0000:0000": "::",
	}
	for s, want := range good {
		g, err := parseGID(s)
		if err != nil || g.String() != want {
			t.Errorf("parseGID(%q) = %v, %v; want %s", s, g, err, want)
		}
	}
	for _, s := range []string{"", "fe80::1", "192.168.1.1", "fe80:0000:0000:0000:0248:caff:fe00", "fe80:0000:0000:0000:0248:caff:fe00:010g",
		"fe80-0000-0000-0000-0248-caff-fe00-0101", "fe80:0000:0000:0000:0248:caff:fe00:0101:"} {
		if _, err := parseGID(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("parseGID(%q) error %v, want ErrMalformed", s, err)
		}
	}
}

func TestParseRate(t *testing.T) {
	good := map[string]float64{"100 Gb/sec (4X EDR)": 100, "2.5 Gb/sec (1X SDR)": 2.5, "2.5 Gb/sec (1X)": 2.5,
		"56 Gb/sec (4X FDR)": 56, "200 Gb/sec (4X HDR)": 200, "400 Gb/sec (4X NDR)": 400, "40 Gb/sec (4X FDR10)": 40}
	for s, want := range good {
		if got, err := parseRate(s); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "100", "100 Gb/sec", "100 Gb/sec (4 EDR)", "100 Gb/sec (4X edr)", "x Gb/sec (4X EDR)",
		"2.7 Gb/sec (1X SDR)", "100 Gb/sec (X EDR)", "100 Gb/sec (4X EDR", "-1 Gb/sec (4X EDR)"} {
		if _, err := parseRate(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("parseRate(%q) error %v, want ErrMalformed", s, err)
		}
	}
}

func TestParseLinkLayer(t *testing.T) {
	for s, want := range map[string]verbs.LinkLayer{"InfiniBand": verbs.LinkLayerInfiniBand,
		"Ethernet": verbs.LinkLayerEthernet, "Unknown": verbs.LinkLayerUnspecified} {
		if got, err := parseLinkLayer(s); err != nil || got != want {
			t.Errorf("parseLinkLayer(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := parseLinkLayer("IB"); !errors.Is(err, ErrMalformed) {
		t.Errorf("parseLinkLayer(IB) error %v", err)
	}
}

func FuzzParsePortState(f *testing.F) {
	for _, s := range []string{"4: ACTIVE", "1: DOWN", "5: ACTIVE_DEFER", "9: UNKNOWN", "4:", ": ", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := parsePortState(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if st <= verbs.PortActiveDefer && s != fmt.Sprintf("%d: %v", st, st) {
			t.Fatalf("%q parsed as %v", s, st)
		}
		if _, err := parsePhysState(s); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatal(err)
		}
	})
}

func FuzzParseLID(f *testing.F) {
	for _, s := range []string{"0x0", "0x1a", "0xffff", "0x10000", "0x", "26"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseLID(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if back, err := parseLID(fmt.Sprintf("0x%x", v)); err != nil || back != v {
			t.Fatalf("%q = %d does not survive the kernel's format: %d, %v", s, v, back, err)
		}
	})
}

func FuzzParseGID(f *testing.F) {
	for _, s := range []string{"fe80:0000:0000:0000:0248:caff:fe00:0101", "0000:0000:0000:0000:0000:ffff:c0a8:7a0b", "fe80::1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := parseGID(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		var b strings.Builder
		for i := 0; i < 16; i += 2 {
			if i > 0 {
				b.WriteByte(':')
			}
			fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
		}
		if b.String() != strings.ToLower(s) {
			t.Fatalf("%q parsed as %s", s, b.String())
		}
	})
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)", "2.5 Gb/sec (1X)", "12.5 Gb/sec (", " Gb/sec ()"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseRate(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if r < 0 || math.IsInf(r, 0) || math.IsNaN(r) || math.Mod(r*2, 1) != 0 {
			t.Fatalf("%q parsed as rate %v", s, r)
		}
	})
}
