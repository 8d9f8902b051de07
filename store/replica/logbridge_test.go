package replica

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/ratelimit"
)

// TestRefusalsByHostAndRateLimited: one sender's flood of refused
// packets counts as one refused peer (and every packet as refused
// traffic), and logs at most refusalLines lines a second; a second
// sender counts as a second peer.
func TestRefusalsByHostAndRateLimited(t *testing.T) {
	var out bytes.Buffer
	var c counters
	b := &logBridge{log: slog.New(slog.NewTextHandler(&out, nil)), refused: c.refusedBy, lines: ratelimit.Lines{Max: refusalLines}}
	for i := range 1000 {
		fmt.Fprintf(b, "2026/11/28 07:00:00 [ERR] memberlist: failed to receive: No installed keys could decrypt the message from=10.0.0.9:%d\n", 40000+i)
	}
	fmt.Fprintf(b, "[ERR] memberlist: Decrypt packet failed: bad key from=10.0.0.10:7946\n")
	s := c.snapshot()
	if s.PeersRefused != 2 || s.RefusedTraffic != 1001 {
		t.Fatalf("peers refused %d, refused traffic %d; want 2 and 1001", s.PeersRefused, s.RefusedTraffic)
	}
	if n := strings.Count(out.String(), "peer refused"); n > 2*refusalLines {
		t.Fatalf("%d lines logged for 1001 refusals in well under two seconds", n)
	}
	if h := peerHost("failed to join: no installed keys"); h != "unknown" {
		t.Fatalf("a line without an address: host %q", h)
	}
}
