package apm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// A drained port is one an operator took out of service while its link is
// still up (`ibpath drain`). Layer 1 treats it as down: a QP whose primary
// path uses it migrates to its alternate (armed at once when it was still
// loading), one with no alternate off it is handed to the next layer, no
// alternate or fail-back target is chosen on it, and a QP registered on it
// later leaves it as soon as it is armed. Undrain makes it a port like any
// other again: QPs fail back to it by the failback policy.

// Drain takes port of every device named dev out of service, and returns
// how many QPs it asked to move. Draining a drained port is not an error.
func (m *Manager) Drain(dev string, port uint8) int {
	if port == 0 || port >= 64 {
		return 0
	}
	if m.drained == nil {
		m.drained = map[string][]uint8{}
	}
	if !slices.Contains(m.drained[dev], port) {
		m.drained[dev] = append(m.drained[dev], port)
	}
	n := 0
	for _, d := range m.devs {
		if d.desc.Name != dev && d.ctx.Device().Name != dev {
			continue
		}
		d.drained = m.drained[dev]
		d.refresh()
		for _, e := range append([]*entry(nil), d.entries...) {
			if e.m.PortDown(port) {
				continue
			}
			if e.m.Primary.Port == port {
				n++
			}
			m.step(e, fsm.APMEvent{Kind: fsm.EvPortDown, Port: port})
		}
	}
	return n
}

// Undrain puts port of the devices named dev back in service: a port that
// is ACTIVE counts as up again (PORT_ACTIVE for its QPs' machines), so QPs
// may fail back to it. It reports whether the port was drained.
func (m *Manager) Undrain(dev string, port uint8) bool {
	ports := m.drained[dev]
	i := slices.Index(ports, port)
	if i < 0 {
		return false
	}
	m.drained[dev] = slices.Delete(slices.Clone(ports), i, i+1)
	if len(m.drained[dev]) == 0 {
		delete(m.drained, dev)
	}
	for _, d := range m.devs {
		if d.desc.Name != dev && d.ctx.Device().Name != dev {
			continue
		}
		d.drained = m.drained[dev]
		d.refresh()
		if p, ok := d.desc.Port(port); ok && p.Active() {
			m.each(d, fsm.APMEvent{Kind: fsm.EvPortUp, Port: port})
		}
	}
	return true
}

// Drained lists the drained ports, "mlx5_0:1", sorted.
func (m *Manager) Drained() []string {
	var out []string
	for dev, ports := range m.drained {
		for _, p := range ports {
			out = append(out, fmt.Sprintf("%s:%d", dev, p))
		}
	}
	slices.Sort(out)
	return out
}

// isDrained reports whether port of d is drained.
func (d *device) isDrained(port uint8) bool { return slices.Contains(d.drained, port) }

// drainNewEntry applies the drains of e's device to a QP just registered:
// its machine sees every drained port down, so it leaves one it was
// created on as soon as it is armed.
func (m *Manager) drainNewEntry(e *entry) {
	for _, p := range e.dev.drained {
		if !e.m.PortDown(p) {
			m.step(e, fsm.APMEvent{Kind: fsm.EvPortDown, Port: p})
		}
	}
}

// drainedReason rewrites a hand-over reason for a QP whose primary port
// is drained: its link is up, so "port down" would mislead the operator.
func drainedReason(d *device, e *entry, reason string) string {
	if !d.isDrained(e.m.Primary.Port) {
		return reason
	}
	r := strings.TrimPrefix(reason, "primary port down and no alternate: ")
	return fmt.Sprintf("port %s:%d is drained and layer 1 has no alternate off it: %s", d.ctx.Device().Name, e.m.Primary.Port, r)
}

// markDrained shows the drained ports of d as DOWN in its description, so
// that path choice never picks them.
func (d *device) markDrained() {
	if len(d.drained) == 0 {
		return
	}
	ports := slices.Clone(d.desc.Ports)
	for i := range ports {
		if d.isDrained(ports[i].Num) {
			ports[i].State = verbs.PortDown
		}
	}
	d.desc.Ports = ports
}
