package shim

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// The express lane: once a diverted QP's failover has settled on the
// backup (crossnic.Conn.Settled) and its first good completion there was
// seen, its data path moves to C (Express, implemented by the hot path):
// posts go straight to the backup QP, polls of its CQs drain the backup
// CQs. Layer 2's Conn is not used for data meanwhile; it surfaces the
// QP's error when the lane says so. A CQ goes on the lane with every QP
// completing into it, or not at all: each of them must have settled,
// and nothing may wait for the application in the runtime's queues.
// QPs made later on a lane CQ are not armed (their failover would need
// the Go data path on that CQ again).
//
// With the switch back on, a QP whose default path is down settles too
// (crossnic.Conn.Parked), and the lane records its WRs in the QP's
// shadow rings (ExpressLane.Record). When its default path is back, the
// switch back's tick takes it, and every QP sharing a CQ with it, off the
// lane (laneBack): each Conn gets the rings (LaneBack) and carries the
// traffic again while the switch back runs.

// maxLaneQPs is how many QPs one CQ on the lane may serve (LIP_XCQ_QPS).
const maxLaneQPs = 16

// express returns the hot path's express lane, nil when there is none or
// it is turned off (IBPATH_EXPRESS=off).
func (r *Runtime) express() Express {
	if !r.cfg.Express {
		return nil
	}
	x, _ := r.fo.hp.(Express)
	return x
}

// laneReady reports whether q can go on the lane.
func (r *Runtime) laneReady(q *l2qp) bool {
	// A QP on an SRQ stays on the Go data path: its receives are the
	// group's, which retires each by its completion (srq.go); the lane
	// would complete them behind its back.
	return !q.gone && !q.destroying && q.diverted && !q.express && !q.noExpress && q.srq == nil && q.conn != nil && q.firstGood &&
		len(q.leg.pending) == 0 && q.conn.Settled()
}

// tryExpress puts on the lane the CQs connected to rt (through QPs
// completing into two CQs) and their QPs, if every one of them is ready.
// Called with fo.mu held, after a poll handed the application what the
// runtime held.
func (r *Runtime) tryExpress(rt *cqRoute) {
	x := r.express()
	if x == nil || rt.express || len(rt.qps) == 0 {
		return
	}
	for _, q := range rt.qps {
		if !r.laneReady(q) {
			return // the usual case until the failover settles: cheap
		}
	}
	// The scan of every QP below runs at most every 64th poll while it
	// finds the CQ cannot go on the lane (a QP sharing it that did not
	// fail over can keep it off for good).
	if rt.laneWait > 0 {
		rt.laneWait--
		return
	}
	rt.laneWait = 63
	r.fo.laneScans++
	cqs := map[verbs.CQ]*cqRoute{rt.cq: rt}
	var qs []*l2qp
	seen := map[*l2qp]bool{}
	for grew := true; grew; {
		grew = false
		for _, q := range r.fo.qps {
			if seen[q] || q.gone || (cqs[q.app.SendCQ] == nil && cqs[q.app.RecvCQ] == nil) {
				continue
			}
			if !r.laneReady(q) {
				return // an armed, undiverted or unsettled QP shares a CQ
			}
			seen[q], grew = true, true
			qs = append(qs, q)
			for _, cq := range q.cqs() {
				if cqs[cq] == nil {
					c := r.fo.cqs[cq]
					if c == nil {
						return
					}
					cqs[cq] = c
				}
			}
		}
	}
	for _, c := range cqs {
		if len(c.queue) > 0 || len(c.qps) > maxLaneQPs {
			return
		}
	}
	var on []*l2qp
	undo := func(err error) {
		for _, q := range on {
			r.offLane(q, x, "the lane refused another QP of its CQs")
		}
		for _, q := range qs {
			q.noExpress = true
		}
		r.log.Warn("libibpath: layer 2 express lane refused; the QPs stay on the Go data path", "qpn", qs[0].key.qpn, "err", err)
	}
	for _, q := range qs {
		var rec *Rings
		if r.cfg.SwitchBack {
			// recorded, so that it can leave the lane with the QPs it
			// shares a CQ with when one of them switches back
			st := q.conn.Outstanding()
			rec = &Rings{Sends: st.Sends, Inline: st.Inline, NotifsDone: st.NotifsDone, Recvs: st.Recvs, RecvsDone: st.RecvsDone}
		}
		l := q.conn.Lane()
		lane := ExpressLane{BackupQP: l.Backup.QP, BackupCQ: l.Backup.CQ, BackupRecvCQ: l.Backup.RecvCQ, PeerQPN: l.PeerQPN, LKeys: l.LKeys,
			Record: rec}
		if err := x.ExpressOn(q.app, lane); err != nil {
			if rec != nil {
				_ = q.conn.LaneBack(q.conn.Outstanding()) // nothing ran on the lane
			}
			undo(err)
			return
		}
		q.laneRecords = rec != nil
		on = append(on, q)
	}
	var set []verbs.CQ
	for cq, c := range cqs {
		apps := make([]AppQP, len(c.qps))
		for i, q := range c.qps {
			apps[i] = q.app
		}
		if err := x.ExpressCQ(cq, apps); err != nil {
			for _, s := range set {
				_ = x.ExpressCQ(s, nil)
			}
			undo(err)
			return
		}
		set = append(set, cq)
	}
	for _, c := range cqs {
		c.express = true
	}
	for _, q := range qs {
		q.express = true
		r.l2mu.Lock()
		q.set.express[q.key.qpn] = true
		r.l2mu.Unlock()
		r.setStatus(q, func(s *status.QP) { s.ExpressLane = true })
		r.log.Info("libibpath: layer 2 express lane", "qpn", q.key.qpn, "backup", q.set.backup)
	}
}

// laneBack takes q off the express lane for its switch back, with every
// QP sharing a lane CQ with it (a CQ is on the lane with all its QPs or
// none): their CQs leave the lane first, so that their polls come to the
// runtime (which waits for fo.mu, held here), then each QP, its rings
// handed to its Conn. A QP whose rings the lane did not keep holds the
// group on the lane (said once). It reports whether q left. Called with
// fo.mu held.
func (r *Runtime) laneBack(q *l2qp, why string) bool {
	x := r.express()
	if x == nil {
		return false
	}
	cqs, qs := r.laneGroup(q)
	for _, o := range qs {
		if !o.laneRecords {
			if !q.laneHeldNoted {
				q.laneHeldNoted = true
				r.log.Warn("libibpath: layer 2 cannot take the QP off the express lane for its switch back: a QP sharing its CQs "+
					"went on the lane without its rings; it stays on the backup", "qpn", q.key.qpn, "other", o.key.qpn)
			}
			return false
		}
	}
	var off []verbs.CQ
	for cq := range cqs {
		if err := x.ExpressCQ(cq, nil); err != nil {
			for _, c := range off { // back as they were
				_ = x.ExpressCQ(c, laneApps(cqs[c]))
			}
			r.log.Warn("libibpath: layer 2 cannot take a CQ off the express lane; the switch back waits", "qpn", q.key.qpn, "err", err)
			return false
		}
		off = append(off, cq)
	}
	for _, c := range cqs {
		c.express = false
	}
	for _, o := range qs {
		r.offLane(o, x, why)
	}
	return true
}

// laneGroup is q's CQs on the lane and every QP on the lane completing
// into one of them, closed over QPs that complete into two CQs. Called
// with fo.mu held.
func (r *Runtime) laneGroup(q *l2qp) (map[verbs.CQ]*cqRoute, []*l2qp) {
	cqs := map[verbs.CQ]*cqRoute{}
	seen := map[*l2qp]bool{q: true}
	qs := []*l2qp{q}
	for i := 0; i < len(qs); i++ {
		for _, cq := range qs[i].cqs() {
			rt := r.fo.cqs[cq]
			if rt == nil || !rt.express || cqs[cq] != nil {
				continue
			}
			cqs[cq] = rt
			for _, o := range rt.qps {
				if !seen[o] && o.express {
					seen[o] = true
					qs = append(qs, o)
				}
			}
		}
	}
	return cqs, qs
}

// laneApps is the application QPs of rt on the lane.
func laneApps(rt *cqRoute) []AppQP {
	var apps []AppQP
	for _, o := range rt.qps {
		if o.express {
			apps = append(apps, o.app)
		}
	}
	return apps
}

// offLane takes q off the lane (its CQs left it, or never went on): a QP
// whose rings the lane kept hands them to its Conn, which carries its
// traffic again; a failure to read or load them surfaces the QP's error
// (what its backup QP holds is not known). Called with fo.mu held.
func (r *Runtime) offLane(q *l2qp, x Express, why string) {
	q.express = false
	r.l2mu.Lock()
	delete(q.set.express, q.key.qpn)
	r.l2mu.Unlock()
	r.setStatus(q, func(s *status.QP) { s.ExpressLane = false })
	if !q.laneRecords {
		x.ExpressOff(q.app)
		return
	}
	q.laneRecords = false
	st, err := x.ExpressBack(q.app)
	if err != nil {
		x.ExpressOff(q.app)
	}
	// (read once no poll is on the lane: final)
	lst := x.ExpressStats(q.app)
	if lst.Surfaced {
		// The lane handed the application an error of the backup (or
		// the peer's refusal) in a poll whose report (ExpressSurfaced)
		// waits behind this tick, and would find the QP off the lane:
		// the Conn surfaces as that report would have it.
		q.conn.Surface("the backup path failed too (seen on the express lane as the QP left it)")
		r.observe(q)
		return
	}
	if err == nil && st.Unreplayable != "" {
		err = errors.New(st.Unreplayable)
	}
	if err == nil {
		err = q.conn.LaneBack(crossnic.Resume{Sends: st.Sends, Inline: st.Inline, NotifsDone: st.NotifsDone, Recvs: st.Recvs, RecvsDone: st.RecvsDone})
	}
	if err != nil {
		reason := fmt.Sprintf("the backup path cannot be taken off the express lane: %v", err)
		r.log.Warn("libibpath: layer 2 "+reason, "qpn", q.key.qpn)
		q.conn.Surface(reason)
		r.observe(q)
		return
	}
	r.log.Info("libibpath: layer 2 left the express lane", "qpn", q.key.qpn, "why", why, "sends", len(st.Sends), "recvs", len(st.Recvs),
		"lane_sends", lst.Sends, "lane_recvs", lst.Recvs, "lane_completions", lst.Completions, "lane_own", lst.Own,
		"notifs_done", st.NotifsDone, "recvs_done", st.RecvsDone)
	r.tickLater()
}

// expressKeys resolves, for a post to a QP on the lane, the keys the lane
// missed and adds them; a key with no backup surfaces the QP's error, as
// the Conn does when it cannot translate a WR.
func (r *Runtime) expressKeys(q *l2qp, lkeys, rkeys []uint32) error {
	defer r.settle()
	x := r.express()
	if x == nil || q.conn == nil {
		return verbs.Errorf("ibv_post_send", verbs.EINVAL, "QP %#x: express lane without a Conn", q.key.qpn)
	}
	if x.ExpressStats(q.app).Surfaced {
		return ErrExpress
	}
	for i, keys := range [][]uint32{lkeys, rkeys} {
		remote := i == 1
		for _, k := range keys {
			to, ok := q.conn.BackupKey(remote, k)
			if !ok {
				what := map[bool]string{false: "lkey", true: "the peer's rkey"}[remote]
				r.surfaceExpress(q, fmt.Sprintf("the backup path failed too: no backup for %s %#x", what, k))
				return ErrExpress
			}
			if err := x.ExpressKey(q.app, remote, k, to); err != nil {
				return verbs.Errorf("ibv_post_send", verbs.ENOMEM, "QP %#x: add a key to the express lane: %v", q.key.qpn, err)
			}
		}
	}
	return ErrExpress
}

// surfaceExpress surfaces the error of a QP on the lane: its Conn moves
// the backup QP to the error state (what is outstanding there flushes to
// the application) and its posts go to the default QP.
func (r *Runtime) surfaceExpress(q *l2qp, reason string) {
	if x := r.express(); x != nil {
		x.ExpressSurface(q.app)
	}
	q.conn.Surface(reason)
	r.observe(q)
}

// ExpressSurfaced is the lane's report that a QP on it surfaced its
// error (an error completion on the backup, or the peer's refusal): wc
// is the completion that did: an error, or the peer's control message.
func (r *Runtime) ExpressSurfaced(ctx uintptr, qpn uint32, wc verbs.WC) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	q := r.fo.qps[qpKey{ctx, qpn}]
	if q == nil || q.conn == nil || !q.express {
		return
	}
	if sq, _ := q.conn.State(); sq == fsm.SQSurfaced {
		return // surfaced already (a key with no backup): said so then
	}
	reason := "the backup path failed too: " + wc.Status.String()
	if wc.Status == verbs.WCSuccess {
		reason = "the backup path failed too: the peer cannot fail over (its error surfaced)"
	}
	q.conn.Surface(reason)
	r.observe(q)
	st := r.express().ExpressStats(q.app)
	r.log.Info("libibpath: layer 2 express lane surfaced", "qpn", qpn, "sends", st.Sends, "recvs", st.Recvs,
		"completions", st.Completions, "hidden", st.Hidden)
}

// leaveExpress takes a destroyed QP off the lane, and its CQs too when
// no QP is left on them. Called with fo.mu held.
func (r *Runtime) leaveExpress(q *l2qp) {
	x := r.express()
	if !q.express || x == nil {
		return
	}
	x.ExpressOff(q.app)
	q.express = false
	r.l2mu.Lock()
	delete(q.set.express, q.key.qpn)
	r.l2mu.Unlock()
	for _, cq := range q.cqs() {
		rt := r.fo.cqs[cq]
		if rt == nil || !rt.express {
			continue
		}
		var rest []AppQP
		for _, o := range rt.qps {
			if o != q && o.express {
				rest = append(rest, o.app)
			}
		}
		if err := x.ExpressCQ(cq, rest); err != nil {
			r.log.Warn("libibpath: layer 2 express lane update", "qpn", q.key.qpn, "err", err)
		}
		if len(rest) == 0 {
			rt.express = false
		}
	}
}

// laneKeysOf lists the keys of send WRs the lane translates: lkeys of
// non-inline SGEs, rkeys of RDMA and atomic WRs (a zero-length WRITE
// checks none).
func laneKeysOf(wrs []verbs.SendWR) (lkeys, rkeys []uint32) {
	for i := range wrs {
		w := &wrs[i]
		var n uint64
		for _, s := range w.SGList {
			n += uint64(s.Length)
			if w.SendFlags&verbs.SendInline == 0 {
				lkeys = append(lkeys, s.LKey)
			}
		}
		switch w.Opcode {
		case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
			if n == 0 {
				continue
			}
			rkeys = append(rkeys, w.RKey)
		case verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAdd:
			rkeys = append(rkeys, w.RKey)
		}
	}
	return lkeys, rkeys
}

// onLane reports whether one of q's CQs is on the express lane.
func (r *Runtime) onLane(q *l2qp) bool {
	for _, cq := range q.cqs() {
		if rt := r.fo.cqs[cq]; rt != nil && rt.express {
			return true
		}
	}
	return false
}
