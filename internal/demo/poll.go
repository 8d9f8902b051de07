package demo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// pollEvents reads the context's async events until EAGAIN: each one is
// shown to the application, then to the host's layer-1 manager (whose
// status changes are printed), then acknowledged. It returns how many it
// read.
func (s *scenario) pollEvents(d *device) (int, error) {
	n := 0
	for {
		ev, err := d.ctx.GetAsyncEvent()
		if errors.Is(err, verbs.EAGAIN) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("ibv_get_async_event on %s: %w", d, err)
		}
		n++
		herr := s.onEvent(d, ev)
		if herr == nil {
			before := d.host.mgr.Status()
			d.host.mgr.HandleEvent(d.ctx, ev)
			s.printL1(s.diffL1(d.host, before, ev.Type.String()))
			// Layer 2 sees the default device's events after layer 1,
			// which may have handed the QP over already. PORT_ERR goes to
			// it only for a QP layer 1 does not protect (docs/CROSSNIC.md,
			// "With layer 1"): for an armed one layer 1 migrates, and hands
			// the QP over when it has no path left.
			for _, e := range d.eps {
				if e.l2 != nil && (ev.Type != verbs.EventPortErr || !s.layer1Protects(e)) {
					e.l2.conn.HandleEvent(d.ctx, ev, e.port)
					s.l2Check(e, ev.Type.String())
				}
			}
			if ev.Type == verbs.EventPortErr && s.roce() {
				s.unprotected(d, ev.Port)
			}
		}
		d.ctx.AckAsyncEvent(ev)
		if herr != nil {
			return n, herr
		}
	}
}

// layer1Protects: layer 1 still answers for e's QP (it is registered,
// neither unsupported nor handed over).
func (s *scenario) layer1Protects(e *endpoint) bool {
	st, ok := e.dev.host.mgr.QPStatus(e.qp)
	return ok && st.State != fsm.APMUnsupported && st.State != fsm.APMHandedOver
}

func (s *scenario) onEvent(d *device, ev verbs.AsyncEvent) error {
	now := s.f.Now()
	rec := EventRecord{At: now, Host: d.host.name, Device: d.name, Type: ev.Type}
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
	s.res.Events[d.host.name] = append(s.res.Events[d.host.name], rec)
	switch {
	case ev.Type == verbs.EventDeviceFatal:
		var kept []string
		for _, x := range d.eps {
			if x.l2 != nil {
				kept = append(kept, "QP "+x.qpName)
				continue
			}
			x.t.failed = true
		}
		if len(kept) > 0 {
			s.p.at(now, "%v: async event DEVICE_FATAL: %s is protected by layer 2, the application carries on posting", d, strings.Join(kept, ", "))
			break
		}
		s.p.at(now, "%v: async event DEVICE_FATAL: the application stops using the device", d)
	case ev.Type == verbs.EventPathMig && e != nil:
		attr, err := queryPath(e)
		if err != nil {
			return err
		}
		e.port = attr.PortNum
		if s.muted[e.qpName] {
			return nil
		}
		s.p.at(now, "%v: async event PATH_MIG: now on port %d, path_mig_state %v", e, attr.PortNum, attr.PathMigState)
	case ev.Type.Scope() == verbs.ScopeQP:
		if e != nil && e.l2 == nil && ev.Type != verbs.EventCommEst && ev.Type != verbs.EventPathMigErr {
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

// pollCQ drains the device's CQ (through layer 2 for a protected QP, whose
// device holds no other): successes are counted, notifications verified,
// receives replenished, error completions printed in runs.
func (s *scenario) pollCQ(d *device) error {
	var src interface {
		Poll([]verbs.WC) (int, error)
	} = d.cq
	var prot *endpoint
	for _, e := range d.eps {
		if e.l2 != nil {
			src, prot = e.l2.conn, e
		}
	}
	wcs := make([]verbs.WC, 64)
	var errs errRuns
	var l1 []l1Change
	consumed := map[*endpoint]int{}
	good := false
	for {
		n, err := src.Poll(wcs)
		if err != nil {
			return fmt.Errorf("ibv_poll_cq on %s: %w", d, err)
		}
		if n == 0 {
			break
		}
		for _, wc := range wcs[:n] {
			e := d.byQPN(wc.QPNum)
			if prot != nil && e != prot {
				// Layer 2 must give the application the default QP's number.
				prot.t.wrongQPN++
				s.p.at(s.f.Now(), "%v: LAYER 2 BUG: completion wr_id %d names qpn %#x, the QP is %#x", prot, wc.WRID, wc.QPNum, prot.qp.QPN())
				e = prot
			}
			if e == nil {
				return fmt.Errorf("ibv_poll_cq on %s: completion for unknown qpn %#x", d, wc.QPNum)
			}
			recv := wc.WRID >= recvBase
			if want := e.t.nextDone; !recv && !e.noteSend(wc.WRID) && e.t.orderErrs <= 3 {
				s.p.at(s.f.Now(), "%v: send completion wr_id %d (%s) out of turn: wr_id %d was due", e, wc.WRID, statusName(wc.Status), want)
			}
			switch {
			case wc.Status != verbs.WCSuccess:
				e.noteError(wc.Status)
				// The shim tells layer 1 about every error completion.
				before := d.host.mgr.Status()
				d.host.mgr.ErrorCompletion(e.qp, wc.Status)
				l1 = append(l1, s.diffL1(d.host, before, "error completion")...)
				if recv {
					e.t.recvErr++
				} else {
					e.t.sendErr++
					e.t.inflight--
				}
				errs.add(e, recv, wc)
			case recv:
				good = true
				s.noteOK(e)
				e.t.recvOK++
				e.t.winOK++
				consumed[e]++
				if msg := e.onNotify(wc.ImmData); msg != "" {
					s.p.at(s.f.Now(), "%v: DATA ERROR: %s", e, msg)
				}
			default:
				good = true
				s.noteOK(e)
				e.t.sendOK++
				e.t.winOK++
				// As the shim will: a WR posted after layer 1's own
				// migration completed, so the peer has followed.
				if e.awaitFrom >= 0 && int64(wc.WRID/2) >= e.awaitFrom {
					e.awaitFrom = -1
					before := d.host.mgr.Status()
					d.host.mgr.PeerFollowed(e.qp)
					l1 = append(l1, s.diffL1(d.host, before, "peer followed")...)
				}
				e.t.inflight--
			}
		}
	}
	if prot != nil {
		s.l2Check(prot, "poll")
		if good {
			s.l2Resumed(prot)
		}
	}
	s.printErrRuns(errs)
	s.printL1(l1)
	for _, e := range d.eps {
		if n := consumed[e]; n > 0 && !e.t.failed {
			err := e.postRecvs(n)
			s.l2Check(e, "ibv_post_recv")
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// noteOK records a successful completion of e, and the pause it ends.
func (s *scenario) noteOK(e *endpoint) {
	now := s.f.Now()
	if e.t.lastOK > 0 && now-e.t.lastOK > pauseMin {
		s.res.Pauses = append(s.res.Pauses, Pause{Host: e.dev.host.name, QP: e.qpName, From: e.t.lastOK, To: now})
	}
	if now > pullAt && e.t.lastOK <= pullAt && e.t.lastOK > 0 {
		s.pullGap(e, now-e.t.lastOK)
	}
	e.t.lastOK = now
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
// them when verbose, otherwise the first local ACK timeout of a series
// (every one on RoCE, where no migration cuts the series short) and
// migrations the HCA made without raising an event (retries exhausted);
// nothing of a QP whose bouncing is muted.
func (s *scenario) flushTrace() {
	for _, r := range s.trace {
		switch {
		case s.opts.Verbose:
			s.p.at(r.At, "  trace %s/%s %-5s %s", r.Host, r.Device, r.Kind, r.Detail)
		case s.mutedTrace(r):
		case r.Kind == "retry" && s.traceEndpoint(r) != nil && s.traceEndpoint(r).l2 != nil:
			// Layer 2's probes of a reset default QP: their retries are
			// told with the probe's answer.
		case r.Kind == "retry" && (s.roce() || strings.Contains(r.Detail, "retry 1/")),
			r.Kind == "apm" && strings.Contains(r.Detail, "retries exhausted"):
			s.p.at(r.At, "%s/%s (sim %s) %s", r.Host, r.Device, r.Kind, r.Detail)
		}
	}
	s.trace = s.trace[:0]
}

// mutedTrace: the record is about a QP whose bouncing is muted.
func (s *scenario) mutedTrace(r sim.TraceRecord) bool {
	e := s.traceEndpoint(r)
	return e != nil && s.muted[e.qpName]
}

// traceEndpoint is the endpoint a trace record is about (nil: none).
func (s *scenario) traceEndpoint(r sim.TraceRecord) *endpoint {
	var qpn uint32
	if _, err := fmt.Sscanf(r.Detail, "qp %v", &qpn); err != nil {
		return nil
	}
	for _, d := range s.devs {
		if d.host.name == r.Host && d.name == r.Device {
			return d.byQPN(qpn)
		}
	}
	return nil
}
