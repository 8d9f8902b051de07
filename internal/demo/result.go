package demo

import (
	"time"

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
