package demo

import (
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// Result is what a run observed, for tests and tools.
type Result struct {
	// Endpoints: QP A on node0 and node1, then QP B on node0 and node1.
	Endpoints []EndpointResult
	// Events holds every async event read, in order, per host name.
	Events map[string][]EventRecord
	Stats  sim.Stats

	// Layer1 lists every change of a QP's layer-1 status, in order.
	Layer1 []Layer1Change
	// Handovers lists the QPs layer 1 gave to the next layer.
	Handovers []HandoverRecord
	// Layer2 lists every change of a protected QP side's layer-2 state
	// (and every handshake message it received), in order.
	Layer2 []Layer2Change
	// Managers holds each host's layer-1 counters at the end.
	Managers map[string]apm.Stats
	// Pauses lists every gap of more than a millisecond between two
	// successful completions of one endpoint.
	Pauses []Pause
	// Bounced lists the QPs whose sides started to migrate back and forth
	// (two PATH_MIG within bounceWindow on one side).
	Bounced []Bounce
	// Muted counts, per QP name, the layer-1 changes the timeline did
	// not print after the QP started to bounce.
	Muted map[string]int
	// PullRecovery is, for QP A, the longest time either side went
	// without a successful completion across the cable pull.
	PullRecovery time.Duration
}

// Bounce is the moment a QP was seen migrating back and forth.
type Bounce struct {
	QP, Host string
	At       time.Duration
}

// Layer1Change is one change of a QP's layer-1 status (apm.Manager.Status
// before and after the manager handled Cause: an async event's name,
// "tick", "connect" or "error completion").
type Layer1Change struct {
	At               time.Duration
	Host, Device, QP string
	Cause            string
	Before, After    apm.QPStatus
	New              bool // the QP was registered by this change
}

// Layer2Change is one change of a protected QP side's crossnic.Conn, seen
// after the demo called it for Cause ("poll", "post", an async event's
// name, "layer 1 handed over: ..."): its queue states and counters before
// and after, and the handshake messages it received meanwhile.
type Layer2Change struct {
	At               time.Duration
	Host, Device, QP string
	Cause            string
	SQBefore, SQ     fsm.SQState
	RQBefore, RQ     fsm.RQState
	Before, After    crossnic.ConnStats
	Msgs             []ControlMsg
}

// HandoverRecord is one QP layer 1 gave to the next layer.
type HandoverRecord struct {
	At                       time.Duration
	Host, Device, QP, Reason string
	QPN                      uint32
}

// Pause is a gap in an endpoint's successful completions.
type Pause struct {
	Host, QP string
	From, To time.Duration
}

// EndpointResult is the traffic and final state of one side of a QP.
type EndpointResult struct {
	QP, Host, Device string
	QPN              uint32

	Posted     int // send WRs posted (all signaled)
	SendOK     int
	SendErr    int
	RecvOK     int // notifications received
	RecvErr    int
	Verified   int // notifications whose bulk data checked out
	DataErrors int // corrupt data or notifications out of order

	// Errors lists the statuses of error completions in the order they
	// came, consecutive repeats collapsed.
	Errors []verbs.WCStatus

	State      verbs.QPState
	Mig        verbs.MigState
	MigKnown   bool  // false when ibv_query_qp could not be called
	Port       uint8 // primary port at the end (last known if the device died)
	DeviceDead bool

	// ConnectMig and ConnectAltPort are the QP's path_mig_state and
	// alternate port right after connecting through the manager's
	// ModifyQP: MIGRATED and 0 when it added nothing (RoCE).
	ConnectMig     verbs.MigState
	ConnectAltPort uint8

	L1      apm.QPStatus // layer-1 status at the end
	L1Known bool         // false when the manager does not know the QP

	// SendOrderErrors counts send completions that were not of the next
	// WR posted (one completed twice, out of order, or one skipped).
	SendOrderErrors int
	// WrongQPN counts completions that named another QP than this one.
	WrongQPN int

	// Layer 2, when the QP is protected (QP B).
	Protected bool
	Backup    string // the backup HCA
	L2SQ      fsm.SQState
	L2RQ      fsm.RQState
	L2Stats   crossnic.ConnStats
	L2Reason  string // why it surfaced, if it did
	Replayed  int    // WRs the handshake's rewind replayed on the backup
	// Resumed is the first good completion through the backup leg after
	// the last fault; Pause is how long after the fault that came.
	Resumed, Pause time.Duration
	// Failovers lists the faults the script injected under the QP, each
	// with the first good completion through the backup after it.
	Failovers []Failover
	// HomeAt is when both queues first came back to the default QP after
	// a failover (0: never); HomeDefaultWCs and HomeBackupWCs count the
	// application's completions that came through the default and the
	// backup leg from then to the next fault.
	HomeAt                        time.Duration
	HomeDefaultWCs, HomeBackupWCs int
	// DefaultWCs and BackupWCs count all the application's completions
	// per leg.
	DefaultWCs, BackupWCs int
}

// EventRecord is one async event as the application read it.
type EventRecord struct {
	At           time.Duration
	Host, Device string
	Type         verbs.EventType
	QP           string // QP name for QP events
	Port         uint8  // for port events
}

// Endpoint returns the result of QP qp on host, if there is one.
func (r Result) Endpoint(qp, host string) (EndpointResult, bool) {
	for _, e := range r.Endpoints {
		if e.QP == qp && e.Host == host {
			return e, true
		}
	}
	return EndpointResult{}, false
}

// HasEvent reports whether host saw an event of type t (on QP qp, if qp
// is not empty).
func (r Result) HasEvent(host string, t verbs.EventType, qp string) bool {
	for _, ev := range r.Events[host] {
		if ev.Type == t && (qp == "" || ev.QP == qp) {
			return true
		}
	}
	return false
}

// Layer1Of lists the layer-1 changes of QP qp on host, in order.
func (r Result) Layer1Of(qp, host string) []Layer1Change {
	var out []Layer1Change
	for _, c := range r.Layer1 {
		if c.QP == qp && c.Host == host {
			out = append(out, c)
		}
	}
	return out
}

// PausesOf lists the pauses of QP qp (both sides) that began in [from, to).
func (r Result) PausesOf(qp string, from, to time.Duration) []Pause {
	var out []Pause
	for _, p := range r.Pauses {
		if p.QP == qp && p.From >= from && p.From < to {
			out = append(out, p)
		}
	}
	return out
}

// Layer2Of lists the layer-2 changes of QP qp on host, in order.
func (r Result) Layer2Of(qp, host string) []Layer2Change {
	var out []Layer2Change
	for _, c := range r.Layer2 {
		if c.QP == qp && c.Host == host {
			out = append(out, c)
		}
	}
	return out
}
