// Package dbusapi owns the D-Bus facade of ibpathd: the object
// /org/ibpath/Daemon1 with the interface org.ibpath.Daemon1 under the
// well-known name org.ibpath.Daemon1, on the system bus (or the session bus,
// or any bus address). It exports the methods Status, Arm and Migrate, the
// read-only properties that summarise status.Node, the signals
// PathMigrated, Failover, Switchback and PortStateChanged, and the
// introspection data of all of them, and requests the name only once
// everything is exported.
//
// The facade never touches a state machine: every method calls the
// daemon's api.Backend with the api.Caller built from the D-Bus sender's
// credentials, and the Backend decides what the caller may do. Signals and
// property changes come from Backend.Subscribe and Backend.Status.
//
// The bus policy that goes with it is contrib/dbus/org.ibpath.Daemon1.conf;
// docs/DBUS.md describes the interface.
package dbusapi
