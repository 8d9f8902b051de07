package status

import "time"

// Event kinds. Their names are the D-Bus signal names.
const (
	EvPathMigrated     = "PathMigrated"
	EvFailover         = "Failover"
	EvSwitchback       = "Switchback"
	EvPortStateChanged = "PortStateChanged"
)

// Event is a change of the node's status worth telling subscribers about.
type Event struct {
	Kind   string    `json:"kind"`
	At     time.Time `json:"at"`
	Device string    `json:"device"`
	Port   uint8     `json:"port,omitempty"`
	QPN    uint32    `json:"qpn,omitempty"`
	// From and To: the path before and after (PathMigrated), the device
	// and QPN failed from and to (Failover, Switchback), or the port
	// states (PortStateChanged).
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Took is how long the recovery took, when the reporter knows:
	// PathMigrated from the port's error to the move, Failover from the
	// fault to the traffic on the backup (the daemon's histograms).
	Took time.Duration `json:"took_ns,omitempty"`
}
