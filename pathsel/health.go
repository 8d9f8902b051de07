package pathsel

import (
	"fmt"
	"time"
)

// Gray failure: a link that is still up but loses or corrupts packets
// shows in its port's counters before it fails, as link errors (symbol
// errors, receive errors, link error recoveries, link downs) and as
// sequence errors (gaps its requesters are told of, duplicate and
// out-of-order requests its responders receive: the retransmissions a
// live peer and a lossy path cause; ACK timeouts alone are also what a
// dead peer causes, and are not counted, see counters.go). A
// HealthMonitor keeps each port's counter samples over a window and
// declares it degraded when, over the window:
//
//   - its link errors reach LinkErrors (3 in 10 s by default: Mooncake
//     TENT's rail monitor marks a rail unhealthy after 3 errors in 10 s),
//     or
//   - its sequence errors, seen in at least three polls of the window
//     (seqSpreadPolls: not one burst), reach MinSeqErrors and
//     SeqErrorRatio of the packets it sent (20 and 1 % by default: one packet in a hundred
//     lost costs an RC QP a retransmission for that share of its
//     messages, an order of magnitude more latency for them than a
//     healthy link; a few on a busy link are the reordering and
//     congestion noise RC lives with).
//
// A degraded port is healthy again once, for Clear (30 s) without a
// break, every poll found its window below half of both thresholds:
// hysteresis, so that a port hovering at the threshold does not move
// traffic back and forth. The flap damping of the port decides when
// traffic may return to it after that (a degradation counts as a flap).
//
// Counters that go backwards (a driver reload, a counter reset) start
// the port's history over. It starts no goroutine and takes the time
// from its caller. Not safe for concurrent use.

// HealthConfig tunes a HealthMonitor. Zero fields take DefaultHealth's.
type HealthConfig struct {
	Off           bool          // no judgement: every port stays healthy
	Window        time.Duration // the span the rates are taken over
	LinkErrors    uint64        // link errors in a window that degrade the port
	MinSeqErrors  uint64        // sequence errors in a window below which the ratio is not looked at
	SeqErrorRatio float64       // sequence errors per packet sent, over a window, that degrade the port
	Clear         time.Duration // how long a degraded port must stay below half the thresholds
}

// DefaultHealth holds the defaults (see above).
var DefaultHealth = HealthConfig{Window: 10 * time.Second, LinkErrors: 3, MinSeqErrors: 20, SeqErrorRatio: 0.01, Clear: 30 * time.Second}

// WithDefaults fills the zero fields and checks the rest.
func (c HealthConfig) WithDefaults() (HealthConfig, error) {
	d := DefaultHealth
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.LinkErrors == 0 {
		c.LinkErrors = d.LinkErrors
	}
	if c.MinSeqErrors == 0 {
		c.MinSeqErrors = d.MinSeqErrors
	}
	if c.SeqErrorRatio == 0 {
		c.SeqErrorRatio = d.SeqErrorRatio
	}
	if c.Clear == 0 {
		c.Clear = d.Clear
	}
	switch {
	case c.Window < 0 || c.Clear < 0:
		return c, fmt.Errorf("pathsel: health: negative window %v or clear %v", c.Window, c.Clear)
	case !(c.SeqErrorRatio > 0 && c.SeqErrorRatio <= 1):
		return c, fmt.Errorf("pathsel: health: sequence error ratio %v is not in (0, 1]", c.SeqErrorRatio)
	}
	return c, nil
}

// PortCounters is one read of a port's counters, summed by class
// (CounterClass).
type PortCounters struct {
	LinkErrors uint64 // symbol errors, receive errors, link error recoveries, link downs, ...
	SeqErrors  uint64 // gaps its requesters were told of, duplicate and out-of-order requests its responders got
	XmitPkts   uint64 // packets sent
	// Congestion counts the port's congestion signs: ECN-marked packets
	// received, CNPs sent and handled, and InfiniBand's port_xmit_wait
	// (ticks a packet waited for credit).
	Congestion uint64
}

// PortHealth is one port's health at the last sample.
type PortHealth struct {
	Degraded bool
	Since    time.Duration // when it became degraded, or healthy again (0: never degraded)
	// Rates over the window, per second.
	LinkErrorsPerSec, SeqErrorsPerSec, XmitPktsPerSec, CongestionPerSec float64
	Why                                                                 string // what degraded it (while degraded)
}

// HealthMonitor keeps the health of ports (keys) from their counters.
type HealthMonitor[K comparable] struct {
	cfg   HealthConfig
	ports map[K]*portHealth
}

type sample struct {
	at time.Duration
	c  PortCounters
}

type portHealth struct {
	samples   []sample // oldest first; the oldest is at most a window before the newest
	degraded  bool
	since     time.Duration
	calmSince time.Duration // while degraded: since when every window was calm (-1: not calm)
	last      PortHealth
}

// NewHealthMonitor returns a monitor with cfg (zero fields: the
// defaults).
func NewHealthMonitor[K comparable](cfg HealthConfig) (*HealthMonitor[K], error) {
	c, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	return &HealthMonitor[K]{cfg: c, ports: map[K]*portHealth{}}, nil
}

// Config returns the monitor's configuration, defaults filled in.
func (m *HealthMonitor[K]) Config() HealthConfig { return m.cfg }

// Observe takes a read of k's counters at now and returns k's health
// after it, and whether its degraded state changed.
func (m *HealthMonitor[K]) Observe(k K, now time.Duration, c PortCounters) (PortHealth, bool) {
	p := m.ports[k]
	if p == nil {
		p = &portHealth{calmSince: -1}
		m.ports[k] = p
	}
	if n := len(p.samples); n > 0 {
		last := p.samples[n-1]
		if now <= last.at {
			return p.last, false // a read from the past (clock) adds nothing
		}
		if c.LinkErrors < last.c.LinkErrors || c.SeqErrors < last.c.SeqErrors || c.XmitPkts < last.c.XmitPkts || c.Congestion < last.c.Congestion {
			p.samples = p.samples[:0] // counters reset: start over
		}
	}
	p.samples = append(p.samples, sample{at: now, c: c})
	// keep one sample at or before the window's start, for the deltas
	i := 0
	for i+1 < len(p.samples) && p.samples[i+1].at <= now-m.cfg.Window {
		i++
	}
	p.samples = p.samples[i:]
	first := p.samples[0]
	span := now - first.at
	d := PortCounters{LinkErrors: c.LinkErrors - first.c.LinkErrors, SeqErrors: c.SeqErrors - first.c.SeqErrors,
		XmitPkts: c.XmitPkts - first.c.XmitPkts, Congestion: c.Congestion - first.c.Congestion}
	h := PortHealth{}
	if span > 0 {
		sec := span.Seconds()
		h.LinkErrorsPerSec, h.SeqErrorsPerSec = float64(d.LinkErrors)/sec, float64(d.SeqErrors)/sec
		h.XmitPktsPerSec, h.CongestionPerSec = float64(d.XmitPkts)/sec, float64(d.Congestion)/sec
	}
	if m.cfg.Off {
		p.last = h
		return h, false
	}
	spread := seqSpread(p.samples)
	bad, why := m.over(d, spread, 1)
	calm, _ := m.over(d, spread, 0.5)
	calm = !calm
	changed := false
	switch {
	case !p.degraded && bad:
		p.degraded, p.since, p.calmSince, changed = true, now, -1, true
		p.last.Why = why
	case p.degraded && !calm:
		p.calmSince = -1
		if bad {
			p.last.Why = why
		}
	case p.degraded && p.calmSince < 0:
		p.calmSince = now
	}
	if p.degraded && p.calmSince >= 0 && now-p.calmSince >= m.cfg.Clear {
		p.degraded, p.since, p.calmSince, changed = false, now, -1, true
	}
	h.Degraded, h.Since = p.degraded, p.since
	if p.degraded {
		h.Why = p.last.Why
	}
	p.last = h
	return h, changed
}

// seqSpreadPolls is how many polls of a window must have seen sequence
// errors for them to count: a lossy path makes them poll after poll,
// while the stale packets of a reset (past the new PSN) come in one or
// two polls' burst. (The lab's first bursts, 22 at a failover's backup
// port, were duplicates, which are no longer counted: counters.go.)
const seqSpreadPolls = 3

// seqSpread counts the polls (sample pairs) of samples that saw sequence
// errors.
func seqSpread(samples []sample) int {
	n := 0
	for i := 1; i < len(samples); i++ {
		if samples[i].c.SeqErrors > samples[i-1].c.SeqErrors {
			n++
		}
	}
	return n
}

// over reports whether window deltas d, whose sequence errors came in
// spread polls, reach the thresholds scaled by f, and which.
func (m *HealthMonitor[K]) over(d PortCounters, spread int, f float64) (bool, string) {
	if float64(d.LinkErrors) >= f*float64(m.cfg.LinkErrors) {
		return true, fmt.Sprintf("%d link errors in %v", d.LinkErrors, m.cfg.Window)
	}
	if spread >= seqSpreadPolls && float64(d.SeqErrors) >= f*float64(m.cfg.MinSeqErrors) && float64(d.SeqErrors) >= f*m.cfg.SeqErrorRatio*float64(d.XmitPkts) {
		return true, fmt.Sprintf("%d sequence errors for %d packets sent in %v, in %d polls", d.SeqErrors, d.XmitPkts, m.cfg.Window, spread)
	}
	return false, ""
}

// Health returns k's health at its last sample (the zero health when it
// has none).
func (m *HealthMonitor[K]) Health(k K) PortHealth {
	if p := m.ports[k]; p != nil {
		return p.last
	}
	return PortHealth{}
}

// Restart drops k's samples, keeping its state: its link is down, and
// what its counters gather meanwhile (the retransmissions of QPs still
// on it, its link down) is the outage's, not a gray failure's.
func (m *HealthMonitor[K]) Restart(k K) {
	if p := m.ports[k]; p != nil {
		p.samples = p.samples[:0]
	}
}

// Forget drops k (its port is gone).
func (m *HealthMonitor[K]) Forget(k K) { delete(m.ports, k) }
