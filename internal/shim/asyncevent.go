package shim

import (
	"errors"
	"slices"
	"strings"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// keepEvent decides about an async event the application is about to
// get on device dev of context ctx (cmd/libibpath's asyncev.c keeps it
// when this returns true, acknowledging it for the application). NCCL's
// async thread ends the communicator on QP_FATAL, QP_REQ_ERR,
// QP_ACCESS_ERR and DEVICE_FATAL, although layer 2 carries the QPs on
// their backups by then, as rdma_cm's UNREACHABLE would end a
// connection (cmevent.go). So:
//   - a QP event of those three is kept when layer 2 carries the QP
//     (l2Carries: armed or failed over, not surfaced, not left to the
//     application after its own move to ERR or RESET);
//   - DEVICE_FATAL is kept when layer 2 carries every QP of ctx, and
//     there is at least one.
//
// Every other event, and those of QPs no layer 2 carries (never
// protected, or their failover surfaced), reach the application as
// without the shim: what layer 2 cannot carry fails as plain verbs
// report it. A failover that surfaces later reports its error in the
// QP's completions, as plain verbs do, and gives the events kept for it
// back (giveBackKept). A kept event is counted, named in the status of
// the QPs it concerned (KeptEvents) and logged at Info.
func (r *Runtime) keepEvent(ctx uintptr, dev string, ev verbs.EventType, qpn uint32) bool {
	switch ev {
	case verbs.EventQPFatal, verbs.EventQPReqErr, verbs.EventQPAccessErr, verbs.EventDeviceFatal:
	default:
		return false
	}
	r.mu.Lock()
	var kept []*qp
	why := ""
	if ev == verbs.EventDeviceFatal {
		for k, q := range r.qps {
			if k.ctx != ctx {
				continue
			}
			if !l2Carries(q.status) {
				why = "layer 2 does not carry all the device's QPs"
				kept = nil
				break
			}
			kept = append(kept, q)
		}
		if kept == nil && why == "" {
			why = "the application has no QP there that layer 2 carries"
		}
	} else {
		switch q := r.qps[qpKey{ctx, qpn}]; {
		case q == nil:
			why = "the shim does not know the QP"
		case !l2Carries(q.status):
			why = "layer 2 does not carry the QP"
		default:
			kept = append(kept, q)
		}
	}
	var changed []status.QP
	if kept != nil && ev == verbs.EventDeviceFatal {
		if r.fatalKept == nil {
			r.fatalKept = map[uintptr]bool{}
		}
		r.fatalKept[ctx] = true
	}
	for _, q := range kept {
		if ev != verbs.EventDeviceFatal && !slices.Contains(q.kept, ev) {
			q.kept = append(q.kept, ev)
		}
		if w := addWord(q.status.KeptEvents, ev.String()); w != q.status.KeptEvents {
			q.status.KeptEvents = w
			changed = append(changed, q.status)
		}
	}
	rep := r.rep
	r.mu.Unlock()
	if rep != nil {
		for _, s := range changed {
			if err := rep.ReportQP(s); err != nil {
				r.log.Debug("libibpath: report QP to ibpathd", "qpn", s.QPN, "err", err)
			}
		}
	}
	if kept == nil {
		r.log.Info("libibpath: async event reaches the application: "+why, "device", dev, "event", ev.String(), "qpn", qpn)
		return false
	}
	r.evKept.Add(1)
	r.log.Info("libibpath: async event kept from the application: layer 2 carries the QPs on the backup",
		"device", dev, "event", ev.String(), "qpn", qpn, "qps", len(kept))
	return true
}

// l2Carries says whether layer 2 carries a QP of status s: armed (its
// send queue in the default state, whether or not layer 1 comes first)
// or failed over, and not surfaced or left to the application (whose
// leave clears CrossNIC).
func l2Carries(s status.QP) bool {
	return s.CrossNIC != "" && s.CrossNIC != fsm.SQSurfaced.String()
}

// EventsKept is how many async events the application was kept from.
func (r *Runtime) EventsKept() uint64 { return r.evKept.Load() }

// EventsGivenBack is how many kept events went back to the application
// because the failover they were kept for surfaced.
func (r *Runtime) EventsGivenBack() uint64 { return r.evGiven.Load() }

// givenBack is a kept event on its way back to the application.
type givenBack struct {
	ctx uintptr
	qpn uint32
	ev  verbs.EventType
}

// giveBackKept: the failover of the QP k surfaced its error. Plain verbs
// would have shown the application the fatal events kept for it, and the
// device's DEVICE_FATAL if that was kept: they are queued to go back
// (returnKept, once the failover lock is released), each once. Called with
// fo.mu held.
func (r *Runtime) giveBackKept(k qpKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if x := r.qps[k]; x != nil {
		for _, ev := range x.kept {
			r.fo.gives = append(r.fo.gives, givenBack{k.ctx, k.qpn, ev})
		}
		x.kept = nil
	}
	if r.fatalKept[k.ctx] {
		delete(r.fatalKept, k.ctx)
		r.fo.gives = append(r.fo.gives, givenBack{k.ctx, 0, verbs.EventDeviceFatal})
	}
}

// returnKept hands the queued events to the hot path (without it, or when
// it cannot take one, the event stays kept: logged).
func (r *Runtime) returnKept(g EventGiver, gives []givenBack) {
	for _, b := range gives {
		err := errors.New("the data path cannot give events back")
		if g != nil {
			err = g.GiveBack(b.ctx, b.qpn, b.ev)
		}
		if err != nil {
			r.log.Warn("libibpath: a kept async event could not be given back after the failover surfaced",
				"event", b.ev.String(), "qpn", b.qpn, "err", err)
			continue
		}
		r.evGiven.Add(1)
		r.log.Info("libibpath: async event given back to the application: the failover it was kept for surfaced",
			"event", b.ev.String(), "qpn", b.qpn)
	}
}

// addWord adds w to the comma-separated list l unless it is there.
func addWord(l, w string) string {
	for _, x := range strings.Split(l, ", ") {
		if x == w {
			return l
		}
	}
	if l == "" {
		return w
	}
	return l + ", " + w
}
