package sim

import "github.com/ibpath/ibpath/verbs"

// SRQ is a simulated shared receive queue. It implements verbs.SRQ: the
// QPs created on it consume its WQEs in the order posted, whichever QP a
// message arrives on (rules 98-102 of docs/SIMULATOR.md).
type SRQ struct {
	pd     *PD
	ctx    *Context
	hca    *HCA
	rq     *recvRing
	maxSGE int
	// limit is the armed low watermark (0: not armed).
	limit         int
	nQP           int
	eventsUnacked int
	destroyed     bool
}

var (
	_ verbs.SRQ        = (*SRQ)(nil)
	_ verbs.SRQCreator = (*PD)(nil)
)

// CreateSRQ implements ibv_create_srq. MaxWR is rounded up to a power of
// two; a Limit above 0 arms the limit event at once, as rxe
// (rxe_srq_from_init) and mlx5 (create_srq's lwm) do.
func (pd *PD) CreateSRQ(attr verbs.SRQAttr) (verbs.SRQ, error) {
	c := pd.ctx
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	const op = "ibv_create_srq"
	if err := c.usable(op); err != nil {
		return nil, err
	}
	if pd.freed {
		return nil, verbs.Errorf(op, verbs.EINVAL, "PD deallocated")
	}
	switch {
	case attr.MaxWR <= 0 || attr.MaxWR > maxQPWR:
		return nil, verbs.Errorf(op, verbs.EINVAL, "max_wr %d out of range 1..%d", attr.MaxWR, maxQPWR)
	case attr.MaxSGE < 0 || attr.MaxSGE > maxSGE:
		return nil, verbs.Errorf(op, verbs.EINVAL, "max_sge %d out of range 0..%d", attr.MaxSGE, maxSGE)
	case attr.Limit < 0 || attr.Limit >= attr.MaxWR:
		return nil, verbs.Errorf(op, verbs.EINVAL, "srq_limit %d not below max_wr %d", attr.Limit, attr.MaxWR)
	}
	n, sge := pow2(attr.MaxWR), max(attr.MaxSGE, 1)
	s := &SRQ{pd: pd, ctx: c, hca: c.hca, rq: newRecvRing(n, sge), maxSGE: sge, limit: attr.Limit}
	pd.nSRQ++
	return s, nil
}

// PD returns the protection domain.
func (s *SRQ) PD() verbs.PD { return s.pd }

// PostRecv implements ibv_post_srq_recv: independent of the state of the
// QPs on the SRQ; ENOMEM when full, EINVAL for too many SGEs, EIO on a
// dead device (mlx5_ib_post_srq_recv).
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) (int, error) {
	f := s.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	const op = "ibv_post_srq_recv"
	if s.destroyed {
		return 0, verbs.Errorf(op, verbs.EINVAL, "SRQ destroyed")
	}
	if err := s.ctx.usable(op); err != nil {
		return 0, err
	}
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGList) > s.maxSGE {
			return i, verbs.Errorf(op, verbs.EINVAL, "%d SGEs above max_sge %d", len(wr.SGList), s.maxSGE)
		}
		if s.rq.full() {
			return i, verbs.Errorf(op, verbs.ENOMEM, "SRQ full (%d WRs)", len(s.rq.wqe))
		}
		s.rq.push(wr)
	}
	return len(wrs), nil
}

// Modify implements ibv_modify_srq. Resizing (SRQAttrMaxWR) is refused
// with EINVAL as mlx5_ib_modify_srq does (rxe and rdmavt resize: known
// difference 21); a limit must be below the SRQ's size.
func (s *SRQ) Modify(attr verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	f := s.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	const op = "ibv_modify_srq"
	switch {
	case s.destroyed:
		return verbs.Errorf(op, verbs.EINVAL, "SRQ destroyed")
	case mask&^(verbs.SRQAttrMaxWR|verbs.SRQAttrLimit) != 0:
		return verbs.Errorf(op, verbs.EINVAL, "unknown attribute mask %#x", int(mask))
	case mask&verbs.SRQAttrMaxWR != 0:
		return verbs.Errorf(op, verbs.EINVAL, "resizing an SRQ is not supported")
	}
	if err := s.ctx.usable(op); err != nil {
		return err
	}
	if mask&verbs.SRQAttrLimit != 0 {
		if attr.Limit < 0 || attr.Limit >= len(s.rq.wqe) {
			return verbs.Errorf(op, verbs.EINVAL, "srq_limit %d not below the SRQ's %d WRs", attr.Limit, len(s.rq.wqe))
		}
		s.limit = attr.Limit
	}
	return nil
}

// Query implements ibv_query_srq; Limit is 0 once the event fired.
func (s *SRQ) Query() (verbs.SRQAttr, error) {
	f := s.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.destroyed {
		return verbs.SRQAttr{}, verbs.Errorf("ibv_query_srq", verbs.EINVAL, "SRQ destroyed")
	}
	return verbs.SRQAttr{MaxWR: len(s.rq.wqe), MaxSGE: s.maxSGE, Limit: s.limit}, nil
}

// Outstanding reports how many WRs are posted and not consumed.
func (s *SRQ) Outstanding() int {
	f := s.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	return s.rq.len()
}

// Destroy implements ibv_destroy_srq: EBUSY while a QP uses the SRQ
// (ib_destroy_srq_user's usecnt) or an event on it is unacknowledged;
// its WRs are discarded without completions.
func (s *SRQ) Destroy() error {
	f := s.ctx.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	const op = "ibv_destroy_srq"
	switch {
	case s.destroyed:
		return verbs.Errorf(op, verbs.EINVAL, "already destroyed")
	case s.nQP > 0:
		return verbs.Errorf(op, verbs.EBUSY, "%d QPs still use the SRQ", s.nQP)
	case s.eventsUnacked > 0:
		return verbs.Errorf(op, verbs.EBUSY, "%d async events not acknowledged", s.eventsUnacked)
	}
	s.destroyed = true
	s.rq.head = s.rq.tail
	s.pd.nSRQ--
	return nil
}

// raise queues an SRQ async event on the SRQ's context.
func (s *SRQ) raise(t verbs.EventType) {
	s.ctx.raise(verbs.AsyncEvent{Type: t, SRQ: s})
}
