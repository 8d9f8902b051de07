package daemon

import (
	"sync"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/asyncev"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// broadcaster fans status events out to subscribers without ever blocking
// the daemon: a subscriber that does not keep up loses events.
type broadcaster struct {
	mu     sync.Mutex
	subs   map[chan status.Event]struct{}
	closed bool
}

func (b *broadcaster) subscribe(buf int) (<-chan status.Event, func()) {
	if buf < 1 {
		buf = 1
	}
	ch := make(chan status.Event, buf)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(ch)
		return ch, func() {}
	}
	if b.subs == nil {
		b.subs = map[chan status.Event]struct{}{}
	}
	b.subs[ch] = struct{}{}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if _, ok := b.subs[ch]; ok {
				delete(b.subs, ch)
				close(ch)
			}
		})
	}
}

func (b *broadcaster) publish(e status.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- e:
		default:
		}
	}
}

func (b *broadcaster) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for ch := range b.subs {
		close(ch)
	}
	b.subs = nil
}

// event counts and broadcasts one status event.
func (d *Daemon) event(e status.Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	switch e.Kind {
	case status.EvPathMigrated:
		d.migrations.Add(1)
	case status.EvFailover:
		d.failovers.Add(1)
	case status.EvSwitchback:
		d.switchbacks.Add(1)
	}
	d.timings.observe(e)
	d.log.Info("event", "kind", e.Kind, "device", e.Device, "port", e.Port, "qpn", e.QPN, "from", e.From, "to", e.To, "reason", e.Reason, "took", e.Took)
	d.events.publish(e)
}

// simEvent turns an async event of the simulated node's layer 1 into a
// status event: a path migration of one of ibpathd's own workload QPs.
func (d *Daemon) simEvent(ev asyncev.Event) {
	if ev.Type != verbs.EventPathMig || ev.QP == nil {
		return
	}
	if d.sim == nil {
		return
	}
	var to string
	d.sim.local.Do(func(m *apm.Manager) {
		if st, ok := m.QPStatus(ev.QP); ok {
			to = st.Primary.String()
		}
	})
	d.sim.mu.Lock()
	from := d.sim.lastPrimary[ev.QP]
	d.sim.lastPrimary[ev.QP] = to
	d.sim.mu.Unlock()
	d.event(status.Event{Kind: status.EvPathMigrated, Device: ev.Device, QPN: ev.QP.QPN(), From: from, To: to, Reason: "the HCA migrated to the alternate path"})
}
