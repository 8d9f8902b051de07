package daemon

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/pathsel"
)

// Port views (ownerproto.OpPortView): what ibpathd knows of each port
// that an attached process cannot know alone, told to every process of
// owner protocol 3 or later for its choice of a backup device
// (docs/DAEMON.md, "Port views"):
//
//   - flap damping over every flap ibpathd saw since it started (a
//     process's own damper knows only the flaps since the process did);
//   - the port's congestion signs per second over the health rule's
//     window (ECN-marked packets, CNPs, PortXmitWait ticks), rounded down
//     to a power of two so that a steady rate is told once, not at every
//     poll: a process is told when a port's band changes, at most once
//     per port per poll.
//
// A process that attaches is told every view that is not empty.
type portViews struct {
	mu   sync.Mutex                              // held while computing and telling: each owner gets the views in order
	sent map[pathsel.PortKey]ownerproto.PortView // the last told, non-empty only
}

// congestionBand rounds a rate down to a power of two (0 below 1).
func congestionBand(rate float64) float64 {
	if !(rate >= 1) || math.IsInf(rate, 0) {
		return 0
	}
	return math.Exp2(math.Floor(math.Log2(rate)))
}

// viewOf is ibpathd's view of port k now.
func (d *Daemon) viewOf(k pathsel.PortKey) ownerproto.PortView {
	v := ownerproto.PortView{Suppressed: d.damp.suppressedNow(k)}
	if h := d.portHealthStatus(k.Device, k.Port); h != nil {
		v.Congestion = congestionBand(h.CongestionPerSecond)
	}
	return v
}

// watchViews pushes the views every counter poll (1 s by default), in one
// goroutine: views are told in order, and a slow process delays neither
// poll.
func (d *Daemon) watchViews() {
	period := d.cfg.CounterPoll
	if period <= 0 {
		period = time.Second
	}
	d.every(period, d.pushViews)
}

// pushViews tells the attached processes the views that changed since
// they were last told.
func (d *Daemon) pushViews() {
	d.views.mu.Lock()
	defer d.views.mu.Unlock()
	d.invMu.Lock()
	inv := d.inv
	d.invMu.Unlock()
	now := map[pathsel.PortKey]ownerproto.PortView{}
	for _, h := range inv {
		for _, p := range h.Ports {
			k := pathsel.PortKey{Device: h.Name, Port: p.Num}
			if v := d.viewOf(k); v != (ownerproto.PortView{}) {
				now[k] = v
			}
		}
	}
	var cmds []ownerproto.Command
	for k, v := range now {
		if d.views.sent[k] != v {
			cmds = append(cmds, viewCommand(k, v))
		}
	}
	for k := range d.views.sent {
		if _, ok := now[k]; !ok {
			cmds = append(cmds, viewCommand(k, ownerproto.PortView{}))
		}
	}
	d.views.sent = now
	if len(cmds) == 0 {
		return
	}
	sortCommands(cmds)
	d.tellViews(d.owners.list(), cmds)
}

// sortCommands orders port commands by device and port.
func sortCommands(cmds []ownerproto.Command) {
	slices.SortFunc(cmds, func(a, b ownerproto.Command) int {
		return pathsel.ComparePortKeys(pathsel.PortKey{Device: a.Device, Port: a.Port}, pathsel.PortKey{Device: b.Device, Port: b.Port})
	})
}

func viewCommand(k pathsel.PortKey, v ownerproto.PortView) ownerproto.Command {
	return ownerproto.Command{Op: ownerproto.OpPortView, Device: k.Device, Port: k.Port, View: &v}
}

// viewsNewOwner tells an owner that just attached every view that is not
// empty.
func (d *Daemon) viewsNewOwner(o *owner) {
	d.views.mu.Lock()
	defer d.views.mu.Unlock()
	var cmds []ownerproto.Command
	for k, v := range d.views.sent {
		cmds = append(cmds, viewCommand(k, v))
	}
	if len(cmds) > 0 {
		sortCommands(cmds)
		d.tellViews([]*owner{o}, cmds)
	}
}

// tellViews sends the view commands to the owners that know them
// (protocol 3 on); an owner that does not take one is logged, once per
// push.
func (d *Daemon) tellViews(os []*owner, cmds []ownerproto.Command) {
	var to []*owner
	for _, o := range os {
		if o.hello.Proto >= ownerproto.OpPortViewProto {
			to = append(to, o)
		}
	}
	for _, a := range d.tellOwners(context.Background(), to, cmds) {
		if a.Error != "" {
			d.log.Warn("port views: a process was not told", "pid", a.PID, "err", a.Error)
		}
	}
}
