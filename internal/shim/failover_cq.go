package shim

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"syscall"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/verbs"
)

// cqRoute is one of the application's CQs polled by the runtime: a
// diverted QP completes into it (or did, and completions the application
// is owed are still queued). Every completion polled from it goes to the
// diverted QP's Conn (through its legCQ) or, for QPs that are not
// diverted, to the application through queue, retired in the hot path's
// rings.
type cqRoute struct {
	cq       verbs.CQ
	ctx      uintptr
	diverted bool       // the hot path routes the application's polls here
	express  bool       // on the express lane: polled in C (express.go)
	laneWait int        // polls before tryExpress scans again
	qps      []*l2qp    // the diverted QPs completing into it
	queue    []verbs.WC // completions owed to the application, in order
	buf      []verbs.WC
}

// pollBatches bounds the batches one PollCQ takes from the real CQ.
const pollBatches = 4

// routeFor returns the route of cq, made if needed. Called with fo.mu held.
func (r *Runtime) routeFor(cq verbs.CQ, ctx uintptr) *cqRoute {
	rt := r.fo.cqs[cq]
	if rt == nil {
		rt = &cqRoute{cq: cq, ctx: ctx, buf: make([]verbs.WC, 32)}
		r.fo.cqs[cq] = rt
	}
	return rt
}

// pumpOnce polls one batch from the real CQ and routes it.
func (r *Runtime) pumpOnce(rt *cqRoute) (int, error) {
	n, err := rt.cq.Poll(rt.buf)
	for _, wc := range rt.buf[:n] {
		r.routeWC(rt, wc)
	}
	return n, err
}

// routeWC sends one completion polled from rt's CQ where it belongs: to
// the Conn of a diverted QP; an error of an armed QP that is not
// diverted yet starts its failover (settle diverts it); anything else to
// the application unchanged, retired in the hot path's rings.
func (r *Runtime) routeWC(rt *cqRoute, wc verbs.WC) {
	q := r.fo.qps[qpKey{rt.ctx, wc.QPNum}]
	switch {
	case q != nil && wc.WRID == crossnic.NudgeWRID && rt.cq == q.app.SendCQ && (wc.Status == verbs.WCWRFlushErr || !isRecvWC(wc) && wc.Status == verbs.WCSuccess || !q.armed):
		// Layer 1's nudge (Nudger): its flush is no one's, and it
		// retires nothing of the application's. An error of its own
		// on an armed QP (RETRY_EXC_ERR: the new path failed too) is
		// the QP's fault: it goes on to the Conn like any first error
		// (lip_nudge_fault), which keeps it from the application.
		r.fo.nudgeWCs++
	case q != nil && (q.diverted || q.intercepted):
		q.leg.push(wc, rt.cq == q.app.RecvCQ)
	case q != nil && q.armed && wc.Status != verbs.WCSuccess && r.fo.hp != nil:
		q.intercepted = true
		q.startFault("completion error "+wc.Status.String()+" on the default QP", r.now())
		q.leg.push(wc, rt.cq == q.app.RecvCQ)
		r.fo.todo = append(r.fo.todo, q)
	default:
		rt.queue = append(rt.queue, wc)
		if r.fo.hp != nil {
			r.fo.hp.Retire(rt.ctx, wc)
		}
	}
}

// pumpQP polls one batch from each CQ of q.
func (r *Runtime) pumpQP(q *l2qp) error {
	var first error
	for _, cq := range q.cqs() {
		rt := r.fo.cqs[cq]
		if rt == nil {
			continue
		}
		if _, err := r.pumpOnce(rt); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// toApp queues a completion of q for the application on the CQ it
// belongs to.
func (r *Runtime) toApp(q *l2qp, w legWC) {
	cq := q.app.SendCQ
	if w.recv {
		cq = q.app.RecvCQ
	}
	rt := r.routeFor(cq, q.key.ctx)
	rt.queue = append(rt.queue, w.wc)
	r.wake(cq)
}

// wake has the application woken for cq once the failover lock is
// released (unlockFO).
func (r *Runtime) wake(cq verbs.CQ) {
	if !slices.Contains(r.fo.wakes, cq) {
		r.fo.wakes = append(r.fo.wakes, cq)
	}
}

// runConn gives q's Conn what its CQs hold and queues what the
// application is owed. A diverted QP without a Conn runs as plain verbs.
// A QP on the express lane is left alone: the lane polls its CQs and its
// backup's (an event of its backup CQ read before it went on the lane
// may still bring the notifier here).
func (r *Runtime) runConn(q *l2qp) error {
	if q.gone || q.destroying || !q.diverted || q.express {
		return nil
	}
	if q.conn == nil {
		err := r.pumpQP(q)
		for _, w := range q.leg.take() {
			r.toApp(q, w)
		}
		return err
	}
	q.polledAt = time.Now()
	for {
		n, err := q.conn.Poll(r.fo.out)
		if n > 0 && r.log.Enabled(context.Background(), slog.LevelDebug) {
			sq, rq := q.conn.State()
			r.log.Debug("libibpath: layer 2 completions for the application", "qpn", q.key.qpn, "n", n,
				"first_wr_id", r.fo.out[0].WRID, "first_status", r.fo.out[0].Status.String(), "first_opcode", r.fo.out[0].Opcode, "sq", sq.String(), "rq", rq.String())
		}
		for _, wc := range r.fo.out[:n] {
			r.toApp(q, legWC{wc: wc, recv: q.split() && wc.Opcode&verbs.WCRecv != 0})
		}
		if err != nil {
			r.observe(q)
			return err
		}
		if n < len(r.fo.out) {
			break
		}
	}
	r.observe(q)
	return nil
}

// maybeRelease gives a CQ back to the hot path once no diverted QP
// completes into it and the application has polled what it was owed.
func (r *Runtime) maybeRelease(rt *cqRoute) {
	if len(rt.qps) > 0 || len(rt.queue) > 0 {
		return
	}
	delete(r.fo.cqs, rt.cq)
	if rt.diverted && r.fo.hp != nil {
		r.fo.hp.Release(rt.cq)
		r.log.Debug("libibpath: layer 2 gave a CQ back to the hot path")
	}
}

// PollCQ polls cq for the application: the hot path sends here the polls
// of every CQ into which a diverted QP completes. Completions of QPs that
// are not diverted come back unchanged (and are retired in the hot
// path's rings); those of diverted QPs go through their Conns, which
// return what the application is owed, each completion once, in order
// per QP.
func (r *Runtime) PollCQ(cq verbs.CQ, wc []verbs.WC) (int, error) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	rt := r.fo.cqs[cq]
	if rt == nil {
		ctx, ok := r.fo.cqCtx[cq]
		if !ok {
			// Never diverted and no QP of it is mirrored: as it is.
			return cq.Poll(wc)
		}
		rt = r.routeFor(cq, ctx) // given back meanwhile: polled here once more
	}
	if rt.express {
		return 0, ErrExpress
	}
	var perr error
	if len(rt.queue) < len(wc) {
		for i := 0; i < pollBatches; i++ {
			n, err := r.pumpOnce(rt)
			if err != nil {
				perr = err
				break
			}
			if n < len(rt.buf) {
				break
			}
		}
	}
	r.settle()
	for i := 0; i < len(rt.qps); i++ {
		if err := r.runConn(rt.qps[i]); err != nil && perr == nil {
			perr = err
		}
	}
	r.settle()
	n := copy(wc, rt.queue)
	rt.queue = rt.queue[:copy(rt.queue, rt.queue[n:])]
	r.fo.polls++
	if len(rt.queue) == 0 {
		r.tryExpress(rt)
	}
	if (n > 0 || r.fo.polls&0xffff == 0) && r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug("libibpath: layer 2 poll_cq", "returned", n, "queued", len(rt.queue), "qps", len(rt.qps), "polls", r.fo.polls, "err", perr)
	}
	r.maybeRelease(rt)
	if n == 0 && perr != nil {
		return 0, verbsErr("ibv_poll_cq", verbs.EIO, perr)
	}
	return n, nil
}

// PostSend posts send WRs to a diverted QP, as ibv_post_send: it returns
// how many were posted and, on error, one carrying the errno (wrs[n] is
// the bad WR).
func (r *Runtime) PostSend(ctx uintptr, qpn uint32, wrs []verbs.SendWR) (int, error) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	q := r.fo.qps[qpKey{ctx, qpn}]
	if q == nil {
		return 0, verbs.Errorf("ibv_post_send", verbs.EINVAL, "QP %#x is not diverted to layer 2", qpn)
	}
	if !q.diverted {
		return 0, ErrHome // switched back while the post was on its way
	}
	if q.express {
		for i := range wrs {
			if !crossnic.Replayable(wrs[i].Opcode) {
				// the lane sends it here: the backup cannot carry it
				if x := r.express(); x != nil && !x.ExpressStats(q.app).Surfaced {
					r.surfaceExpress(q, fmt.Sprintf("WR %d is a %v, which the backup QP cannot carry", wrs[i].WRID, wrs[i].Opcode))
				}
				r.settle()
				return 0, ErrExpress
			}
		}
		lkeys, rkeys := laneKeysOf(wrs)
		return 0, r.expressKeys(q, lkeys, rkeys)
	}
	var n int
	var err error
	if q.conn == nil {
		n, err = q.qp.PostSend(wrs)
	} else {
		n, err = q.conn.PostSend(wrs)
		if r.log.Enabled(context.Background(), slog.LevelDebug) {
			sq, rq := q.conn.State()
			r.log.Debug("libibpath: layer 2 post_send", "qpn", qpn, "n", len(wrs), "posted", n, "err", err, "sq", sq.String(), "rq", rq.String(), "stats", fmt.Sprintf("%+v", q.conn.Stats()))
		}
		r.observe(q)
	}
	r.settle()
	return n, verbsErr("ibv_post_send", verbs.EINVAL, err)
}

// PostRecv posts receive WRs to a diverted QP, as ibv_post_recv.
func (r *Runtime) PostRecv(ctx uintptr, qpn uint32, wrs []verbs.RecvWR) (int, error) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	q := r.fo.qps[qpKey{ctx, qpn}]
	if q == nil {
		return 0, verbs.Errorf("ibv_post_recv", verbs.EINVAL, "QP %#x is not diverted to layer 2", qpn)
	}
	if !q.diverted {
		return 0, ErrHome // switched back while the post was on its way
	}
	if q.express {
		var lkeys []uint32
		for _, w := range wrs {
			for _, s := range w.SGList {
				lkeys = append(lkeys, s.LKey)
			}
		}
		return 0, r.expressKeys(q, lkeys, nil)
	}
	var n int
	var err error
	if q.conn == nil {
		n, err = q.qp.PostRecv(wrs)
	} else {
		n, err = q.conn.PostRecv(wrs)
		r.observe(q)
	}
	r.settle()
	return n, verbsErr("ibv_post_recv", verbs.EINVAL, err)
}

// verbsErr makes sure err carries an errno, as the verb op would return
// (errno when it carries none).
func verbsErr(op string, errno syscall.Errno, err error) error {
	if err == nil || verbs.ErrnoOf(err) != 0 {
		return err
	}
	return verbs.Errorf(op, errno, "%v", err)
}

// legWC is a completion of a diverted QP polled from its CQs; recv says
// it belongs to the receive queue's CQ (when the QP has two).
type legWC struct {
	wc   verbs.WC
	recv bool
}

// legCQ is the default-leg CQ of a diverted QP's Conn: the completions of
// that QP demultiplexed from the application's CQs (which other QPs may
// share). Polling it pumps the real CQs when it holds nothing.
type legCQ struct {
	r       *Runtime
	q       *l2qp
	pending []legWC
}

var _ verbs.CQ = (*legCQ)(nil)

// push adds a completion of the QP polled from the real CQ; fromRecvCQ
// says it came from the QP's receive CQ. On a QP with two CQs an error
// completion (whose opcode verbs leaves undefined) is given an opcode of
// its queue, so the Conn's output can be routed back by opcode.
func (l *legCQ) push(wc verbs.WC, fromRecvCQ bool) {
	recv := false
	if l.q.split() {
		recv = fromRecvCQ
		if wc.Status != verbs.WCSuccess {
			switch {
			case recv:
				wc.Opcode = verbs.WCRecv
			case wc.Opcode&verbs.WCRecv != 0:
				wc.Opcode = verbs.WCSend
			}
		}
	}
	l.pending = append(l.pending, legWC{wc: wc, recv: recv})
}

// take returns and forgets every pending completion.
func (l *legCQ) take() []legWC {
	p := l.pending
	l.pending = nil
	return p
}

func (l *legCQ) Context() verbs.Context { return l.q.app.SendCQ.Context() }
func (l *legCQ) CQE() int               { return l.q.app.SendCQ.CQE() }

// Poll returns the QP's completions, oldest first.
func (l *legCQ) Poll(wc []verbs.WC) (int, error) {
	if len(l.pending) == 0 {
		if err := l.r.pumpQP(l.q); err != nil && len(l.pending) == 0 {
			return 0, err
		}
	}
	n := min(len(wc), len(l.pending))
	for i := 0; i < n; i++ {
		wc[i] = l.pending[i].wc
	}
	l.pending = l.pending[:copy(l.pending, l.pending[n:])]
	return n, nil
}

// ReqNotify: the runtime drives the Conn; nothing to arm.
func (l *legCQ) ReqNotify(bool) error { return nil }

// Destroy: the CQ is the application's.
func (l *legCQ) Destroy() error {
	return verbs.Errorf("ibv_destroy_cq", verbs.EINVAL, "layer 2's view of an application CQ")
}

// isRecvWC reports whether a successful completion is a receive's.
func isRecvWC(wc verbs.WC) bool { return wc.Opcode&verbs.WCRecv != 0 }
