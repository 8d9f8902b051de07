package pathsel

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ibpath/ibpath/verbs"
)

// ErrMalformed is wrapped by every error about a sysfs attribute whose
// content is not in the format the kernel writes.
var ErrMalformed = errors.New("malformed sysfs attribute")

// The parsers below take the content of one attribute file of
// drivers/infiniband/core/sysfs.c without its trailing newline. Discovery
// uses them for the real /sys and for fixture trees alike.

func malformed(what, s, why string) error {
	return fmt.Errorf("%w: %s %q: %s", ErrMalformed, what, s, why)
}

// splitNumbered splits "N: name" (state, phys_state, node_type).
func splitNumbered(what, s string) (uint8, string, error) {
	num, name, ok := strings.Cut(s, ": ")
	if !ok {
		return 0, "", malformed(what, s, `want "N: name"`)
	}
	n, err := strconv.ParseUint(num, 10, 8)
	if err != nil {
		return 0, "", malformed(what, s, "number is not 0-255")
	}
	if name == "" {
		return 0, "", malformed(what, s, "empty name")
	}
	return uint8(n), name, nil
}

// parsePortState reads ports/N/state: "4: ACTIVE".
func parsePortState(s string) (verbs.PortState, error) {
	n, name, err := splitNumbered("port state", s)
	if err != nil {
		return 0, err
	}
	st := verbs.PortState(n)
	if st <= verbs.PortActiveDefer && name != st.String() {
		return 0, malformed("port state", s, fmt.Sprintf("state %d is %s", n, st))
	}
	return st, nil
}

// physStateNames are the kernel's names for phys_state values 1-7.
var physStateNames = [...]string{1: "Sleep", 2: "Polling", 3: "Disabled",
	4: "PortConfigurationTraining", 5: "LinkUp", 6: "LinkErrorRecovery", 7: "Phy Test"}

// parsePhysState reads ports/N/phys_state: "5: LinkUp".
func parsePhysState(s string) (verbs.PhysState, error) {
	n, name, err := splitNumbered("phys state", s)
	if err != nil {
		return 0, err
	}
	if n >= 1 && int(n) < len(physStateNames) && name != physStateNames[n] {
		return 0, malformed("phys state", s, fmt.Sprintf("phys state %d is %s", n, physStateNames[n]))
	}
	return verbs.PhysState(n), nil
}

// parseNodeType reads node_type: "1: CA", "4: RNIC". It returns the name.
func parseNodeType(s string) (string, error) {
	_, name, err := splitNumbered("node type", s)
	return name, err
}

// parseLID reads ports/N/lid and ports/N/sm_lid: "0x1a".
func parseLID(s string) (uint16, error) {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok {
		return 0, malformed("LID", s, `want "0x" and hex digits`)
	}
	v, err := strconv.ParseUint(h, 16, 16)
	if err != nil {
		return 0, malformed("LID", s, "not a 16-bit hex number")
	}
	return uint16(v), nil
}

// parseLMC reads ports/N/lid_mask_count: "2". The IB spec allows 0-7.
func parseLMC(s string) (uint8, error) {
	v, err := strconv.ParseUint(s, 10, 8)
	if err != nil || v > 7 {
		return 0, malformed("LMC", s, "want 0-7")
	}
	return uint8(v), nil
}

// parseHexGroups decodes n colon-separated groups of four hex digits.
func parseHexGroups(what, s string, n int) ([]byte, error) {
	if len(s) != 5*n-1 {
		return nil, malformed(what, s, fmt.Sprintf("want %d groups of 4 hex digits", n))
	}
	raw := make([]byte, 0, 4*n)
	for i := 0; i < n; i++ {
		g := s[5*i : 5*i+4]
		if i < n-1 && s[5*i+4] != ':' {
			return nil, malformed(what, s, "groups must be separated by ':'")
		}
		raw = append(raw, g...)
	}
	b := make([]byte, 2*n)
	if _, err := hex.Decode(b, raw); err != nil {
		return nil, malformed(what, s, "not hex")
	}
	return b, nil
}

// parseGID reads ports/N/gids/I: "fe80:0000:0000:0000:0248:caff:fe00:0101"
// (the kernel's %pI6: eight groups of four hex digits).
func parseGID(s string) (verbs.GID, error) {
	b, err := parseHexGroups("GID", s, 8)
	if err != nil {
		return verbs.GID{}, err
	}
	var g verbs.GID
	copy(g[:], b)
	return g, nil
}

// parseNodeGUID reads node_guid: "9803:9b03:0067:4a0c".
func parseNodeGUID(s string) (uint64, error) {
	b, err := parseHexGroups("node GUID", s, 4)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v, nil
}

// parseRate reads ports/N/rate: "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)"
// or, from older kernels, "2.5 Gb/sec (1X)". It returns the rate in Gb/s.
func parseRate(s string) (float64, error) {
	num, rest, ok := strings.Cut(s, " Gb/sec (")
	if !ok || !strings.HasSuffix(rest, ")") {
		return 0, malformed("rate", s, `want "R Gb/sec (WX SPEED)"`)
	}
	whole, half := strings.CutSuffix(num, ".5")
	r, err := strconv.ParseUint(whole, 10, 32)
	if err != nil {
		return 0, malformed("rate", s, "rate is not a number")
	}
	width, speed, _ := strings.Cut(strings.TrimSuffix(rest, ")"), " ")
	w, ok := strings.CutSuffix(width, "X")
	if !ok {
		return 0, malformed("rate", s, "width is not NX")
	}
	if _, err := strconv.ParseUint(w, 10, 8); err != nil {
		return 0, malformed("rate", s, "width is not NX")
	}
	for _, c := range speed {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return 0, malformed("rate", s, "speed is not a name like EDR")
		}
	}
	g := float64(r)
	if half {
		g += 0.5
	}
	return g, nil
}

// parseLinkLayer reads ports/N/link_layer: "InfiniBand", "Ethernet" or
// "Unknown".
func parseLinkLayer(s string) (verbs.LinkLayer, error) {
	switch s {
	case "InfiniBand":
		return verbs.LinkLayerInfiniBand, nil
	case "Ethernet":
		return verbs.LinkLayerEthernet, nil
	case "Unknown":
		return verbs.LinkLayerUnspecified, nil
	}
	return 0, malformed("link layer", s, "want InfiniBand, Ethernet or Unknown")
}

// readAttr returns the content of one sysfs attribute file without its
// trailing newline.
func readAttr(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read attribute: %w", err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// parseAttr reads the attribute at path with parse; errors name the file.
func parseAttr[T any](path string, parse func(string) (T, error)) (T, error) {
	s, err := readAttr(path)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := parse(s)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
