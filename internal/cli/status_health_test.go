package cli

import (
	"testing"

	"github.com/ibpath/ibpath/internal/status"
)

// TestHealthCell: the ports table's HEALTH column: never judged, counters
// unreadable, the state, out of service, and congestion from one sign a
// second on.
func TestHealthCell(t *testing.T) {
	for _, c := range []struct {
		h    *status.PortHealth
		want string
	}{
		{nil, "-"},
		{&status.PortHealth{State: status.HealthOK, Error: "open counters: permission denied"}, "counters unreadable"},
		{&status.PortHealth{State: status.HealthOK, CongestionPerSecond: 0.5}, "ok"},
		{&status.PortHealth{State: status.HealthOK, CongestionPerSecond: 812.4}, "ok, congested 812/s"},
		{&status.PortHealth{State: status.HealthDegraded, OutOfService: true}, "degraded, out of service"},
		{&status.PortHealth{State: status.HealthRecovering, OutOfService: true, CongestionPerSecond: 3}, "recovering, out of service, congested 3/s"},
	} {
		if got := health(c.h); got != c.want {
			t.Errorf("health(%+v) = %q, want %q", c.h, got, c.want)
		}
	}
}
