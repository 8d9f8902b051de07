package dbusapi

import (
	"fmt"
	"math"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"

	"github.com/ibpath/ibpath/internal/status"
)

// propNames lists the properties in the order they are introspected and
// compared.
var propNames = []string{
	PropNode, PropFabric, PropVersion, PropArmedQPs, PropQPs,
	PropMigrations, PropFailovers, PropSwitchbacks, PropPeers, PropSuppressedPorts, PropDegradedPorts,
}

// propValues are the property values of one status.Node, keyed by
// property name, with the Go types that give their D-Bus signatures.
func propValues(n status.Node) map[string]any {
	return map[string]any{
		PropNode:            n.Node,
		PropFabric:          n.Fabric.Kind,
		PropVersion:         n.Version,
		PropArmedQPs:        clampU32(n.Totals.ArmedQPs),
		PropQPs:             clampU32(n.QPsTotal),
		PropMigrations:      n.Totals.Migrations,
		PropFailovers:       n.Totals.Failovers,
		PropSwitchbacks:     n.Totals.Switchbacks,
		PropPeers:           clampU32(len(n.Peers)),
		PropSuppressedPorts: clampU32(n.Totals.SuppressedPorts),
		PropDegradedPorts:   clampU32(n.Totals.DegradedPorts),
	}
}

func clampU32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case uint64(n) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}

// exportProperties exports org.freedesktop.DBus.Properties on Path with
// the values of n: read-only, each change announced by PropertiesChanged.
func exportProperties(conn *dbus.Conn, n status.Node) (*prop.Properties, map[string]any, error) {
	vals := propValues(n)
	m := make(map[string]*prop.Prop, len(vals))
	for name, v := range vals {
		m[name] = &prop.Prop{Value: v, Writable: false, Emit: prop.EmitTrue}
	}
	p, err := prop.Export(conn, Path, prop.Map{Interface: m})
	if err != nil {
		return nil, nil, fmt.Errorf("prop.Export %s: %w", Path, err)
	}
	return p, vals, nil
}

// refresh reads the backend's status and sets every property whose value
// changed, which emits PropertiesChanged for it. Only the signal loop
// calls it.
func (s *Server) refresh() {
	vals := propValues(s.backend.StatusOf(0)) // the counts, without the QP rows
	for _, name := range propNames {
		v := vals[name]
		if s.last[name] == v {
			continue
		}
		if err := setProp(s.props, name, v); err != nil {
			s.log.Warn("dbus: cannot set property", "property", name, "err", err)
			continue
		}
		s.last[name] = v
	}
}

// setProp sets one property. prop.Properties.SetMust panics when the
// PropertiesChanged signal cannot be sent (the bus connection is gone);
// that becomes an error here.
func setProp(p *prop.Properties, name string, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("prop.SetMust %s: %v", name, r)
		}
	}()
	p.SetMust(Interface, name, v)
	return nil
}
