package pathsel

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Flap damping (RFC 2439's figure of merit, applied to ports and paths):
// each down event adds Penalty to a key's penalty, which decays
// exponentially with HalfLife. A penalty that reaches Suppress suppresses
// the key: traffic is not moved back onto it (fail-back, switch-back, the
// placement of new QPs) until the penalty has decayed below Reuse. The
// penalty is capped at Reuse·2^(MaxSuppress/HalfLife), so a key is never
// suppressed for more than MaxSuppress after its last flap, however long
// it flapped. A key whose penalty decayed below Reuse/2 is forgotten.
//
// The defaults: the penalty (1000 a flap) and the reuse threshold (750)
// are BGP implementations' usual figures for RFC 2439. Their suppress
// threshold, 2000, takes three flaps once the penalty decays between
// them; for a port under RDMA traffic a second flap within a half-life is
// already the sign of a bad link, and the moment a switch back would be
// hit again, so the suppress threshold here is 1500: one flap never
// suppresses, two within a half-life do. BGP's 15-minute half-life is
// made for routes that propagate over the Internet; a port's is taken
// from Mooncake TENT's rail monitor, which pauses a failing rail for 30 s
// first and 300 s at most: a half-life of 30 s and MaxSuppress of 300 s.
// Two flaps back to back then keep traffic away for 42 s, two 30 s apart
// for 30 s, three 5 s apart for 55 s after the last.

// DampingConfig tunes a Damper. Zero fields take DefaultDamping's.
type DampingConfig struct {
	Off         bool          // no damping: nothing is ever suppressed
	Penalty     float64       // added per down event
	Suppress    float64       // a penalty at or above it suppresses
	Reuse       float64       // a suppressed key is reused below it
	HalfLife    time.Duration // the penalty halves in this long
	MaxSuppress time.Duration // the longest suppression after the last flap
}

// DefaultDamping holds the defaults (see above).
var DefaultDamping = DampingConfig{Penalty: 1000, Suppress: 1500, Reuse: 750, HalfLife: 30 * time.Second, MaxSuppress: 300 * time.Second}

// WithDefaults fills the zero fields and checks the rest: 0 < Reuse <
// Suppress, a positive Penalty, HalfLife and MaxSuppress.
func (c DampingConfig) WithDefaults() (DampingConfig, error) {
	d := DefaultDamping
	if c.Penalty == 0 {
		c.Penalty = d.Penalty
	}
	if c.Suppress == 0 {
		c.Suppress = d.Suppress
	}
	if c.Reuse == 0 {
		c.Reuse = d.Reuse
	}
	if c.HalfLife == 0 {
		c.HalfLife = d.HalfLife
	}
	if c.MaxSuppress == 0 {
		c.MaxSuppress = d.MaxSuppress
	}
	switch {
	case !(c.Penalty > 0) || math.IsInf(c.Penalty, 0):
		return c, fmt.Errorf("pathsel: damping: penalty %v is not a positive number", c.Penalty)
	case !(c.Reuse > 0) || !(c.Suppress > c.Reuse) || math.IsInf(c.Suppress, 0):
		return c, fmt.Errorf("pathsel: damping: need 0 < reuse < suppress, got reuse %v and suppress %v", c.Reuse, c.Suppress)
	case c.HalfLife < 0 || c.MaxSuppress < 0:
		return c, fmt.Errorf("pathsel: damping: negative half-life %v or max suppress %v", c.HalfLife, c.MaxSuppress)
	case c.MaxSuppress/c.HalfLife > 60:
		return c, fmt.Errorf("pathsel: damping: max suppress %v is over 60 half-lives (%v)", c.MaxSuppress, c.HalfLife)
	}
	return c, nil
}

// Ceiling is the largest penalty a key can hold: one that decays to
// Reuse in MaxSuppress.
func (c DampingConfig) Ceiling() float64 {
	return c.Reuse * math.Exp2(float64(c.MaxSuppress)/float64(c.HalfLife))
}

// PortKey names a port of an adapter, the key of a port's damping.
type PortKey struct {
	Device string
	Port   uint8
}

func (k PortKey) String() string { return fmt.Sprintf("%s:%d", k.Device, k.Port) }

// ComparePortKeys orders port keys by device, then port.
func ComparePortKeys(a, b PortKey) int {
	return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Port, b.Port))
}

// Damping is one key's state at an instant.
type Damping[K comparable] struct {
	Key        K
	Penalty    float64       // decayed to the instant asked for
	Suppressed bool          // traffic does not return to it
	Flaps      int           // down events since it was last forgotten
	Down       bool          // its last event was a down event
	ReuseIn    time.Duration // while suppressed: until it may be reused
}

// Damper keeps the damping state of keys (ports, paths). It starts no
// goroutine and takes the time from its caller, as the rest of pathsel.
// Not safe for concurrent use.
type Damper[K comparable] struct {
	cfg  DampingConfig
	keys map[K]*damp
}

type damp struct {
	penalty    float64 // at the last down event, at
	at         time.Duration
	suppressed bool
	flaps      int
	down       bool // between Down and Up: a second Down is the same outage
}

// NewDamper returns a damper with cfg (zero fields: the defaults).
func NewDamper[K comparable](cfg DampingConfig) (*Damper[K], error) {
	c, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	return &Damper[K]{cfg: c, keys: map[K]*damp{}}, nil
}

// Config returns the damper's configuration, defaults filled in.
func (d *Damper[K]) Config() DampingConfig { return d.cfg }

// Down records a down event of k at now and reports whether k is
// suppressed after it. A down event of a key already down (the same
// outage reported again: two contexts of one device, a PORT_ERR read
// twice) adds nothing; Up ends the outage.
func (d *Damper[K]) Down(k K, now time.Duration) bool {
	if d.cfg.Off {
		return false
	}
	s, p := d.update(k, now)
	if s == nil {
		s = &damp{}
		d.keys[k] = s
	}
	if s.down {
		return s.suppressed
	}
	s.down = true
	s.penalty, s.at = min(p+d.cfg.Penalty, d.cfg.Ceiling()), now
	s.flaps++
	if s.penalty >= d.cfg.Suppress {
		s.suppressed = true
	}
	return s.suppressed
}

// Forget drops k's state (the QP it named is gone).
func (d *Damper[K]) Forget(k K) { delete(d.keys, k) }

// Up records that k came back at now: its next Down is a new flap.
func (d *Damper[K]) Up(k K, now time.Duration) {
	if s, _ := d.update(k, now); s != nil {
		s.down = false
	}
}

// Suppressed reports whether traffic must stay off k at now.
func (d *Damper[K]) Suppressed(k K, now time.Duration) bool {
	s, _ := d.update(k, now)
	return s != nil && s.suppressed
}

// ReuseAt returns when a suppressed k may be reused (false when k is not
// suppressed at now). It depends only on k's last down event: asked
// again before the next one, it gives the same instant.
func (d *Damper[K]) ReuseAt(k K, now time.Duration) (time.Duration, bool) {
	s, _ := d.update(k, now)
	if s == nil || !s.suppressed {
		return 0, false
	}
	return s.at + d.decayTo(s.penalty, d.cfg.Reuse), true
}

// State returns k's state at now (the zero state, with Key, when k has
// no penalty).
func (d *Damper[K]) State(k K, now time.Duration) Damping[K] {
	s, p := d.update(k, now)
	if s == nil {
		return Damping[K]{Key: k}
	}
	st := Damping[K]{Key: k, Penalty: p, Suppressed: s.suppressed, Flaps: s.flaps, Down: s.down}
	if s.suppressed {
		st.ReuseIn = max(s.at+d.decayTo(s.penalty, d.cfg.Reuse)-now, 0)
	}
	return st
}

// States returns every key with a penalty at now, sorted by less.
func (d *Damper[K]) States(now time.Duration, less func(a, b K) int) []Damping[K] {
	var out []Damping[K]
	for k := range d.keys {
		if st := d.State(k, now); st.Penalty > 0 {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b Damping[K]) int { return less(a.Key, b.Key) })
	return out
}

// update brings k's suppression up to now: it is lifted once the
// penalty, decayed from its last down event, is below Reuse, and k is
// forgotten below Reuse/2. It returns k's state (nil when forgotten) and
// its penalty at now.
func (d *Damper[K]) update(k K, now time.Duration) (*damp, float64) {
	s := d.keys[k]
	if s == nil {
		return nil, 0
	}
	p := s.penalty
	if now > s.at {
		p *= math.Exp2(-float64(now-s.at) / float64(d.cfg.HalfLife))
	}
	if s.suppressed && now >= s.at+d.decayTo(s.penalty, d.cfg.Reuse) {
		s.suppressed = false
	}
	if !s.suppressed && !s.down && p < d.cfg.Reuse/2 {
		delete(d.keys, k)
		return nil, 0
	}
	return s, p
}

// decayTo is how long penalty p takes to decay to q (0 when p <= q),
// rounded up to the microsecond: a caller woken then finds the key
// reusable.
func (d *Damper[K]) decayTo(p, q float64) time.Duration {
	if p <= q {
		return 0
	}
	t := time.Duration(math.Ceil(math.Log2(p/q) * float64(d.cfg.HalfLife)))
	return t.Truncate(time.Microsecond) + time.Microsecond
}
