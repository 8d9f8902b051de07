package demo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ibpath/ibpath/verbs"
)

// pollEvents reads the context's async events until EAGAIN, acknowledging
// each one.
func (s *scenario) pollEvents(d *device) error {
	for {
		ev, err := d.ctx.GetAsyncEvent()
		if errors.Is(err, verbs.EAGAIN) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ibv_get_async_event on %s: %w", d, err)
		}
		herr := s.onEvent(d, ev)
		d.ctx.AckAsyncEvent(ev)
		if herr != nil {
			return herr
		}
	}
}

func (s *scenario) onEvent(d *device, ev verbs.AsyncEvent) error {
	now := s.f.Now()
	rec := EventRecord{At: now, Host: d.host, Device: d.name, Type: ev.Type}
	var e *endpoint
	switch ev.Type.Scope() {
	case verbs.ScopePort:
		rec.Port = ev.Port
	case verbs.ScopeQP:
		for _, x := range d.eps {
			if x.qp == ev.QP {
				e, rec.QP = x, x.qpName
			}
		}
	}
	s.res.Events[d.host] = append(s.res.Events[d.host], rec)
	switch {
	case ev.Type == verbs.EventDeviceFatal:
		for _, x := range d.eps {
			x.t.failed = true
		}
		s.p.at(now, "%v: async event DEVICE_FATAL: the application stops using the device", d)
	case ev.Type == verbs.EventPathMig && e != nil:
		attr, err := queryPath(e)
		if err != nil {
			return err
		}
		e.port = attr.PortNum
		s.p.at(now, "%v: async event PATH_MIG: now on port %d, path_mig_state %v", e, attr.PortNum, attr.PathMigState)
	case ev.Type.Scope() == verbs.ScopeQP:
		if e != nil && ev.Type != verbs.EventCommEst && ev.Type != verbs.EventPathMigErr {
			e.t.failed = true
		}
		s.p.at(now, "%v: async event %v on QP %s", d, ev.Type, rec.QP)
	case ev.Type.Scope() == verbs.ScopePort:
		s.p.at(now, "%v: async event %v on port %d", d, ev.Type, ev.Port)
	default:
		s.p.at(now, "%v: async event %v", d, ev.Type)
	}
	return nil
}

// pollCQ drains the device's CQ: successes are counted, notifications
// verified, receives replenished, error completions printed in runs.
func (s *scenario) pollCQ(d *device) error {
	wcs := make([]verbs.WC, 64)
	var errs errRuns
	consumed := map[*endpoint]int{}
	for {
		n, err := d.cq.Poll(wcs)
		if err != nil {
			return fmt.Errorf("ibv_poll_cq on %s: %w", d, err)
		}
		if n == 0 {
			break
		}
		for _, wc := range wcs[:n] {
			e := d.byQPN(wc.QPNum)
			if e == nil {
				return fmt.Errorf("ibv_poll_cq on %s: completion for unknown qpn %#x", d, wc.QPNum)
			}
			recv := wc.WRID >= recvBase
			switch {
			case wc.Status != verbs.WCSuccess:
				e.noteError(wc.Status)
				if recv {
					e.t.recvErr++
				} else {
					e.t.sendErr++
					e.t.inflight--
				}
				errs.add(e, recv, wc)
			case recv:
				e.t.recvOK++
				e.t.winOK++
				consumed[e]++
				if msg := e.onNotify(wc.ImmData); msg != "" {
					s.p.at(s.f.Now(), "%v: DATA ERROR: %s", e, msg)
				}
			default:
				e.t.sendOK++
				e.t.winOK++
				e.t.inflight--
			}
		}
	}
	s.printErrRuns(errs)
	for _, e := range d.eps {
		if n := consumed[e]; n > 0 && !e.t.failed {
			if err := e.postRecvs(n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *device) byQPN(qpn uint32) *endpoint {
	for _, e := range d.eps {
		if e.qp.QPN() == qpn {
			return e
		}
	}
	return nil
}

// flushTrace prints the trace records gathered since the last call: all of
// them when verbose, otherwise only retries and migrations.
func (s *scenario) flushTrace() {
	for _, r := range s.trace {
		switch {
		case s.opts.Verbose:
			s.p.at(r.At, "  trace %s/%s %-5s %s", r.Host, r.Device, r.Kind, r.Detail)
		case r.Kind == "retry" || r.Kind == "apm" && strings.Contains(r.Detail, "migrated"):
			s.p.at(r.At, "%s/%s (sim %s) %s", r.Host, r.Device, r.Kind, r.Detail)
		}
	}
	s.trace = s.trace[:0]
}
