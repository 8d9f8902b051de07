package pathsel

import (
	"strings"
	"testing"
	"time"
)

// TestHealthMonitorRule: link errors or retransmissions over the window
// degrade a port at the poll that sees them reach the threshold; it is
// healthy again only after Clear without a break below half of them.
func TestHealthMonitorRule(t *testing.T) {
	m, err := NewHealthMonitor[string](HealthConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var c PortCounters
	at := time.Duration(0)
	poll := func(le, re, pkts uint64) (PortHealth, bool) {
		at += time.Second
		c.LinkErrors += le
		c.SeqErrors += re
		c.XmitPkts += pkts
		return m.Observe("p", at, c)
	}
	// A busy healthy link: 10,000 packets a second, a retransmission
	// every other second (0.005 %), one link error a minute.
	for i := range 120 {
		le := uint64(0)
		if i%60 == 59 {
			le = 1
		}
		if h, _ := poll(le, uint64(i%2), 10000); h.Degraded {
			t.Fatalf("healthy link degraded at %v: %+v", at, h)
		}
	}
	// 2 % lost from now on: 200 retransmissions a second. The window's
	// ratio reaches 1 % after half of it.
	start := at
	var h PortHealth
	changed := false
	for !changed && at < start+time.Minute {
		h, changed = poll(0, 200, 10000)
	}
	if !h.Degraded || !strings.Contains(h.Why, "sequence errors") || h.Since != at || at-start != 5*time.Second {
		t.Fatalf("2 %% loss: %+v after %v; want degraded after 5 s", h, at-start)
	}
	lossEnd := at
	// The loss stops: the window still holds it for 10 s, then it must be
	// calm for 30 s.
	var healthyAt time.Duration
	for range 60 {
		h, changed = poll(0, 0, 10000)
		if changed {
			healthyAt = at
			break
		}
	}
	if h.Degraded || healthyAt == 0 {
		t.Fatalf("still degraded a minute after the loss stopped: %+v", h)
	}
	// The window is calm (below half) a few seconds after the loss, then
	// Clear.
	if d := healthyAt - lossEnd; d < 35*time.Second || d > 40*time.Second {
		t.Fatalf("healthy %v after the loss, want 40 s (the window, then Clear)", d)
	}
	// A burst of 3 link errors degrades; errors at a third of the rate
	// keep it degraded (above half the threshold), hysteresis.
	h, _ = poll(3, 0, 10000)
	if !h.Degraded || !strings.Contains(h.Why, "link errors") {
		t.Fatalf("3 link errors: %+v", h)
	}
	for i := range 60 {
		le := uint64(0)
		if i%5 == 0 {
			le = 1 // 2 in any 10 s window: above half of 3
		}
		if h, _ = poll(le, 0, 10000); !h.Degraded {
			t.Fatalf("healthy again at %v with link errors still at 2 per window", at)
		}
	}
	// Counters that go backwards start over, without a change.
	c = PortCounters{}
	if _, changed := m.Observe("p", at+time.Second, c); changed {
		t.Fatal("a counter reset changed the health")
	}
	if h := m.Health("q"); h.Degraded {
		t.Fatalf("unknown port: %+v", h)
	}
}

func TestHealthConfigChecked(t *testing.T) {
	for _, c := range []HealthConfig{{SeqErrorRatio: 2}, {Window: -time.Second}, {SeqErrorRatio: -0.1}} {
		if _, err := NewHealthMonitor[int](c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestParseHealth(t *testing.T) {
	for in, want := range map[string]string{
		"":                                "window=10s,link-errors=3,min-seq-errors=20,seq-error-ratio=0.01,clear=30s",
		"off":                             "off",
		"window=2s, seq-error-ratio=0.05": "window=2s,link-errors=3,min-seq-errors=20,seq-error-ratio=0.05,clear=30s",
		"link-errors=1,min-seq-errors=2,clear=1s": "window=10s,link-errors=1,min-seq-errors=2,seq-error-ratio=0.01,clear=1s",
	} {
		c, err := ParseHealth(in)
		if err != nil || c.String() != want {
			t.Errorf("ParseHealth(%q) = %v, %v; want %s", in, c, err, want)
		}
	}
	for _, bad := range []string{"window", "window=0s", "seq-error-ratio=2", "min-seq-errors=-1", "colour=red", "clear=1s,clear=2s"} {
		if _, err := ParseHealth(bad); err == nil {
			t.Errorf("ParseHealth(%q) accepted", bad)
		}
	}
}

// TestHealthRestart: what a port's counters gathered while its samples
// were dropped (its link was down) does not count.
func TestHealthRestart(t *testing.T) {
	m, _ := NewHealthMonitor[int](HealthConfig{})
	m.Observe(1, time.Second, PortCounters{XmitPkts: 1000})
	m.Restart(1)
	// 500 retransmissions during the outage, then a quiet second
	m.Observe(1, 5*time.Second, PortCounters{SeqErrors: 500, XmitPkts: 1000})
	if h, _ := m.Observe(1, 6*time.Second, PortCounters{SeqErrors: 500, XmitPkts: 2000}); h.Degraded || h.SeqErrorsPerSec != 0 {
		t.Fatalf("the outage's retransmissions counted: %+v", h)
	}
}
