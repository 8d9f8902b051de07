package shim

import (
	"errors"
	"time"

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

// backupEvents handles every event pending on s's channel; ok is false
// once the channel is unusable (the runtime closed).
func (r *Runtime) backupEvents(s *shadowSet) (n int, ok bool) {
	for {
		r.l2mu.Lock()
		if s.closed {
			r.l2mu.Unlock()
			return n, false
		}
		cq, err := s.ch.GetCQEvent()
		readAt := time.Now()
		if err != nil {
			r.l2mu.Unlock()
			if errors.Is(err, verbs.EAGAIN) {
				return n, true
			}
			r.log.Warn("libibpath: backup completion channel", "backup", s.backup, "err", err)
			return n, false
		}
		// Acknowledged at once (a CQ with events unacknowledged cannot be
		// destroyed), under the lock DestroyQP takes; armed again before
		// it is polled, so nothing that completes later goes unnoticed.
		s.ch.AckCQEvents(cq, 1)
		qp, known := s.sh.DefaultOf(cq)
		lane := known && s.express[qp.QPN()]
		if lane {
			// The lane polls it; the application may wait for an event
			// (the C side armed the backup CQ when it asked for one).
			known = false
		}
		if known {
			if err := cq.ReqNotify(false); err != nil {
				r.log.Warn("libibpath: arm a backup CQ", "backup", s.backup, "err", err)
			}
		}
		r.l2mu.Unlock()
		n++
		switch {
		case known:
			r.onBackupEvent(s, qp, readAt)
		case lane:
			r.onLaneEvent(s, qp)
		}
	}
}

// onLaneEvent: a backup CQ of qp, on the express lane, has completions;
// the application is woken for its CQs.
func (r *Runtime) onLaneEvent(s *shadowSet, qp verbs.QP) {
	r.fo.mu.Lock()
	defer r.unlockFO()
	q := r.fo.qps[qpKey{s.ctx, qp.QPN()}]
	if q == nil || q.gone || !q.express {
		return
	}
	r.wakeLane(q)
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
	var home *l2qp // given back at once: layer 1, which let it go, takes it back
	defer func() {
		if home != nil {
			r.readoptL1(home)
		}
	}()
	r.fo.mu.Lock()
	defer r.unlockFO()
	q := r.fo.qps[qpKey{s.ctx, qp.QPN()}]
	if q == nil || q.gone || r.fo.hp == nil {
		return
	}
	if q.destroying {
		// What completed stays in the backup CQ, which raises no
		// second event for it: DestroyFailed takes it up.
		q.heldEventAt = readAt
		return
	}
	if q.express {
		// The QP went on the lane after the event was read: the lane
		// polls the completion, the application must be woken for it.
		r.wakeLane(q)
		return
	}
	if !q.diverted && !q.intercepted {
		if q.left != "" && r.startPolledCQ(q) {
			// Its CQ is the application's alone (ibv_start_poll): a
			// divert would poll it here. The peer's notification goes
			// unanswered, and its handshake bound surfaces its error.
			r.log.Debug("libibpath: layer 2 does not answer the peer for a QP it left", "qpn", q.key.qpn, "why", q.left)
			return
		}
		if readAt.Before(q.staleBefore) {
			// Read before the QP's last Conn drained the backup CQs for
			// the last time: what it announced was seen then.
			r.log.Debug("libibpath: layer 2 ignores a backup event older than the switch back", "qpn", q.key.qpn)
			return
		}
		q.startFault("the peer's fallback notification on the backup QP", r.now())
		if !r.divert(q) {
			return
		}
		if q.left != "" && q.conn != nil {
			// The application ended the QP: nothing to fail over. The
			// Conn refuses the peer's notification, and the peer
			// surfaces at once instead of waiting for an answer.
			q.conn.Surface(q.left + "; the peer's fallback notification is refused")
		}
	}
	if err := r.runConn(q); err != nil {
		r.log.Debug("libibpath: layer 2 after a backup completion", "qpn", q.key.qpn, "err", err)
	}
	if q.conn != nil && !q.failedOver && q.conn.Home() && !q.stayDiverted {
		// The event announced a completion drained by the purge of the
		// last switch back (it was read late): nothing came, the QP goes
		// straight back to the hot path.
		if r.undivert(q) {
			home = q
		}
	}
	r.settle()
}
