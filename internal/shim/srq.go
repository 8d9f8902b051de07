package shim

import (
	"fmt"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/verbs"
)

// Layer 2 and the application's shared receive queues. A QP on an SRQ
// receives whatever the SRQ holds, and a receive cannot be taken back
// from an SRQ, so the QPs of one SRQ fail over together
// (crossnic.SRQGroup, docs/CROSSNIC.md "Shared receive queues"): when one
// is diverted, all are, the hot path hands over the SRQ's outstanding
// receives (SRQHotpath.DivertSRQ), and its posts come here
// (PostSRQRecv). An SRQ moves only when every QP on it has its backup
// connected; until then a fault of one of them surfaces as plain verbs
// report it.

// l2srq is an SRQ of the application that layer 2 mirrored.
type l2srq struct {
	ctx   uintptr
	srq   verbs.SRQ
	set   *shadowSet
	qps   []*l2qp            // the protected QPs on it
	group *crossnic.SRQGroup // once its receives are layer 2's (diverted)
}

func (g *l2srq) leave(q *l2qp) {
	for i, x := range g.qps {
		if x == q {
			g.qps = append(g.qps[:i], g.qps[i+1:]...)
			break
		}
	}
	if g.group != nil && q.conn != nil {
		g.group.Leave(q.conn)
	}
}

// SRQCreated mirrors an SRQ the application created on pd: its backup
// SRQ is made on the backup device. It reports whether layer 2 follows
// it (the hot path then records its receives, and its QPs are
// protected); false without a shadow, or when the backup SRQ could not
// be made (said at warn).
func (r *Runtime) SRQCreated(ctx uintptr, pd verbs.PD, srq verbs.SRQ) bool {
	r.l2mu.Lock()
	s := r.shadows[ctx]
	var err error
	if s != nil {
		err = s.sh.CreateSRQ(pd, srq)
	}
	r.l2mu.Unlock()
	if s == nil {
		return false
	}
	if err != nil {
		r.log.Warn("libibpath: mirror SRQ on the backup; its QPs are not protected", "device", s.dev, "err", err)
		return false
	}
	r.fo.mu.Lock()
	r.fo.srqs[srq] = &l2srq{ctx: ctx, srq: srq, set: s}
	r.fo.mu.Unlock()
	r.log.Debug("libibpath: layer 2 follows an SRQ", "device", s.dev, "backup", s.backup)
	return true
}

// SRQDestroyed releases the backup of an SRQ the application destroyed.
func (r *Runtime) SRQDestroyed(ctx uintptr, srq verbs.SRQ) {
	r.fo.mu.Lock()
	g := r.fo.srqs[srq]
	delete(r.fo.srqs, srq)
	r.fo.mu.Unlock()
	if g == nil {
		return
	}
	r.l2mu.Lock()
	defer r.l2mu.Unlock()
	if err := g.set.sh.DestroySRQ(srq); err != nil {
		r.log.Warn("libibpath: release the backup of a destroyed SRQ", "device", g.set.dev, "err", err)
	}
}

// divertSRQ diverts t, a QP on an SRQ, with every other QP on the SRQ,
// and hands the SRQ's receives to a crossnic.SRQGroup; t's failover,
// which its caller starts, moves them. When some QP on the SRQ has no
// backup connected (or the hot path cannot hand the SRQ over), the SRQ
// cannot move: t alone is diverted and its error surfaces. Called with
// fo.mu held.
func (r *Runtime) divertSRQ(t *l2qp) bool {
	g := t.srq
	sh, ok := r.fo.hp.(SRQHotpath)
	why := ""
	switch {
	case !ok:
		why = "the hot path does not hand SRQs over"
	case g.group != nil:
		why = "its SRQ's receives moved already"
	}
	for _, m := range g.qps {
		switch {
		case why != "":
		case m.destroying:
			why = fmt.Sprintf("QP %#x on the same SRQ is being destroyed", m.key.qpn)
		case !m.armed || m.diverted || m.express || m.left != "":
			why = fmt.Sprintf("QP %#x on the same SRQ has no backup connected", m.key.qpn)
		}
	}
	if why != "" {
		return r.divertAlone(t, "the SRQ cannot move: "+why)
	}
	rings := make([]Rings, len(g.qps))
	for i, m := range g.qps {
		var ok bool
		if m != t {
			m.startFault(fmt.Sprintf("QP %#x on the same SRQ failed over", t.key.qpn), r.now())
		}
		if rings[i], ok = r.takeQP(m); !ok {
			return r.srqStuck(g, t, fmt.Sprintf("QP %#x could not be diverted", m.key.qpn))
		}
	}
	recvs, err := sh.DivertSRQ(g.ctx, g.srq)
	if err != nil {
		return r.srqStuck(g, t, fmt.Sprintf("the hot path could not hand the SRQ over: %v", err))
	}
	r.l2mu.Lock()
	grp, err := g.set.sh.AdoptSRQ(g.srq, recvs)
	r.l2mu.Unlock()
	if err != nil {
		return r.srqStuck(g, t, fmt.Sprintf("crossnic.Shadow.AdoptSRQ: %v", err))
	}
	g.group = grp
	for i, m := range g.qps {
		if rings[i].Unreplayable != "" {
			r.plainVerbs(m, "an outstanding WR cannot be replayed: "+rings[i].Unreplayable)
			continue
		}
		r.l2mu.Lock()
		conn, err := g.set.sh.AdoptSRQConn(m.qp, m.leg, resumeOf(rings[i]), grp)
		r.l2mu.Unlock()
		if err != nil {
			r.plainVerbs(m, fmt.Sprintf("crossnic.Shadow.AdoptSRQConn: %v", err))
			continue
		}
		r.adopted(m, conn, rings[i])
		if m != t {
			r.fo.kick = append(r.fo.kick, m) // run once t's failover moved the group
		}
	}
	r.log.Info("libibpath: layer 2 diverted the QPs of an SRQ", "qpn", t.key.qpn, "qps", len(g.qps), "recvs", len(recvs))
	return true
}

// divertAlone diverts t by itself, as plain verbs: its SRQ cannot move.
func (r *Runtime) divertAlone(t *l2qp, why string) bool {
	if _, ok := r.takeQP(t); !ok {
		return false
	}
	r.plainVerbs(t, why)
	return true
}

// srqStuck: the QPs of g were (partly) diverted but its receives cannot
// move: every one diverted runs as plain verbs, its error surfacing, t's
// first.
func (r *Runtime) srqStuck(g *l2srq, t *l2qp, why string) bool {
	for _, m := range g.qps {
		if m.diverted && m.conn == nil && !m.surfaced {
			r.plainVerbs(m, "the SRQ cannot move: "+why)
		}
	}
	return t.diverted
}

// PostSRQRecv posts receive WRs to a diverted SRQ, as ibv_post_srq_recv.
func (r *Runtime) PostSRQRecv(srq verbs.SRQ, wrs []verbs.RecvWR) (int, error) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	g := r.fo.srqs[srq]
	if g == nil || g.group == nil {
		return 0, verbs.Errorf("ibv_post_srq_recv", verbs.EINVAL, "the SRQ is not diverted to layer 2")
	}
	n, err := g.group.PostRecv(wrs)
	for _, q := range g.qps {
		r.observe(q)
	}
	r.settle()
	return n, verbsErr("ibv_post_srq_recv", verbs.EINVAL, err)
}
