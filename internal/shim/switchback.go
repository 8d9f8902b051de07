package shim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// Switching back. With Config.SwitchBack on, every Conn layer 2 adopts
// gets crossnic's recovery: once the failover runs on the backup and the
// default port is up again, the default QP is reset with the connect
// attributes the application gave it (PSNs those the two ends announced
// at the fallback handshake) and
// probed with a zero-length WRITE; when a probe succeeds, the next signaled WR
// is the fence on the backup, later WRs wait for it, and a notification
// on the default QP brings the peer's receives home (docs/CROSSNIC.md).
// A goroutine ticks the Conns while any is away from home, polling their
// CQs as the application's polls would (the probe's completion lands in
// the application's CQ). When a Conn is home again, the hot path takes
// the QP back (Undiverter) with what the default QP holds, and the QP
// is armed for the next failover.

const (
	// switchTick is how often the Conns away from home are ticked; it is
	// also their probe interval.
	switchTick = 10 * time.Millisecond
	// switchProbe bounds the wait for a probe's answer. A probe sent
	// before the peer reset its QP may be retransmitted without end
	// (rxe does so); past this, with mailboxes at both ends, it is
	// failed and the QP reset, paired with the peer's, and probed again
	// (docs/CROSSNIC.md).
	switchProbe = time.Second
)

// enableRecovery gives q's new Conn its switch back, when configured and
// possible. A DEVICE_FATAL default device never comes back in this
// process (its context is dead): such a Conn stays on the backup, where
// the express lane can take it. Called with fo.mu held.
func (r *Runtime) enableRecovery(q *l2qp) {
	if !r.cfg.SwitchBack || q.conn == nil || q.fatal {
		return
	}
	if q.srq != nil {
		r.log.Info("libibpath: no switch back for a QP on an SRQ: its receives stay on the backup", "qpn", q.key.qpn)
		return
	}
	if !q.conn.Mailboxed() {
		r.log.Warn("libibpath: no switch back for a QP whose peer published no mailbox (an older ibpath there, or switch back off): "+
			"it stays on the backup after a failover", "qpn", q.key.qpn)
		return
	}
	def, ok := r.connectAttr(q.key)
	if !ok {
		r.log.Warn("libibpath: no switch back for a QP whose connect attributes are not known", "qpn", q.key.qpn)
		return
	}
	r.l2mu.Lock()
	bak, ok := q.set.sh.ConnectAttr(q.qp)
	r.l2mu.Unlock()
	if !ok {
		return // not connected: Adopt would have failed
	}
	room := r.roomFor(q.app.SendCQ, q.app.RecvCQ)
	if !room.fits() {
		r.log.Warn("libibpath: no switch back for a QP whose CQs have no headroom for the switch back's own completions "+
			"(created before the shim, or at the device's CQ size limit); it stays on the backup after a failover", "qpn", q.key.qpn)
		return
	}
	dev, port, backup := q.set.dev, q.port, q.set.backup
	err := q.conn.EnableRecovery(crossnic.Recovery{Clock: r.fo.clock, ProbeInterval: switchTick,
		HandshakeTimeout: r.cfg.handshake(), ProbeTimeout: switchProbe, DefAttr: &def, BakAttr: &bak, PathUp: func() bool { return r.portUp(dev, port, backup) },
		Room: room})
	if err != nil {
		r.log.Warn("libibpath: no switch back", "qpn", q.key.qpn, "err", err)
		return
	}
	q.recovery = true
	r.tickLater()
}

// tickLater makes sure switchLoop runs: a Conn needs ticking (it switches
// back, or its fallback handshake waits for the peer). Called with fo.mu
// held.
func (r *Runtime) tickLater() {
	r.fo.tickAgain = true // a tick under way must not be the last
	if !r.fo.ticking {
		r.fo.ticking = true
		if r.st != nil {
			r.st.startSwitch() // Step ticks (stepped.go)
		} else {
			go r.switchLoop()
		}
	}
}

// portUp reports whether a port of the application's device is up, as
// the last port event on the shim's own context said (up when none came),
// not drained, and not suppressed by flap damping (damping.go) while the
// backup device's ports are up: a port that flapped beats a backup that
// died.
func (r *Runtime) portUp(dev string, port uint8, backup string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drained[portKey{dev, port}] || r.cfg.SwitchBackDamping && r.suppressedLocked(dev, port) && r.backupUpLocked(backup) {
		return false
	}
	p, ok := r.ports[portKey{dev, port}]
	return !ok || p.Up
}

// connectAttr is what the application connected its QP with, RTS
// attributes it never set (a QP only taken to RTR) given the values the
// backup would take.
func (r *Runtime) connectAttr(k qpKey) (verbs.QPAttr, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.qps[k]
	need := verbs.QPAttrAV | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrPathMTU
	if x == nil || x.connMask&need != need {
		return verbs.QPAttr{}, false
	}
	a := x.connect
	if a.Timeout == 0 {
		a.Timeout = 14 // 67 ms: a probe on a dead path fails instead of waiting for ever
	}
	if a.RetryCnt == 0 {
		a.RetryCnt = 7
	}
	return a, true
}

// switchLoop ticks the Conns away from home, and those whose fallback
// handshake waits for the peer, until none is left.
func (r *Runtime) switchLoop() {
	t := time.NewTicker(switchTick)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if !r.switchTickOnce() {
			return
		}
	}
}

// switchTickOnce ticks every Conn with recovery and takes back those that
// are home. It reports whether any is still away (false also stops the
// loop: the next enableRecovery starts it again).
func (r *Runtime) switchTickOnce() bool {
	away, home := r.switchTickLocked()
	for _, q := range home {
		r.readoptL1(q)
	}
	return away
}

// switchTickLocked is switchTickOnce's work under layer 2's lock; home are
// the QPs given back to the hot path.
func (r *Runtime) switchTickLocked() (away bool, home []*l2qp) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	r.fo.tickAgain = false
	away, home = r.watchInboxes()
	for _, q := range r.fo.qps {
		if q.gone || !q.diverted || q.conn == nil {
			continue
		}
		if q.express && q.recovery && !q.destroying {
			// On the lane while its default path was down: it leaves
			// the lane once a switch back can begin.
			if sq, _ := q.conn.State(); sq == fsm.SQFallback {
				if !q.conn.Parked() {
					r.laneBack(q, "the default path is back")
				}
				away = true
			}
		}
		if q.express {
			continue
		}
		if q.destroying {
			away = true // ticked again if its destroy fails
			continue
		}
		if !q.recovery {
			away = r.tickHandshake(q) || away
			continue
		}
		q.conn.Tick()
		if err := r.runConn(q); err != nil {
			r.log.Debug("libibpath: layer 2 switch-back tick", "qpn", q.key.qpn, "err", err)
		}
		r.noteReset(q)
		r.noteAway(q)
		r.noteHeld(q)
		if q.conn != nil && q.conn.Home() && !q.stayDiverted && r.undivert(q) {
			home = append(home, q)
		}
		if q.diverted && q.recovery {
			away = true // a QP the hot path could not take back is ticked too: it may fail over again
		}
	}
	r.settle()
	// A QP diverted during this tick (settle) that needs ticking asked
	// for it (tickLater): the loop goes on for it.
	away = away || r.fo.tickAgain
	if !away {
		r.fo.ticking = false
	}
	return away, home
}

// watchInboxes reads the mailbox of every QP given back after a switch
// back. Its peer, once a handshake was had, notifies a later fault
// through the mailbox, which consumes no receive and so raises no
// completion here: a QP with no Conn learns of it only so. A record
// there is handled as a notification on the backup CQ is
// (peerEventLocked). One load per QP per tick; the switch back's ticker
// runs for as long as such a QP lives. It reports whether any is
// watched, and the QPs given back at once (for layer 1, outside fo.mu).
// Called with fo.mu held.
func (r *Runtime) watchInboxes() (watching bool, homes []*l2qp) {
	var held []*l2qp
	for _, q := range r.fo.qps {
		if !q.watchInbox || q.diverted || q.intercepted || q.destroying || q.gone {
			// (an intercepted QP is diverted by settle, its Conn reading
			// the inbox; a QP being destroyed leaves layer 2)
			continue
		}
		watching = true
		r.l2mu.Lock()
		pending := q.set.sh.MailboxPending(q.qp)
		r.l2mu.Unlock()
		if !pending {
			continue
		}
		// (read now, on the wall clock the staleness of backup events
		// is judged on: never before the last Conn's drain)
		if home := r.peerEventLocked(q, time.Now(), "the peer's fallback notification in the mailbox", &held); home != nil {
			homes = append(homes, home)
		}
	}
	r.releaseReplays(held)
	return watching, homes
}

// tickHandshake ticks q's Conn, without recovery, while its fallback
// handshake waits for the peer's answer: past the bound (Config.Handshake)
// the error surfaces and reaches the application. It reports whether the
// handshake still waits. Called with fo.mu held.
func (r *Runtime) tickHandshake(q *l2qp) bool {
	if sq, _ := q.conn.State(); sq != fsm.SQAwaitAck {
		return false
	}
	q.conn.Tick()
	if err := r.runConn(q); err != nil {
		r.log.Debug("libibpath: layer 2 handshake tick", "qpn", q.key.qpn, "err", err)
	}
	sq, _ := q.conn.State()
	return sq == fsm.SQAwaitAck
}

// noteReset logs what keeps a QP from going home: the default QP that
// cannot be reset (each new reason, and the reset that works at last),
// and failed probes of the default path (the 1st, 10th, 100th, ... of a
// failover).
func (r *Runtime) noteReset(q *l2qp) {
	st := q.conn.Stats()
	switch err := q.conn.ResetErr(); {
	case err != nil && err.Error() != q.resetNoted:
		q.resetNoted = err.Error()
		r.log.Info("libibpath: layer 2 cannot reset the default QP yet; traffic stays on the backup, retrying", "qpn", q.key.qpn,
			"err", err, "failures", st.ResetFailures)
	case err == nil && q.resetNoted != "":
		q.resetNoted = ""
		r.log.Info("libibpath: layer 2 reset the default QP; probing its path", "qpn", q.key.qpn, "failures", st.ResetFailures)
	}
	if st.ProbeFailures > q.probeFailsLogged && isPow10(st.ProbeFailures) {
		q.probeFailsLogged = st.ProbeFailures
		r.log.Info("libibpath: layer 2 probe of the default path failed; traffic stays on the backup, probing", "qpn", q.key.qpn,
			"failures", st.ProbeFailures, "err", q.conn.ProbeErr(), "probes", st.Probes)
	}
}

// noteAway logs, once per reason, what keeps a QP whose send queue is
// home from being given back (the peer's sends not home yet, the backup
// not purged, probes still outstanding, ...).
func (r *Runtime) noteAway(q *l2qp) {
	if !q.failedOver {
		return
	}
	if sq, _ := q.conn.State(); sq != fsm.SQDefault {
		return
	}
	why := q.conn.AwayReason()
	if why == "" || why == q.awayNoted {
		return
	}
	q.awayNoted = why
	r.log.Info("libibpath: layer 2 send queue home, QP not given back yet", "qpn", q.key.qpn, "why", why)
}

// isPow10 reports whether n is 1, 10, 100, ...
func isPow10(n int) bool {
	for n >= 10 && n%10 == 0 {
		n /= 10
	}
	return n == 1
}

// undivert gives q back to the hot path: its Conn switched back and the
// default QP holds every WR. A hot path that cannot take it keeps it
// diverted: the Conn then carries the default QP through the runtime.
// It reports whether the hot path took it back, after a failover or after
// a detour that moved nothing: layer 1 may then protect it again
// (readoptL1, outside fo.mu). Called with fo.mu held.
func (r *Runtime) undivert(q *l2qp) bool {
	st := q.conn.Outstanding()
	stats := q.conn.Stats()
	wasFailover := q.failedOver
	q.failedOver, q.firstGood, q.resetNoted, q.probeFailsLogged, q.awayNoted, q.lastSQ = false, false, "", 0, "", fsm.SQDefault
	err := errors.New("it has no Undivert")
	if u, ok := r.fo.hp.(Undiverter); ok {
		err = u.Undivert(q.app, Rings{Sends: st.Sends, Inline: st.Inline, NotifsDone: st.NotifsDone, Recvs: st.Recvs, RecvsDone: st.RecvsDone})
	}
	r.setStatus(q, func(s *status.QP) {
		s.Layer, s.CrossNIC, s.Home, s.Reason = status.LayerCrossNIC, fsm.SQDefault.String(), s.Primary, ""
		if wasFailover {
			s.Switchbacks++
		}
		if err != nil {
			s.Reason = "layer 2: back on the default QP, through the runtime: the hot path cannot take it back"
		}
	})
	if err != nil {
		q.stayDiverted = true
		r.log.Warn("libibpath: the hot path cannot take the QP back; it stays on layer 2's data path, on its default QP", "qpn", q.key.qpn, "err", err)
	} else {
		r.giveBack(q)
	}
	if !wasFailover {
		// Diverted for a notification that was not one (a backup event
		// read before the last switch back): nothing moved.
		r.log.Debug("libibpath: layer 2 gave back a QP that never left its default", "qpn", q.key.qpn, "reason", q.reason)
		return err == nil
	}
	now := r.now()
	since := now.Sub(q.faultAt)
	r.log.Info("libibpath: layer 2 switched back", "qpn", q.key.qpn, "device", q.set.dev, "backup", q.set.backup,
		"since_fault", since, "held", stats.SwitchPause, "probes", stats.Probes, "at_unix_ns", now.UnixNano(),
		"sends", len(st.Sends), "recvs", len(st.Recvs), "hot_path", err == nil,
		"notified", stats.Notified, "peer_sent", stats.PeerSent, "collected_to", stats.CollectedTo,
		"notifs_done", st.NotifsDone, "recvs_done", st.RecvsDone)
	r.fo.events = append(r.fo.events, status.Event{Kind: status.EvSwitchback, At: now, Device: q.set.dev,
		Port: q.port, QPN: q.key.qpn, From: q.set.backup + " (backup)", To: fmt.Sprintf("%s qpn %#x", q.set.dev, q.key.qpn),
		Reason: fmt.Sprintf("the default path works again (%s after %s)", since.Round(time.Millisecond), q.reason)})
	return err == nil
}

// giveBack drops q's Conn and takes q out of its CQs' routes: the hot
// path has it again. Its CQs go back too once no other diverted QP
// completes into them and the application polled what it is owed (until
// then its completions polled here are retired in the hot path's rings).
// Called with fo.mu held.
func (r *Runtime) giveBack(q *l2qp) {
	if q.watchInbox = q.conn.Mailboxed(); q.watchInbox {
		r.tickLater() // the ticker reads its inbox from now on (watchInboxes)
	}
	if err := q.conn.Close(); err != nil {
		r.log.Warn("libibpath: layer 2 release", "qpn", q.key.qpn, "err", err)
	}
	q.conn, q.diverted, q.recovery = nil, false, false
	// Its Conn drained the backup CQs from polledAt on: an event of them
	// read earlier announced nothing new (onBackupEvent).
	q.staleBefore = q.polledAt
	for _, cq := range q.cqs() {
		rt := r.fo.cqs[cq]
		if rt == nil {
			continue
		}
		rt.qps = slices.DeleteFunc(rt.qps, func(x *l2qp) bool { return x == q })
		r.maybeRelease(rt)
	}
}
