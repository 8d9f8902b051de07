package sim

import (
	"github.com/ibpath/ibpath/verbs"
)

// CompChannel is a simulated completion channel. It implements
// verbs.CompChannel.
type CompChannel struct {
	ctx       *Context
	pending   []*CQ
	nCQ       int
	destroyed bool
}

var _ verbs.CompChannel = (*CompChannel)(nil)

// CreateCompChannel implements ibv_create_comp_channel.
func (c *Context) CreateCompChannel() (verbs.CompChannel, error) {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.usable("ibv_create_comp_channel"); err != nil {
		return nil, err
	}
	return &CompChannel{ctx: c}, nil
}

// GetCQEvent implements ibv_get_cq_event on a non-blocking channel.
func (ch *CompChannel) GetCQEvent() (verbs.CQ, error) {
	f := ch.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch.destroyed {
		return nil, verbs.Errorf("ibv_get_cq_event", verbs.EINVAL, "channel destroyed")
	}
	if len(ch.pending) == 0 {
		return nil, verbs.Errorf("ibv_get_cq_event", verbs.EAGAIN, "no CQ event pending")
	}
	cq := ch.pending[0]
	ch.pending = ch.pending[1:]
	cq.eventsUnacked++
	return cq, nil
}

// AckCQEvents implements ibv_ack_cq_events.
func (ch *CompChannel) AckCQEvents(cq verbs.CQ, n int) {
	f := ch.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q, ok := cq.(*CQ); ok {
		q.eventsUnacked -= n
		if q.eventsUnacked < 0 {
			q.eventsUnacked = 0
		}
	}
}

// Destroy implements ibv_destroy_comp_channel: EBUSY while CQs use it.
func (ch *CompChannel) Destroy() error {
	f := ch.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch.destroyed {
		return verbs.Errorf("ibv_destroy_comp_channel", verbs.EINVAL, "already destroyed")
	}
	if ch.nCQ > 0 {
		return verbs.Errorf("ibv_destroy_comp_channel", verbs.EBUSY, "%d CQs still use the channel", ch.nCQ)
	}
	ch.destroyed = true
	return nil
}

// CQ is a simulated completion queue, a ring of work completions. It
// implements verbs.CQ.
type CQ struct {
	ctx           *Context
	ch            *CompChannel
	ring          []verbs.WC
	head, n       int
	armed         bool
	solicitedOnly bool
	overrun       bool
	nQP           int
	eventsUnacked int
	destroyed     bool
}

var _ verbs.CQ = (*CQ)(nil)

// CreateCQ implements ibv_create_cq. The capacity is rounded up to a power
// of two minus one, as mlx5 does.
func (c *Context) CreateCQ(cqe int, ch verbs.CompChannel, compVector int) (verbs.CQ, error) {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.usable("ibv_create_cq"); err != nil {
		return nil, err
	}
	if cqe < 1 || cqe > maxCQE {
		return nil, verbs.Errorf("ibv_create_cq", verbs.EINVAL, "cqe %d out of range 1..%d", cqe, maxCQE)
	}
	if compVector < 0 {
		return nil, verbs.Errorf("ibv_create_cq", verbs.EINVAL, "negative completion vector")
	}
	var sch *CompChannel
	if ch != nil {
		var ok bool
		sch, ok = ch.(*CompChannel)
		if !ok || sch.ctx != c || sch.destroyed {
			return nil, verbs.Errorf("ibv_create_cq", verbs.EINVAL, "completion channel of another device or destroyed")
		}
		sch.nCQ++
	}
	size := 1
	for size < cqe+1 {
		size <<= 1
	}
	return &CQ{ctx: c, ch: sch, ring: make([]verbs.WC, size-1)}, nil
}

// Context returns the device context.
func (q *CQ) Context() verbs.Context { return q.ctx }

// CQE is the capacity.
func (q *CQ) CQE() int { return len(q.ring) }

// Poll implements ibv_poll_cq. After an overrun the CQ is in error and Poll
// fails with EIO once the entries it holds are drained.
func (q *CQ) Poll(wc []verbs.WC) (int, error) {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.destroyed {
		return 0, verbs.Errorf("ibv_poll_cq", verbs.EINVAL, "CQ destroyed")
	}
	k := 0
	for k < len(wc) && q.n > 0 {
		wc[k] = q.ring[q.head]
		q.head++
		if q.head == len(q.ring) {
			q.head = 0
		}
		q.n--
		k++
	}
	if k == 0 && q.overrun {
		return 0, verbs.Errorf("ibv_poll_cq", verbs.EIO, "CQ overrun")
	}
	return k, nil
}

// Len reports how many completions wait to be polled.
func (q *CQ) Len() int {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	return q.n
}

// ReqNotify implements ibv_req_notify_cq.
func (q *CQ) ReqNotify(solicitedOnly bool) error {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.destroyed {
		return verbs.Errorf("ibv_req_notify_cq", verbs.EINVAL, "CQ destroyed")
	}
	if q.ch == nil {
		return verbs.Errorf("ibv_req_notify_cq", verbs.EINVAL, "CQ has no completion channel")
	}
	q.armed = true
	q.solicitedOnly = solicitedOnly
	return nil
}

// Destroy implements ibv_destroy_cq. It fails with EBUSY while QPs use the
// CQ or CQ events are unacknowledged (where libibverbs would block forever).
func (q *CQ) Destroy() error {
	f := q.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.destroyed {
		return verbs.Errorf("ibv_destroy_cq", verbs.EINVAL, "already destroyed")
	}
	if q.nQP > 0 {
		return verbs.Errorf("ibv_destroy_cq", verbs.EBUSY, "%d QPs still use the CQ", q.nQP)
	}
	if q.eventsUnacked > 0 {
		return verbs.Errorf("ibv_destroy_cq", verbs.EBUSY, "%d events not acknowledged", q.eventsUnacked)
	}
	q.destroyed = true
	if q.ch != nil {
		q.ch.nCQ--
	}
	return nil
}

// push adds a completion. solicited marks a receive completion of a
// solicited message, which wakes a solicited-only notification.
func (q *CQ) push(wc verbs.WC, solicited bool) {
	f := q.ctx.fab()
	f.stats.Completions++
	if f.tracer != nil {
		f.trace(q.ctx.hca, "wc", "qp %#x wr_id %d %v %v len %d", wc.QPNum, wc.WRID, wc.Opcode, wc.Status, wc.ByteLen)
	}
	if a := q.ctx.hca; a.cqeDelay > 0 && a.alive {
		gen := a.gen
		f.at(f.now+a.cqeDelay, func() {
			if a.gen != gen {
				if f.tracer != nil {
					f.trace(a, "wc", "qp %#x wr_id %d: CQE lost, the HCA died before writing it", wc.QPNum, wc.WRID)
				}
				return
			}
			q.write(wc, solicited)
		})
		return
	}
	q.write(wc, solicited)
}

// write puts a completion into the CQ's memory.
func (q *CQ) write(wc verbs.WC, solicited bool) {
	f := q.ctx.fab()
	if q.destroyed || q.overrun {
		return
	}
	if q.n == len(q.ring) {
		q.overrun = true
		q.ctx.raise(verbs.AsyncEvent{Type: verbs.EventCQErr, CQ: q})
		f.at(f.now, q.failQPs)
		return
	}
	i := q.head + q.n
	if i >= len(q.ring) {
		i -= len(q.ring)
	}
	q.ring[i] = wc
	q.n++
	if q.armed && (!q.solicitedOnly || solicited || wc.Status != verbs.WCSuccess) {
		q.armed = false
		q.ch.pending = append(q.ch.pending, q)
	}
}

// failQPs: after an overrun the QPs that complete into this CQ cannot
// report completions any more; they fail with QP_FATAL (a local
// catastrophic error) and go to ERR. It runs as its own event, never in
// the middle of a QP's completion loop.
func (q *CQ) failQPs() {
	for _, qp := range q.ctx.hca.qpList {
		if qp.sendCQ != q && qp.recvCQ != q {
			continue
		}
		if qp.state == verbs.QPSReset || qp.state == verbs.QPSErr {
			continue
		}
		qp.raise(verbs.EventQPFatal)
		qp.enterErr(^uint64(0), verbs.WCWRFlushErr)
	}
}
