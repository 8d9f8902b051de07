package shim

import (
	"errors"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// The peer's fallback notification arrives on the backup QP, whose CQs
// are armed on a completion channel of the backup device. A goroutine per
// backup context reads that channel: an event for a QP that is not
// diverted means the peer failed over (or the backup failed), so the QP is
// diverted and its Conn answers; for a diverted QP it moves the Conn on
// (the handshake's acknowledgement, completions on the backup) even while
// the application does not poll.

// Polling intervals of a channel whose fd cannot be waited on (the
// simulated fabric): from notifyMin, doubling to notifyMax while idle.
const (
	notifyMin = time.Millisecond
	notifyMax = 10 * time.Millisecond
)

// startNotify creates the completion channel of s's backup CQs (before
// any is created) and the goroutine that reads it. Without a channel, the
// peer's notification is seen only once the QP is diverted for a reason
// of its own.
func (r *Runtime) startNotify(s *shadowSet) {
	ch, err := s.bak.CreateCompChannel()
	if err != nil {
		r.log.Warn("libibpath: no completion channel on the backup device; the peer's failover is followed only on a local fault", "backup", s.backup, "err", err)
		return
	}
	s.ch = ch
	s.sh.SetCompChannel(ch)
	if fc, ok := ch.(interface{ FD() int }); ok {
		if w, err := newFDWait(fc.FD()); err == nil {
			s.wait = w
		}
	}
	if r.st == nil {
		go r.notifyLoop(s) // stepped: Step reads it (stepped.go)
	}
}

// notifyLoop reads s's completion channel until the runtime closes.
func (r *Runtime) notifyLoop(s *shadowSet) {
	wait := notifyMin
	for {
		n, ok := r.backupEvents(s)
		if !ok {
			return
		}
		if s.wait != nil {
			if err := s.wait.Wait(); err != nil {
				return // closed
			}
			continue
		}
		if n > 0 {
			wait = notifyMin
		} else {
			wait = min(2*wait, notifyMax)
		}
		select {
		case <-r.stop:
			return
		case <-time.After(wait):
		}
	}
}

// backupEvent is one event read from a backup completion channel.
type backupEvent struct {
	qp     verbs.QP  // whose backup CQ it was
	readAt time.Time // when it was read
	lane   bool      // the QP was on the express lane then
}

// backupEvents reads every event pending on s's channel, then handles them
// together (onBackupEvents); ok is false once the channel is unusable (the
// runtime closed).
func (r *Runtime) backupEvents(s *shadowSet) (n int, ok bool) {
	batch, n, ok := r.readBackupEvents(s, s.events[:0])
	if len(batch) > 0 {
		n += r.onBackupEvents(s, batch, ok)
	}
	clear(batch)
	s.events = batch[:0]
	return n, ok
}

// readBackupEvents appends to batch the events pending on s's channel and
// counts them in n; ok is false once the channel is unusable.
func (r *Runtime) readBackupEvents(s *shadowSet, batch []backupEvent) (_ []backupEvent, n int, ok bool) {
	for {
		r.l2mu.Lock()
		if s.closed {
			r.l2mu.Unlock()
			return batch, n, false
		}
		cq, err := s.ch.GetCQEvent()
		readAt := time.Now()
		if err != nil {
			r.l2mu.Unlock()
			if errors.Is(err, verbs.EAGAIN) {
				return batch, n, true
			}
			r.log.Warn("libibpath: backup completion channel", "backup", s.backup, "err", err)
			return batch, n, false
		}
		// Acknowledged at once (a CQ with events unacknowledged cannot be
		// destroyed), under the lock DestroyQP takes; armed again before
		// it is polled, so nothing that completes later goes unnoticed.
		s.ch.AckCQEvents(cq, 1)
		qp, known := s.sh.DefaultOf(cq)
		lane := known && s.express[qp.QPN()]
		if known && !lane {
			if err := cq.ReqNotify(false); err != nil {
				r.log.Warn("libibpath: arm a backup CQ", "backup", s.backup, "err", err)
			}
		}
		r.l2mu.Unlock()
		n++
		if known {
			// The lane polls its own (the application may wait for an
			// event: the C side armed the backup CQ when it asked for one).
			batch = append(batch, backupEvent{qp: qp, readAt: readAt, lane: lane})
		}
	}
}

// rereads bounds how many times onBackupEvents reads the channel again
// before it releases the replays it holds.
const rereads = 4

// onBackupEvents handles events read together from s's channel. Those
// that carry a peer's fallback notification (or the answer to this side's)
// are answered first, every one, and only then do their replays go out
// (crossnic.Conn.HoldReplay): when a device fails, the notifications of
// all its QPs arrive at once, and answering them one after the other,
// each behind the replay of the one before, made the last peer wait for
// every other QP's replay (on rdma_rxe, whose data path takes the CPU the
// answers need, 0.7 to 2 s for the last of 4 QPs in the lab). When a
// notification diverted a QP and reread is set, it reads the channel
// again (at most rereads times) for notifications that arrived meanwhile,
// and answers them too before the release. It returns how many events it
// read again.
func (r *Runtime) onBackupEvents(s *shadowSet, evs []backupEvent, reread bool) (read int) {
	var homes []*l2qp // given back at once: layer 1, which let it go, takes them back
	defer func() {
		for _, q := range homes {
			r.readoptL1(q)
		}
	}()
	r.fo.mu.Lock()
	defer r.unlockFO()
	if r.fo.hp == nil {
		return 0
	}
	var held []*l2qp
	fresh := false // a peer's notification diverted a QP: others may follow
	for pass := 0; ; pass++ {
		for _, ev := range evs {
			q := r.fo.qps[qpKey{s.ctx, ev.qp.QPN()}]
			if q == nil || q.gone {
				continue
			}
			if ev.lane {
				if q.express {
					r.wakeLane(q)
				}
				continue
			}
			was := q.diverted
			if home := r.backupEventLocked(q, ev.readAt, &held); home != nil {
				homes = append(homes, home)
			}
			fresh = fresh || !was && q.diverted
		}
		if !reread || !fresh || pass == rereads {
			break
		}
		var n int
		evs, n, reread = r.readBackupEvents(s, nil)
		read += n
		if len(evs) == 0 {
			break
		}
	}
	r.releaseReplays(held)
	r.settle()
	return read
}

// releaseReplays lets the replays of held go, once every peer among them
// was answered, and runs their Conns. Called with fo.mu held.
func (r *Runtime) releaseReplays(held []*l2qp) {
	for _, q := range held {
		if q.conn == nil {
			continue
		}
		q.conn.ReleaseReplay()
		if err := r.runConn(q); err != nil {
			r.log.Debug("libibpath: layer 2 after releasing a replay", "qpn", q.key.qpn, "err", err)
		}
	}
}

// wakeLane wakes the application for the CQs of q, on the lane. Called
// with fo.mu held.
func (r *Runtime) wakeLane(q *l2qp) {
	r.wake(q.app.SendCQ)
	r.wake(q.app.RecvCQ)
}

// onBackupEvent: something completed on the backup of qp (the event was
// read from the channel at readAt).
func (r *Runtime) onBackupEvent(s *shadowSet, qp verbs.QP, readAt time.Time) {
	r.onBackupEvents(s, []backupEvent{{qp: qp, readAt: readAt}}, false)
}

// backupEventLocked handles an event of q's backup CQs read at readAt:
// a QP the peer's notification diverts, or one that waits for the peer's
// answer, runs its Conn with its replay held (appended to held; the
// caller releases it). It
// returns q when q went home at once (its caller gives it back to layer
// 1 once fo.mu is released). Called with fo.mu held.
func (r *Runtime) backupEventLocked(q *l2qp, readAt time.Time, held *[]*l2qp) (home *l2qp) {
	return r.peerEventLocked(q, readAt, "the peer's fallback notification on the backup QP", held)
}

// peerEventLocked is backupEventLocked for a sign of the peer's failover
// read at readAt, reason saying which (a backup CQ's event, or a record
// in the mailbox: watchInboxes). Called with fo.mu held.
func (r *Runtime) peerEventLocked(q *l2qp, readAt time.Time, reason string, held *[]*l2qp) (home *l2qp) {
	was := q.diverted
	if q.destroying {
		// What completed stays in the backup CQ, which raises no
		// second event for it: DestroyFailed takes it up.
		q.heldEventAt = readAt
		return nil
	}
	if q.express {
		// The QP went on the lane after the event was read: the lane
		// polls the completion, the application must be woken for it.
		r.wakeLane(q)
		return nil
	}
	if !q.diverted && !q.intercepted {
		if q.left != "" && r.startPolledCQ(q) {
			// Its CQ is the application's alone (ibv_start_poll): a
			// divert would poll it here. The peer's notification goes
			// unanswered, and its handshake bound surfaces its error.
			r.log.Debug("libibpath: layer 2 does not answer the peer for a QP it left", "qpn", q.key.qpn, "why", q.left)
			return nil
		}
		if readAt.Before(q.staleBefore) {
			// Read before the QP's last Conn drained the backup CQs for
			// the last time: what it announced was seen then.
			r.log.Debug("libibpath: layer 2 ignores a backup event older than the switch back", "qpn", q.key.qpn)
			return nil
		}
		q.startFault(reason, r.now())
		if !r.divert(q) {
			return nil
		}
		if q.left != "" && q.conn != nil {
			// The application ended the QP: nothing to fail over. The
			// Conn refuses the peer's notification, and the peer
			// surfaces at once instead of waiting for an answer.
			q.conn.Surface(q.left + "; the peer's fallback notification is refused")
		}
	}
	// A QP this event diverts, or one waiting for the answer to its own
	// notification, has a replay coming: it is held. One already on the
	// backup is run once, as it is.
	if c := q.conn; c != nil && !c.ReplayHeld() && (!was || q.lastSQ == fsm.SQAwaitAck) {
		c.HoldReplay()
		*held = append(*held, q)
	}
	if err := r.runConn(q); err != nil {
		r.log.Debug("libibpath: layer 2 after a backup completion", "qpn", q.key.qpn, "err", err)
	}
	if q.conn != nil && !q.failedOver && q.conn.Home() && !q.stayDiverted {
		// The event announced a completion drained by the purge of the
		// last switch back (it was read late): nothing came, the QP goes
		// straight back to the hot path.
		if r.undivert(q) {
			return q
		}
	}
	return nil
}
