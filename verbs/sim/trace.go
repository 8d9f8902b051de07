package sim

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// TraceRecord is one thing the fabric did: a packet sent or lost, a
// completion, an async event, a QP transition, a fault.
type TraceRecord struct {
	At     time.Duration
	Host   string
	Device string
	Kind   string // tx, drop, wc, event, qp, apm, retry, port, fault, mark
	Detail string
}

func (r TraceRecord) String() string {
	return fmt.Sprintf("%12.3fus %s/%s %-5s %s", float64(r.At)/float64(time.Microsecond), r.Host, r.Device, r.Kind, r.Detail)
}

// SetTracer installs fn to receive every trace record (nil turns tracing
// off). fn runs with the fabric locked and must not call back into it.
func (f *Fabric) SetTracer(fn func(TraceRecord)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tracer = fn
}

func (f *Fabric) trace(a *HCA, kind, format string, args ...any) {
	f.tracer(TraceRecord{At: f.now, Host: a.host.name, Device: a.name, Kind: kind, Detail: fmt.Sprintf(format, args...)})
}

func eventTarget(ev verbs.AsyncEvent) string {
	switch ev.Type.Scope() {
	case verbs.ScopeQP:
		if ev.QP != nil {
			return fmt.Sprintf(" qp %#x", ev.QP.QPN())
		}
	case verbs.ScopePort:
		return fmt.Sprintf(" port %d", ev.Port)
	}
	return ""
}
