package verbs

import (
	"fmt"
	"net"
)

// ParseGID parses a GID written as an IPv6 address ("fe80::248:caff:fe00:101",
// or the sysfs form with every group written out). An IPv4 address is taken
// as its IPv4-mapped GID (::ffff:a.b.c.d), the RoCE v2 GID of that address.
func ParseGID(s string) (GID, error) {
	ip := net.ParseIP(s)
	if ip == nil {
		return GID{}, fmt.Errorf("parse GID %q: not an IPv6 or IPv4 address", s)
	}
	var g GID
	copy(g[:], ip.To16())
	return g, nil
}

// MarshalText renders the GID as String does, so JSON carries "fe80::1"
// rather than sixteen numbers.
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText parses what MarshalText wrote (and any ParseGID form).
func (g *GID) UnmarshalText(b []byte) error {
	v, err := ParseGID(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}
