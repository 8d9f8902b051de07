package dbusapi

import "github.com/godbus/dbus/v5"

// The name, object and interface of the facade.
const (
	BusName   = "org.ibpath.Daemon1"
	Path      = dbus.ObjectPath("/org/ibpath/Daemon1")
	Interface = "org.ibpath.Daemon1"
)

// Signal names (they equal status.Event's Kind).
const (
	SignalPathMigrated     = "PathMigrated"
	SignalFailover         = "Failover"
	SignalSwitchback       = "Switchback"
	SignalPortStateChanged = "PortStateChanged"
)

// Property names.
const (
	PropNode        = "Node"
	PropFabric      = "Fabric"
	PropVersion     = "Version"
	PropArmedQPs    = "ArmedQPs"
	PropQPs         = "QPs"
	PropMigrations  = "Migrations"
	PropFailovers   = "Failovers"
	PropSwitchbacks = "Switchbacks"
	PropPeers       = "Peers"
	// PropSuppressedPorts counts the ports flap damping keeps traffic
	// off (status totals.suppressed_ports).
	PropSuppressedPorts = "SuppressedPorts"
	// PropDegradedPorts counts the ports ibpathd keeps out of service
	// for their health (status totals.degraded_ports).
	PropDegradedPorts = "DegradedPorts"
)

// Interfaces of the freedesktop specification this package implements.
const (
	ifaceProperties    = "org.freedesktop.DBus.Properties"
	ifaceIntrospection = "org.freedesktop.DBus.Introspectable"
)
