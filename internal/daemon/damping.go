package daemon

import (
	"sync"
	"time"

	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// portDamping is the flap damping of the node's ports as the port poll
// sees them (Config.Damping): a port that leaves ACTIVE is a down event,
// one that comes back to ACTIVE ends the outage. A port missing from a
// good read (its device went away) is down; a failed read changes
// nothing. A flap shorter than the poll is not seen here: the processes
// see every PORT_ERR on their own contexts and damp their own QPs' fail
// back and switch back (docs/APM.md, docs/CROSSNIC.md).
type portDamping struct {
	mu    sync.Mutex
	d     *pathsel.Damper[pathsel.PortKey]
	up    map[pathsel.PortKey]bool // the ports of the last good read, ACTIVE or not
	epoch time.Time                // the damper's clock counts from here
	now   func() time.Time         // time.Now; tests move it
}

func newPortDamping(cfg pathsel.DampingConfig, epoch time.Time) (*portDamping, error) {
	d, err := pathsel.NewDamper[pathsel.PortKey](cfg)
	if err != nil {
		return nil, err
	}
	return &portDamping{d: d, up: map[pathsel.PortKey]bool{}, epoch: epoch, now: time.Now}, nil
}

// clock is the damper's time: since epoch, on the monotonic clock.
func (p *portDamping) clock() time.Duration { return p.now().Sub(p.epoch) }

// observe takes a good read of the devices.
func (p *portDamping) observe(inv []pathsel.HCAInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	seen := make(map[pathsel.PortKey]bool, len(p.up))
	for _, h := range inv {
		for _, port := range h.Ports {
			k := pathsel.PortKey{Device: h.Name, Port: port.Num}
			up := port.State == verbs.PortActive
			seen[k] = up
			was, known := p.up[k]
			switch {
			case up && (!known || !was):
				p.d.Up(k, now)
			case !up && known && was:
				p.d.Down(k, now)
			}
		}
	}
	for k, was := range p.up {
		if _, ok := seen[k]; !ok && was {
			p.d.Down(k, now) // its device is gone
		}
	}
	p.up = seen
}

// port is port's damping at now for the status; nil while it has no
// penalty.
func (p *portDamping) port(dev string, port uint8, now time.Time) *status.PortDamping {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, at := pathsel.PortKey{Device: dev, Port: port}, now.Sub(p.epoch)
	st := p.d.State(k, at)
	if st.Penalty <= 0 {
		return nil
	}
	out := &status.PortDamping{Penalty: st.Penalty, Flaps: st.Flaps, Suppressed: st.Suppressed}
	if reuse, ok := p.d.ReuseAt(k, at); ok {
		out.ReuseAt = p.epoch.Add(reuse).Round(0) // the same instant in every status until the next flap
	}
	return out
}

// config is the damping in force.
func (p *portDamping) config() pathsel.DampingConfig { return p.d.Config() }

// fault records a down event of k that the port poll does not see: its
// health degraded (health.go).
func (p *portDamping) fault(k pathsel.PortKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.d.Down(k, p.clock())
}

// recovered ends the outage fault began.
func (p *portDamping) recovered(k pathsel.PortKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.d.Up(k, p.clock())
}

// suppressedNow reports whether k is suppressed now.
func (p *portDamping) suppressedNow(k pathsel.PortKey) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.d.Suppressed(k, p.clock())
}
