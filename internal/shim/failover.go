package shim

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// Layer 2's failover in the shim. While a QP is healthy the C hot path
// posts and polls it; once its backup is connected the QP is armed. A
// fault (an error completion the hot path intercepts, PORT_ERR or
// DEVICE_FATAL on the shim's own context, or the peer's fallback
// notification on the backup) diverts it: from then on its posts and the
// polls of its CQs come here, and a crossnic.Conn adopted from what the
// hot path's rings hold carries the failover and the traffic on the
// backup. The QP's CQs may be shared with QPs that are not diverted:
// their completions are handed to the application unchanged and retired
// in the hot path's rings (Hotpath.Retire).

// failover is layer 2's failover state; mu serialises all of it (every
// Conn, the routing of every diverted CQ). Lock order: failover.mu, then
// Runtime.l2mu, then Runtime.mu.
type failover struct {
	mu        sync.Mutex
	hp        Hotpath
	read      crossnic.MemReader
	qps       map[qpKey]*l2qp
	srqs      map[verbs.SRQ]*l2srq  // the application's SRQs layer 2 follows (srq.go)
	kick      []*l2qp               // QPs to run once the current call is done (settle)
	cqs       map[verbs.CQ]*cqRoute // CQs polled here
	cqCtx     map[verbs.CQ]uintptr  // the context of every CQ of a shadowed QP
	todo      []*l2qp               // QPs whose error completion a pump took, to divert
	out       []verbs.WC            // scratch for Conn.Poll
	polls     uint64                // PollCQ calls (debug log sampling)
	laneScans int                   // tryExpress scans of every QP (tests)
	nudgeWCs  int                   // completions of layer 1's nudges dropped (routeWC)
	// CQs the application polls with ibv_start_poll (startpoll.go)
	startPolled map[verbs.CQ]bool
	// extended CQs not polled yet: their QPs wait to be armed (startpoll.go)
	extCQ     map[verbs.CQ]bool
	clock     verbs.Clock // recovery's time (tests give the simulated fabric's)
	ticking   bool        // switchLoop runs (switch backs, bounded handshakes)
	tickAgain bool        // a Conn asked for ticking since the current tick began

	// sent once mu is released (reporting may block on ibpathd's socket)
	reports []status.QP
	events  []status.Event
	wakes   []verbs.CQ  // CQs with completions queued for the application (Waker)
	gives   []givenBack // kept events to give back (EventGiver)
}

// l2qp is one RC QP layer 2 mirrored on the backup device.
type l2qp struct {
	key  qpKey
	set  *shadowSet
	qp   verbs.QP
	app  AppQP
	port uint8
	leg  *legCQ
	srq  *l2srq // the SRQ it receives through (nil: its own receive queue)

	armed            bool
	intercepted      bool // an error completion was taken by a pump; to divert
	diverted         bool
	express          bool          // on the express lane (express.go)
	laneRecords      bool          // the lane keeps its rings: it can leave the lane (laneBack)
	laneHeldNoted    bool          // said that a QP sharing its CQs holds it on the lane
	noExpress        bool          // the lane refused it once: stays on the Go data path
	extWait          bool          // not armed: its extended CQ was not polled yet (startpoll.go)
	extWasReason     string        // the status reason the wait's took the place of
	recovery         bool          // its Conn switches back (switchback.go)
	stayDiverted     bool          // home, but the hot path could not take it back
	resetNoted       string        // the last "cannot reset the default QP" reason logged
	probeFailsLogged int           // failed probes of this failover last logged
	awayNoted        string        // the last reason logged for not giving the QP back
	heldUntil        time.Time     // flap damping holds its switch back until then (damping.go); zero: not held
	heldAt           time.Duration // the same on the damper's clock (0: not held)
	fatal            bool          // its default device died: no switch back
	polledAt         time.Time     // when runConn last began polling its Conn
	staleBefore      time.Time     // backup events read earlier announce what its last Conn drained
	watchInbox       bool          // given back after a switch back: its mailbox is read every tick (watchInboxes)
	gone             bool
	destroying       bool           // the application's ibv_destroy_qp is under way: layer 2 leaves the QP alone (destroy.go)
	heldEventAt      time.Time      // when a backup event read while it was being destroyed was read (DestroyFailed takes it up)
	left             string         // why layer 2 leaves the QP for good (appstate.go, startpoll.go): never armed again, a peer's notification refused
	conn             *crossnic.Conn // nil once diverted: no replay, plain verbs

	reason     string    // what started the failover
	faultAt    time.Time // when the runtime saw it
	lastSQ     fsm.SQState
	failedOver bool
	surfaced   bool
	firstGood  bool
}

// split reports whether the QP's queues complete into two CQs.
func (q *l2qp) split() bool { return q.app.RecvCQ != q.app.SendCQ }

// SetHotpath connects layer 2's failover to the shim's C data path. Without
// one (nil, the default) layer 2 only builds and connects the backups: no
// QP is armed or diverted, errors reach the application as plain verbs
// report them. Call it before the application opens its first device.
func (r *Runtime) SetHotpath(h Hotpath) {
	r.fo.mu.Lock()
	r.fo.hp = h
	r.fo.mu.Unlock()
	if h != nil {
		r.armConnected()
	}
}

// SetMemReader gives layer 2 a reader of the process's memory, through
// which the inline payload of each IBV_SEND_INLINE WR posted to a diverted
// QP is copied (a replay sends the copy). Without one, such posts fail
// with EINVAL.
func (r *Runtime) SetMemReader(read crossnic.MemReader) {
	r.fo.mu.Lock()
	defer r.fo.mu.Unlock()
	r.fo.read = read
	for _, q := range r.fo.qps {
		if q.conn != nil {
			q.conn.SetMemReader(read)
		}
	}
}

// track records a QP the shadow mirrored (ShadowQP).
func (r *Runtime) track(ctx uintptr, s *shadowSet, qp verbs.QP, sendCQ, recvCQ verbs.CQ, srq verbs.SRQ) {
	if recvCQ == nil {
		recvCQ = sendCQ
	}
	q := &l2qp{key: qpKey{ctx, qp.QPN()}, set: s, qp: qp, app: AppQP{Ctx: ctx, QPN: qp.QPN(), SendCQ: sendCQ, RecvCQ: recvCQ}}
	q.leg = &legCQ{r: r, q: q}
	r.fo.mu.Lock()
	defer r.unlockFO()
	if srq != nil {
		if q.srq = r.fo.srqs[srq]; q.srq == nil {
			return // its SRQ is not followed: never armed
		}
		if q.srq.group != nil {
			// The SRQ's receives moved to the backup; the application's
			// SRQ holds stale copies of them, which this QP's messages
			// would consume. Nothing here can stop that.
			r.log.Warn("libibpath: a QP created on an SRQ whose receives moved to the backup device is not protected, "+
				"and its messages land in stale receives of that SRQ", "qpn", qp.QPN())
			return
		}
		q.srq.qps = append(q.srq.qps, q)
	}
	r.fo.qps[q.key] = q
	r.fo.cqCtx[sendCQ] = ctx
	r.fo.cqCtx[recvCQ] = ctx
	if r.startPolledCQ(q) {
		r.leave(q, startPollReason) // made on a CQ already polled so
	}
}

// armConnected arms every QP whose backup is connected.
func (r *Runtime) armConnected() {
	r.fo.mu.Lock()
	defer r.unlockFO()
	if r.fo.hp == nil {
		return
	}
	var ready []*l2qp
	r.l2mu.Lock()
	for _, q := range r.fo.qps {
		if !q.armed && !q.diverted && !q.gone && !q.destroying && q.left == "" && q.set.sh.Ready(q.qp) {
			ready = append(ready, q)
		}
	}
	r.l2mu.Unlock()
	for _, q := range ready {
		if r.extWaits(q) {
			if !q.extWait {
				q.extWait = true
				r.setStatus(q, func(s *status.QP) { q.extWasReason, s.Reason = s.Reason, extWaitReason })
			}
			continue
		}
		if r.onLane(q) {
			if !q.noExpress {
				q.noExpress = true
				r.log.Warn("libibpath: layer 2 does not arm a QP whose CQ is on the express lane; its errors surface", "qpn", q.key.qpn)
				r.setStatus(q, func(s *status.QP) {
					s.Reason = "layer 2: its CQ carries failed-over QPs on the express lane"
				})
			}
			continue
		}
		q.armed = true
		r.fo.hp.Arm(q.app, true)
		r.setStatus(q, func(s *status.QP) {
			if s.Reason == extWaitReason {
				s.Reason = q.extWasReason
			}
			q.port = s.Port
			if s.Layer != status.LayerAPM { // layer 1 comes first; layer 2 takes what it hands over
				s.Layer = status.LayerCrossNIC
			}
			s.CrossNIC = fsm.SQDefault.String()
		})
		r.log.Debug("libibpath: layer 2 armed", "qpn", q.key.qpn, "device", q.set.dev, "backup", q.set.backup)
	}
	if len(ready) > 0 {
		r.leaveDrainedLocked() // a QP connected on a drained port leaves it at once
	}
}

// divert takes q from the hot path and builds its Conn from the rings.
// It reports false when the hot path could not divert it: q is then
// disarmed and its errors reach the application as plain verbs report
// them. Called with fo.mu held.
func (r *Runtime) divert(q *l2qp) bool {
	if q.destroying {
		return false // the application is destroying it: a fault reaches it as plain verbs report it
	}
	if q.srq != nil {
		return r.divertSRQ(q)
	}
	rings, ok := r.takeQP(q)
	if !ok {
		return false
	}
	if rings.Unreplayable != "" {
		r.plainVerbs(q, "an outstanding WR cannot be replayed: "+rings.Unreplayable)
		return true
	}
	r.l2mu.Lock()
	conn, err := q.set.sh.Adopt(q.qp, q.leg, resumeOf(rings))
	r.l2mu.Unlock()
	if err != nil {
		r.plainVerbs(q, fmt.Sprintf("crossnic.Shadow.Adopt: %v", err))
		return true
	}
	r.adopted(q, conn, rings)
	return true
}

// resumeOf is what a Conn takes over from the hot path's rings.
func resumeOf(rings Rings) crossnic.Resume {
	return crossnic.Resume{Sends: rings.Sends, Inline: rings.Inline, NotifsDone: rings.NotifsDone,
		Recvs: rings.Recvs, RecvsDone: rings.RecvsDone}
}

// takeQP diverts q in the hot path and routes the polls of its CQs here.
// False when the hot path could not: q is then disarmed and its errors
// reach the application as plain verbs report them. Called with fo.mu
// held.
func (r *Runtime) takeQP(q *l2qp) (Rings, bool) {
	rings, err := r.fo.hp.Divert(q.app)
	if err != nil {
		q.armed = false
		r.fo.hp.Arm(q.app, false)
		r.log.Error("libibpath: layer 2 could not take the QP from the hot path; its errors surface", "qpn", q.key.qpn, "reason", q.reason, "err", err)
		r.setStatus(q, func(s *status.QP) {
			s.Layer, s.CrossNIC, s.Reason = status.LayerNone, "", fmt.Sprintf("layer 2 could not divert the QP: %v", err)
		})
		return Rings{}, false
	}
	q.diverted, q.intercepted = true, false
	if r.letGoL1(q.set.dev, q.key.qpn) {
		// Layer 1's last word (armed, say) no longer holds: it let go.
		r.setStatus(q, func(s *status.QP) { s.APM = fsm.APMHandedOver.String() })
	}
	for _, cq := range q.cqs() {
		rt := r.routeFor(cq, q.key.ctx)
		rt.diverted = true
		rt.qps = append(rt.qps, q)
	}
	return rings, true
}

// adopted makes conn, adopted from q's rings, carry q. Called with fo.mu
// held.
func (r *Runtime) adopted(q *l2qp, conn *crossnic.Conn, rings Rings) {
	conn.SetMemReader(r.fo.read)
	if r.st != nil && r.st.psn != nil {
		conn.SetPSNSource(r.st.psn)
	}
	if err := conn.BoundHandshake(r.fo.clock, r.cfg.handshake()); err != nil {
		r.log.Warn("libibpath: layer 2 cannot bound the fallback handshake; a peer that never answers leaves the QP waiting", "qpn", q.key.qpn, "err", err)
	}
	q.conn, q.lastSQ = conn, fsm.SQDefault
	r.enableRecovery(q)
	r.setStatus(q, func(s *status.QP) {
		s.Layer, s.CrossNIC = status.LayerCrossNIC, fsm.SQDefault.String()
	})
	r.log.Debug("libibpath: layer 2 diverted a QP", "qpn", q.key.qpn, "reason", q.reason,
		"sends", len(rings.Sends), "recvs", len(rings.Recvs), "notifs_done", rings.NotifsDone, "recvs_done", rings.RecvsDone)
}

// plainVerbs: q is diverted but its WRs cannot be replayed; it runs as
// plain verbs (its completions, errors included, reach the application as
// the provider gives them) through a Conn that surfaced at once, so that
// a peer which failed over on its own is refused rather than left
// waiting. Without such a Conn the runtime passes everything through
// itself.
func (r *Runtime) plainVerbs(q *l2qp, why string) {
	q.surfaced = true
	r.log.Warn("libibpath: layer 2 cannot fail over; the error reaches the application", "qpn", q.key.qpn, "reason", q.reason, "why", why)
	r.setStatus(q, func(s *status.QP) {
		s.Layer, s.CrossNIC, s.Reason = status.LayerNone, fsm.SQSurfaced.String(), "layer 2: "+why
	})
	r.l2mu.Lock()
	conn, err := q.set.sh.Adopt(q.qp, q.leg, crossnic.Resume{})
	r.l2mu.Unlock()
	if err != nil {
		r.log.Debug("libibpath: no Conn to refuse the peer's failover", "qpn", q.key.qpn, "err", err)
		return
	}
	conn.Surface(why)
	q.conn, q.lastSQ = conn, fsm.SQSurfaced
}

// cqs are the application's CQs of q (one when both queues share it).
func (q *l2qp) cqs() []verbs.CQ {
	if q.split() {
		return []verbs.CQ{q.app.SendCQ, q.app.RecvCQ}
	}
	return []verbs.CQ{q.app.SendCQ}
}

// startFault notes what started a failover of q.
func (q *l2qp) startFault(reason string, at time.Time) {
	q.reason, q.faultAt = reason, at
}

// Intercept takes an error completion of an armed QP that the hot path
// polled from cq, followed by the rest of its batch (wcs), none of which
// reached the application. The QP is diverted (unless a PORT_ERR diverted
// it while the poll was in flight) and its Conn given the error, which
// starts the failover or joins the one under way; the other completions
// are queued for the application's next polls. When the QP could not be diverted
// (nothing of it is diverted on return), nothing was taken: the hot path
// hands wcs to the application itself.
func (r *Runtime) Intercept(ctx uintptr, cq verbs.CQ, wcs []verbs.WC) {
	if len(wcs) == 0 {
		return
	}
	r.fo.mu.Lock()
	defer r.unlockFO()
	q := r.fo.qps[qpKey{ctx, wcs[0].QPNum}]
	if r.fo.hp == nil || q == nil || q.gone {
		r.log.Error("libibpath: intercepted completion of a QP layer 2 does not know", "qpn", wcs[0].QPNum)
		return
	}
	if !q.diverted {
		q.startFault(fmt.Sprintf("completion error %v on the default QP", wcs[0].Status), r.now())
		if !r.divert(q) {
			return
		}
	}
	rt := r.routeFor(cq, ctx)
	for _, wc := range wcs {
		r.routeWC(rt, wc)
	}
	r.runConn(q)
	r.settle()
}

// deviceFault diverts, on PORT_ERR of a port or DEVICE_FATAL of dev (seen
// on the shim's own context), every armed QP there, and starts its
// failover at once: after a local link-down a real HCA may never complete
// the WRs in flight, so waiting for an error completion could hang.
func (r *Runtime) deviceFault(dev string, ev verbs.AsyncEvent) {
	fatal := ev.Type == verbs.EventDeviceFatal
	r.fo.mu.Lock()
	defer r.unlockFO()
	if r.fo.hp == nil {
		return
	}
	var early []uint32 // connected by the application, backup not yet
	for _, q := range r.fo.qps {
		if r.faultBeforeBackup(q, dev, ev) {
			early = append(early, q.key.qpn)
			continue
		}
		if fatal && q.diverted && q.conn != nil && !q.gone && q.set.backup == dev && q.set.dev != dev {
			// Its backup died: a Conn that waits for the peer's answer
			// (which can no longer arrive) or whose traffic runs there
			// surfaces now, as plain verbs would report the fault.
			q.conn.HandleEvent(q.set.bak, ev, q.port)
			r.runConn(q)
			continue
		}
		if !q.armed || q.diverted || q.intercepted || q.gone || q.destroying || q.set.dev != dev || (!fatal && q.port != ev.Port) {
			continue
		}
		if !fatal && r.l1Protects(dev, q.key.qpn) {
			continue // layer 1 migrates it; it hands over what it cannot save
		}
		reason := fmt.Sprintf("PORT_ERR on %s port %d", dev, ev.Port)
		if fatal {
			reason = "DEVICE_FATAL on " + dev
		}
		q.startFault(reason, r.now())
		q.fatal = fatal
		if !r.divert(q) {
			continue
		}
		if q.conn != nil {
			q.conn.HandleEvent(q.set.def, ev, q.port)
		}
		r.runConn(q)
	}
	if len(early) > 0 {
		slices.Sort(early)
		r.log.Warn("libibpath: the fault came before layer 2 could protect some QPs (their backup QPs were not connected yet); their errors reach the application",
			"event", ev.Type.String(), "device", dev, "port", ev.Port, "qps", len(early), "qpns", qpnList(early, 8))
	}
	r.settle()
}

// faultBeforeBackup reports whether event ev of dev hits q, which the
// application connected but whose backup is not connected yet: layer 2
// cannot act, and says so (deviceFault). A QP layer 1 protects is its.
// Called with fo.mu held.
func (r *Runtime) faultBeforeBackup(q *l2qp, dev string, ev verbs.AsyncEvent) bool {
	if q.armed || q.diverted || q.intercepted || q.gone || q.destroying || q.left != "" || q.set.dev != dev {
		return false
	}
	if ev.Type != verbs.EventDeviceFatal {
		r.mu.Lock()
		x := r.qps[q.key]
		port := uint8(0)
		if x != nil {
			port = x.status.Port
		}
		r.mu.Unlock()
		if port != ev.Port || r.l1Protects(dev, q.key.qpn) {
			return false
		}
	}
	r.l2mu.Lock()
	defer r.l2mu.Unlock()
	return q.set.sh.Waiting(q.qp)
}

// qpnList names at most n QP numbers, in hex, and how many more there are.
func qpnList(qpns []uint32, n int) string {
	var b strings.Builder
	for i, qpn := range qpns {
		if i == n {
			fmt.Fprintf(&b, " and %d more", len(qpns)-n)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%#x", qpn)
	}
	return b.String()
}

// settle diverts the QPs whose error completion a pump took. A QP that
// cannot be diverted gets its completions back in the queues of the CQs
// they came from (which are polled here), as plain verbs would give them.
func (r *Runtime) settle() {
	for len(r.fo.kick) > 0 {
		q := r.fo.kick[0]
		r.fo.kick = r.fo.kick[1:]
		if err := r.runConn(q); err != nil {
			r.log.Debug("libibpath: layer 2 run", "qpn", q.key.qpn, "err", err)
		}
	}
	for len(r.fo.todo) > 0 {
		q := r.fo.todo[0]
		r.fo.todo = r.fo.todo[1:]
		if q.gone || q.diverted || !q.intercepted {
			continue
		}
		if q.destroying {
			continue // its error waits in its leg: DestroyFailed queues it again
		}
		if r.divert(q) {
			r.runConn(q)
			continue
		}
		q.intercepted = false
		for _, w := range q.leg.take() {
			r.toApp(q, w)
		}
	}
}

// observe reports what q's Conn did: its state in the status, the
// failover once it runs on the backup (one Info line with the counts), a
// surfaced error, and the first good completion from the backup.
func (r *Runtime) observe(q *l2qp) {
	c := q.conn
	if c == nil {
		return
	}
	sq, _ := c.State()
	st := c.Stats()
	if sq == fsm.SQAwaitAck && !q.recovery {
		r.tickLater() // the wait for the peer's answer is bounded
	}
	if sq != q.lastSQ {
		if q.recovery && q.failedOver {
			// the steps of a switch back (probe answered, fence, release)
			r.log.Info("libibpath: layer 2 send queue", "qpn", q.key.qpn, "from", q.lastSQ.String(), "to", sq.String(),
				"probes", st.Probes, "reset_failures", st.ResetFailures, "resets_paired", st.ResetsPaired)
		}
		q.lastSQ = sq
		r.setStatus(q, func(s *status.QP) { s.CrossNIC = sq.String() })
	}
	if !q.failedOver && sq != fsm.SQDefault && sq != fsm.SQAwaitAck && sq != fsm.SQSurfaced && !c.ReplayHeld() {
		// (once the replay is out: its line gives the counts)
		q.failedOver = true
		from := fmt.Sprintf("%s qpn %#x", q.set.dev, q.key.qpn)
		to := q.set.backup
		if b, _, ok := q.set.sh.BackupOf(q.qp); ok {
			to = fmt.Sprintf("%s qpn %#x", b.Device, b.QPN)
		}
		now := r.now()
		r.log.Info("libibpath: layer 2 failover", "qpn", q.key.qpn, "device", q.set.dev, "backup", to, "reason", q.reason,
			"replayed", st.Replayed, "delivered", st.Delivered, "synthesized", st.Synthesized, "recvs_moved", st.RecvsMoved,
			"via_mailbox", st.MailboxHandshakes > 0, "since_fault", now.Sub(q.faultAt))
		r.setStatus(q, func(s *status.QP) { s.Failovers++ })
		r.fo.events = append(r.fo.events, status.Event{Kind: status.EvFailover, At: now, Device: q.set.dev,
			Port: q.port, QPN: q.key.qpn, From: from, To: to, Reason: q.reason, Took: now.Sub(q.faultAt)})
	}
	if sq == fsm.SQSurfaced && !q.surfaced {
		q.surfaced = true
		r.log.Warn("libibpath: layer 2 failover failed; the error reaches the application", "qpn", q.key.qpn, "reason", q.reason, "why", c.Reason())
		r.setStatus(q, func(s *status.QP) {
			s.Layer, s.Home, s.Reason = status.LayerNone, s.Primary, "layer 2: "+c.Reason()
		})
		r.giveBackKept(q.key)
	}
	if !q.firstGood && st.BackupCompletions > 0 {
		q.firstGood = true
		now := r.now()
		r.log.Info("libibpath: first good completion on the backup", "qpn", q.key.qpn, "since_fault", now.Sub(q.faultAt),
			"at_unix_ns", now.UnixNano(), "reason", q.reason)
	}
}

// setStatus edits q's status and queues it for ibpathd. Called with
// fo.mu held.
func (r *Runtime) setStatus(q *l2qp, edit func(*status.QP)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.qps[q.key]
	if x == nil {
		return
	}
	edit(&x.status)
	r.fo.reports = append(r.fo.reports, x.status)
}

// unlockFO releases fo.mu and sends the reports and events queued under it.
func (r *Runtime) unlockFO() {
	reports, events, wakes, gives := r.fo.reports, r.fo.events, r.fo.wakes, r.fo.gives
	r.fo.reports, r.fo.events, r.fo.wakes, r.fo.gives = nil, nil, nil, nil
	w, _ := r.fo.hp.(Waker)
	g, _ := r.fo.hp.(EventGiver)
	r.fo.mu.Unlock()
	if w != nil {
		for _, cq := range wakes {
			w.Wake(cq)
		}
	}
	r.returnKept(g, gives)
	if len(reports) == 0 && len(events) == 0 {
		return
	}
	r.mu.Lock()
	rep := r.rep
	r.mu.Unlock()
	if rep == nil {
		return
	}
	for _, s := range reports {
		if err := rep.ReportQP(s); err != nil {
			r.log.Debug("libibpath: report QP to ibpathd", "qpn", s.QPN, "err", err)
		}
	}
	for _, e := range events {
		if err := rep.Event(e); err != nil {
			r.log.Debug("libibpath: send event to ibpathd", "kind", e.Kind, "qpn", e.QPN, "err", err)
		}
	}
}

// forget drops layer 2's state of q: the application destroyed it (or
// closed its device). Its completions not yet polled go with it, as a
// destroyed QP's leave its CQ; a CQ no diverted QP completes into any
// more goes back to the hot path once what it holds for the application
// was polled. Called with fo.mu held.
func (r *Runtime) forget(q *l2qp) {
	q.gone = true
	delete(r.fo.qps, q.key)
	if g := q.srq; g != nil {
		g.leave(q)
	}
	r.leaveExpress(q)
	if q.conn != nil {
		if err := q.conn.Close(); err != nil {
			r.log.Warn("libibpath: layer 2 release", "qpn", q.key.qpn, "err", err)
		}
		q.conn = nil
	}
	q.leg.take()
	if !q.diverted {
		return
	}
	for _, cq := range q.cqs() {
		rt := r.fo.cqs[cq]
		if rt == nil {
			continue
		}
		for i, x := range rt.qps {
			if x == q {
				rt.qps = append(rt.qps[:i], rt.qps[i+1:]...)
				break
			}
		}
		k := 0
		for _, wc := range rt.queue {
			if wc.QPNum != q.key.qpn {
				rt.queue[k] = wc
				k++
			}
		}
		rt.queue = rt.queue[:k]
		r.maybeRelease(rt)
	}
}

// forgetContext drops layer 2's state of every QP of an application
// context that was closed.
func (r *Runtime) forgetContext(ctx uintptr) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	for k, q := range r.fo.qps {
		if k.ctx == ctx {
			r.forget(q)
		}
	}
	for cq, c := range r.fo.cqCtx {
		if c == ctx {
			delete(r.fo.cqCtx, cq)
		}
	}
}

// mapNewMR gives the Conns of ctx the backup lkey of a region registered
// after they were built.
func (r *Runtime) mapNewMR(ctx uintptr, defLKey, bakLKey uint32) {
	r.fo.mu.Lock()
	defer r.fo.mu.Unlock()
	for k, q := range r.fo.qps {
		if k.ctx == ctx && q.conn != nil {
			q.conn.MapLKey(defLKey, bakLKey)
			if x := r.express(); x != nil && q.express {
				if err := x.ExpressKey(q.app, false, defLKey, bakLKey); err != nil {
					r.log.Warn("libibpath: layer 2 express lane key", "qpn", q.key.qpn, "err", err)
				}
			}
		}
	}
}
