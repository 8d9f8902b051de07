package status

import "time"

// SchemaVersion is the version of the JSON document Node marshals to. It
// changes only when a field is removed or changes meaning; new fields may
// appear at any time, so readers must ignore fields they do not know.
// Version 2: paths, the backup and the remote end of a QP are objects
// (Path, Backup, Remote), the replication lag says its unit, port states
// use the rdma tool's names, the simulated fabric's shape is in
// Fabric.Sim.
const SchemaVersion = 2

// Fabric kinds.
const (
	FabricHardware = "hardware" // real HCAs, found in sysfs
	FabricSim      = "sim"      // the embedded simulated fabric
)

// Node is everything ibpathd knows about its node.
type Node struct {
	Schema  int       `json:"schema"`
	Node    string    `json:"node"`    // node name (the replication member name)
	Version string    `json:"version"` // ibpathd version
	Started time.Time `json:"started"`
	Fabric  Fabric    `json:"fabric"`
	// Damping is the flap damping ibpathd applies to the ports it polls
	// (--damping, in pathsel.ParseDamping's syntax: "off", or every
	// setting with its value).
	Damping string `json:"damping"`
	// Health is the rule ibpathd judges the ports' health by
	// (--health, in pathsel.ParseHealth's syntax: "off", or every
	// setting with its value).
	Health string `json:"health"`
	HCAs   []HCA  `json:"hcas"`
	QPs    []QP   `json:"qps"`
	// QPsTotal is the number of QPs of the node, and Layers counts them
	// by layer (LayerAPM, LayerCrossNIC, LayerNone, LayerOther), whether
	// QPs lists them all or, asked for fewer rows (GET /v1/status?qps=N),
	// the first of them (by owner pid, device, QPN).
	QPsTotal int            `json:"qps_total"`
	Layers   map[string]int `json:"layers"`
	Owners   []Owner        `json:"owners"` // processes attached over the owner protocol
	// Drains are the ports an operator drained (`ibpath drain`), with
	// the QPs still on each.
	Drains []Drain `json:"drains"`
	Peers  []Peer  `json:"peers"`
	Repl   Repl    `json:"replication"`
	Store  Store   `json:"store"`
	Totals Totals  `json:"totals"`
}

// Fabric says which devices ibpathd runs on, and why.
type Fabric struct {
	Kind   string `json:"kind"`   // FabricHardware or FabricSim
	Reason string `json:"reason"` // why this kind: "no RDMA device under /sys/class/infiniband", "--fabric sim"
	Sysfs  string `json:"sysfs,omitempty"`
	// Sim is the simulated fabric's shape (FabricSim only).
	Sim SimFabric `json:"sim,omitzero"`
	// Error is why the last read of the devices failed, if it did (the
	// status then shows what was read before).
	Error string `json:"error,omitempty"`
}

// SimFabric is the shape of the embedded simulated fabric.
type SimFabric struct {
	Seed  uint64 `json:"seed"`
	Host  string `json:"host"`  // this node's host on it: node<index>
	Hosts int    `json:"hosts"` // hosts of the fabric
}

// HCA is one RDMA device.
type HCA struct {
	Name     string `json:"name"`
	NodeGUID string `json:"node_guid,omitempty"`
	NodeType string `json:"node_type,omitempty"` // "CA", ...
	FW       string `json:"fw,omitempty"`
	APM      bool   `json:"apm"`              // the device supports automatic path migration
	Uverbs   string `json:"uverbs,omitempty"` // /dev/infiniband/uverbsN
	Ports    []Port `json:"ports"`
}

// Port is one port of an HCA. State and PhysState use the names the
// rdma tool prints (`rdma link`: "state ACTIVE physical_state LINK_UP"),
// whatever the source (sysfs, libibverbs, the simulated fabric):
// verbs.PortState and verbs.PhysState render them.
type Port struct {
	Num       uint8    `json:"num"`
	State     string   `json:"state"`      // DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER
	PhysState string   `json:"phys_state"` // LINK_UP, DISABLED, POLLING, SLEEP, ...
	LinkLayer string   `json:"link_layer"` // InfiniBand or Ethernet
	LID       uint16   `json:"lid"`
	LMC       uint8    `json:"lmc"`
	SMLID     uint16   `json:"sm_lid"`
	Rate      string   `json:"rate"` // "100 Gb/sec (4X EDR)"
	GIDs      []string `json:"gids,omitempty"`
	Netdev    string   `json:"netdev,omitempty"`
	// Damping is the port's flap damping as ibpathd sees it (from its
	// port poll, docs/DAEMON.md "Flap damping"); absent while the port
	// has no penalty.
	Damping *PortDamping `json:"damping,omitempty"`
	// Health is the port's health as ibpathd judges it from its counters
	// (docs/DAEMON.md, "Port health"); absent when never judged.
	Health *PortHealth `json:"health,omitempty"`
}

// Port health states (PortHealth.State).
const (
	HealthOK         = "ok"
	HealthDegraded   = "degraded"
	HealthRecovering = "recovering" // healthy again, back in service once its flap damping allows
)

// PortHealth is a port's health: rates over the rule's window, per
// second, and whether the port is out of service for it.
type PortHealth struct {
	State                string  `json:"state"` // HealthOK, HealthDegraded, HealthRecovering
	Why                  string  `json:"why,omitempty"`
	LinkErrorsPerSecond  float64 `json:"link_errors_per_second"`
	SeqErrorsPerSecond   float64 `json:"seq_errors_per_second"`
	XmitPacketsPerSecond float64 `json:"xmit_packets_per_second"`
	CongestionPerSecond  float64 `json:"congestion_per_second"`
	// OutOfService: the port's traffic was moved off it (as a drain
	// moves it) since Since.
	OutOfService bool      `json:"out_of_service"`
	Since        time.Time `json:"since,omitzero"`
	Error        string    `json:"error,omitempty"` // the last read of its counters failed
}

// PortDamping is a port's flap damping (RFC 2439's figure of merit,
// pathsel.Damper): a penalty per down event that decays with a
// half-life; while suppressed, traffic is not moved back onto the port.
type PortDamping struct {
	Penalty    float64 `json:"penalty"` // decayed to the time of the status
	Flaps      int     `json:"flaps"`   // down events since the penalty was last forgotten
	Suppressed bool    `json:"suppressed"`
	// ReuseAt is when a suppressed port may carry traffic again, if it
	// does not flap before then; zero when not suppressed.
	ReuseAt time.Time `json:"reuse_at,omitzero"`
}

// Layers a QP can be protected by.
const (
	LayerAPM      = "apm"      // layer 1
	LayerCrossNIC = "crossnic" // layer 2
	LayerNone     = "none"     // layer 3: errors surface
	// LayerOther counts, in Node.Layers and the metrics, QPs reported
	// with a layer ibpathd does not know (a label per distinct report
	// would grow without end).
	LayerOther = "other"
)

// QP is one RC QP ibpath protects (or tried to).
type QP struct {
	Device string `json:"device"`
	QPN    uint32 `json:"qpn"`
	// Port is the primary path's port (Primary.Port; 0 before the QP has
	// one), the port `--port DEVICE:PORT` targets select by.
	Port uint8 `json:"port"`
	// OwnerPID is the process that owns the QP; 0 for the QPs of the
	// embedded simulated fabric's workload, which ibpathd owns itself.
	OwnerPID int    `json:"owner_pid"`
	OwnerUID uint32 `json:"owner_uid"`
	// Layer is the layer protecting the QP now.
	Layer string `json:"layer"`
	// APM is the layer-1 state (fsm.APMState's name: armed, rearm,
	// migrated, awaiting-peer, unprotected, handed-over, unsupported, ...).
	APM string `json:"apm"`
	// Primary is the path the QP's traffic takes, Alternate the armed or
	// loaded alternate path, Home the path the QP returns to (layer 1's
	// failback, layer 2's switch back); each is absent when there is none
	// (Primary and Home until the QP is connected).
	Primary    Path `json:"primary,omitzero"`
	Alternate  Path `json:"alternate,omitzero"`
	Home       Path `json:"home,omitzero"`
	Migrations int  `json:"migrations"`
	// CrossNIC is the layer-2 send-queue state (default, fallback,
	// wait-signaled, wait-drained) or "" when layer 2 does not protect it.
	CrossNIC string `json:"crossnic,omitempty"`
	Backup   Backup `json:"backup,omitzero"` // layer 2's backup QP
	// ExpressLane: the failed-over QP's traffic runs on the shim's
	// express lane (docs/SHIM.md).
	ExpressLane bool   `json:"express_lane,omitempty"`
	Failovers   int    `json:"failovers"`
	Switchbacks int    `json:"switchbacks"`
	Remote      Remote `json:"remote,omitzero"` // the other end, once connected
	Reason      string `json:"reason,omitempty"`
	// FailbackHeldUntil: layer 1 keeps the QP off its home path until
	// then because its home port or path flapped (flap damping,
	// docs/APM.md); zero when its failback is not held.
	FailbackHeldUntil time.Time `json:"failback_held_until,omitzero"`
	// SwitchbackHeldUntil: layer 2 keeps the QP on its backup until
	// then because its home port flapped (flap damping,
	// docs/CROSSNIC.md); zero when its switch back is not held.
	SwitchbackHeldUntil time.Time `json:"switchback_held_until,omitzero"`
	// KeptEvents names the async events of the QP (or of its device) the
	// shim kept from the application because layer 2 carried the QP on
	// its backup ("QP_FATAL, DEVICE_FATAL"); empty when none.
	KeptEvents string `json:"kept_events,omitempty"`
}

// Drain is a port taken out of service by an operator.
type Drain struct {
	Device string    `json:"device"`
	Port   uint8     `json:"port"`
	Since  time.Time `json:"since"`
	ByUID  uint32    `json:"by_uid"`
	// Reason is why ibpathd took the port out of service itself (its
	// health, "degraded: ..."); empty for an operator's drain.
	Reason string `json:"reason,omitempty"`
	// QPsLeft counts the QPs whose traffic still uses the port; QPs lists
	// the first 100, with why. The drain is complete when none is left.
	QPsLeft int       `json:"qps_left"`
	QPs     []DrainQP `json:"qps"`
}

// DrainQP is a QP whose traffic has not left a drained port.
type DrainQP struct {
	OwnerPID int    `json:"owner_pid"`
	QPN      uint32 `json:"qpn"`
	Layer    string `json:"layer"`
	Why      string `json:"why"`
}

// Owner is a process attached to ibpathd over the owner protocol.
type Owner struct {
	PID         int       `json:"pid"`
	UID         uint32    `json:"uid"`
	Comm        string    `json:"comm,omitempty"`
	Incarnation uint64    `json:"incarnation"`
	Attached    time.Time `json:"attached"`
	QPs         int       `json:"qps"`
	// Proto is the owner protocol its libibpath speaks (1 has no drain).
	Proto int `json:"proto"`
}

// Peer states.
const (
	PeerAlive   = "alive"
	PeerSuspect = "suspect"
	PeerDead    = "dead"
	PeerLeft    = "left"
)

// Peer is another ibpathd of the cluster.
type Peer struct {
	Name  string   `json:"name"`
	Addr  string   `json:"addr"` // management (gossip) address
	State string   `json:"state"`
	GIDs  []string `json:"gids,omitempty"`
	LIDs  []uint16 `json:"lids,omitempty"`
	// Entries is how many of the peer's entries this node holds.
	Entries int `json:"entries"`
}

// Replication modes.
const (
	ReplOff      = "off"      // --no-replication
	ReplInsecure = "insecure" // no cluster key
	ReplKeyed    = "keyed"    // authenticated with the cluster key
)

// Repl says how this node replicates.
type Repl struct {
	Mode string `json:"mode"`
	Addr string `json:"addr,omitempty"` // gossip address peers join
	// Reason says why replication is off or insecure.
	Reason string `json:"reason,omitempty"`
}

// Store counts the local store's entries.
type Store struct {
	Path       string `json:"path"`
	QPs        int    `json:"qps"`
	MRs        int    `json:"mrs"`
	Tombstones int    `json:"tombstones"`
	// Note says what opening the file found, when it did not open as it
	// was: a damaged file moved aside, an empty file.
	Note string `json:"note,omitempty"`
}

// Totals are counters since ibpathd started.
type Totals struct {
	Migrations  uint64 `json:"migrations"`
	Failovers   uint64 `json:"failovers"`
	Switchbacks uint64 `json:"switchbacks"`
	ArmedQPs    int    `json:"armed_qps"`
	// SuppressedPorts counts the ports whose flap damping keeps traffic
	// off them now (Port.Damping).
	SuppressedPorts int `json:"suppressed_ports"`
	// DegradedPorts counts the ports ibpathd keeps out of service for
	// their health (Port.Health).
	DegradedPorts int `json:"degraded_ports"`
	// Replication lag of the pushes this node received, in seconds
	// (0 when none was received yet).
	ReplicationLagP50Seconds float64 `json:"replication_lag_p50_seconds"`
	ReplicationLagP99Seconds float64 `json:"replication_lag_p99_seconds"`
	PeersRefused             uint64  `json:"peers_refused"`
	// RecordsRefused counts replicated records refused for naming a
	// route their owner's node does not hold, or for coming from another
	// node than their owner's (replica.Stats).
	RecordsRefused uint64 `json:"records_refused"`
	// MessagesRefused counts peer messages refused as replays (sent to
	// another node, outside the replay window, or seen before).
	MessagesRefused uint64 `json:"messages_refused"`
	// OwnerRefusals counts the QP reports, publications and events of
	// local processes refused (docs/SECURITY.md, "Owner sessions").
	OwnerRefusals uint64 `json:"owner_refusals"`
	// ConnectionsRefused counts socket connections closed at once: their
	// user held Config.MaxConnsPerUser already.
	ConnectionsRefused uint64 `json:"connections_refused"`
}
