package shim

import (
	"fmt"
	"syscall"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// How the runtime joins layer 1 (Layer1, InfiniBand APM) and layer 2 (the
// failover onto a backup device): layer 1 arms what it can in the
// application's own modifies; a QP it can no longer protect is handed to
// layer 2 (l1HandOver); a QP layer 2 took over is let go by layer 1, so
// its migration poll does not act on a QP layer 2 flushed (letGoL1).

// startLayer1 creates layer 1 when IBPATH_APM is on.
func (r *Runtime) startLayer1() {
	if !r.cfg.APM {
		return
	}
	o := Layer1Options{HandOver: r.l1HandOver, Changed: r.l1Changed, Progress: r.progressL1, Log: r.log}
	if s := r.st; s != nil {
		o.APM, o.PeerTTL, o.Clock, o.Now, o.Spawn = s.apm, s.peerTTL, s.clock, r.now, s.spawn
	}
	if r.cfg.nudges() {
		o.Nudge = r.nudgeL1
	}
	if r.cfg.Damping != (pathsel.DampingConfig{}) {
		o.APM.Damping = r.cfg.Damping
	}
	l1, err := NewLayer1(o)
	if err != nil {
		r.log.Warn("libibpath: layer 1 cannot start; InfiniBand QPs are not armed", "err", err)
		return
	}
	r.l1 = l1
}

// Layer1Wants says whether layer 1 must carry out the application's
// modify of a QP (the C side then calls ModifyQP): an INIT->RTR of an RC
// QP on an InfiniBand port, or any modify of a QP layer 1 knows. Every
// other modify goes straight to the provider.
func (r *Runtime) Layer1Wants(ctx uintptr, qpn uint32, mask verbs.QPAttrMask, state verbs.QPState) bool {
	if r.l1 == nil {
		return false
	}
	r.mu.Lock()
	q := r.qps[qpKey{ctx, qpn}]
	var dev string
	var ib bool
	if q != nil {
		dev = q.dev.name
		p, ok := q.dev.ports[q.status.Port]
		ib = ok && p.LinkLayer == verbs.LinkLayerInfiniBand && q.info.Type == verbs.QPTRC
	}
	r.mu.Unlock()
	if q == nil {
		return false
	}
	if _, known := r.l1.Status(dev, qpn); known {
		return true
	}
	return ib && mask&verbs.QPAttrState != 0 && state == verbs.QPSRTR && mask&verbs.QPAttrAV != 0
}

// ModifyQP carries out the application's modify through layer 1 (after
// Layer1Wants said so): def and qp call the provider directly. The error
// is the application's, as the provider gave it.
func (r *Runtime) ModifyQP(def verbs.Context, qp verbs.QP, attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if r.l1 == nil {
		return qp.Modify(attr, mask)
	}
	return r.l1.Modify(def, qp, attr, mask)
}

// l1Changed copies layer 1's view of a QP into its status and reports it;
// a migration is also an event for ibpathd. While layer 1 does not
// protect a QP that layer 2 has armed, the QP's layer is layer 2's.
func (r *Runtime) l1Changed(c Layer1Change) {
	r.mu.Lock()
	var snap *status.QP
	for k, q := range r.qps {
		if q.dev.name != c.Device || k.qpn != c.QPN {
			continue
		}
		// Layer 2 carries a QP layer 1 let go of. Asked under r.mu (then
		// layer 1's lock, as decideLayer1 does): divert lets go before
		// it edits the status under r.mu, so this change never writes
		// over the status layer 2 gives the QP.
		if _, held := r.l1.Status(c.Device, c.QPN); !held {
			break
		}
		l2armed := q.status.CrossNIC == fsm.SQDefault.String()
		c.Status.Apply(&q.status)
		if l2armed && q.status.Layer != status.LayerAPM {
			q.status.Layer = status.LayerCrossNIC
		}
		s := q.status
		snap = &s
		break
	}
	rep := r.rep
	r.mu.Unlock()
	if snap != nil {
		r.report(*snap)
	}
	if c.Migrated != nil && rep != nil {
		ev := status.Event{Kind: status.EvPathMigrated, At: c.Migrated.At, Device: c.Device, Port: c.Migrated.Port,
			QPN: c.QPN, From: c.Migrated.From, To: c.Migrated.To, Took: r.migrationTook(c.Device, c.Migrated.FromPort, c.Migrated.At)}
		if err := rep.Event(ev); err != nil {
			r.log.Debug("libibpath: send event to ibpathd", "kind", ev.Kind, "qpn", c.QPN, "err", err)
		}
	}
}

// l1HandOver: layer 1 can no longer protect a QP; layer 2 fails it over
// when its backup is connected, else the error reaches the application.
func (r *Runtime) l1HandOver(h Layer1HandOver) {
	r.log.Info("libibpath: layer 1 hands the QP over", "device", h.Device, "qpn", h.QPN, "reason", h.Reason)
	r.fo.mu.Lock()
	defer r.unlockFO()
	if r.fo.hp == nil {
		return
	}
	for _, q := range r.fo.qps {
		if q.set.dev != h.Device || q.key.qpn != h.QPN {
			continue
		}
		if !q.armed || q.diverted || q.intercepted || q.gone {
			return
		}
		q.startFault("layer 1 handed over: "+h.Reason, r.now())
		if !r.divert(q) {
			return
		}
		if q.conn != nil {
			q.conn.HandOver(q.qp, h.Reason)
		}
		r.runConn(q)
		r.settle()
		return
	}
}

// l1Protects reports whether layer 1 protects dev's QP qpn now: layer 2
// then leaves PORT_ERR to it (layer 1 migrates, and hands over only what
// it cannot save).
func (r *Runtime) l1Protects(dev string, qpn uint32) bool {
	return r.l1 != nil && r.l1.Protects(dev, qpn)
}

// progressL1 is layer 1's Progress: the hot path's send positions of an
// application QP that layer 2 follows and has not taken over (a diverted
// QP's posts bypass the rings). Called without layer 1's lock, once per
// waiting QP every millisecond (a port failure makes every QP of the port
// wait): a lookup by key, not a scan. It takes l2mu to find the
// application context's id, then fo.mu, under which a QP the hot path
// reads cannot be under destroy (Destroying marks it first).
func (r *Runtime) progressL1(ctx verbs.Context, qp verbs.QP) (posted, retired uint64, ok bool) {
	var id uintptr
	r.l2mu.Lock()
	for c, s := range r.shadows { // one per open context of the application
		if s.def == ctx {
			id, ok = c, true
			break
		}
	}
	r.l2mu.Unlock()
	if !ok {
		return 0, 0, false
	}
	r.fo.mu.Lock()
	defer r.unlockFO()
	p, _ := r.fo.hp.(Progresser)
	q := r.fo.qps[qpKey{id, qp.QPN()}]
	if p == nil || q == nil || q.gone || q.destroying || q.diverted {
		return 0, 0, false
	}
	return p.Progress(q.app)
}

// nudgeL1 is layer 1's Nudge: the hot path posts the nudge on an
// application QP that layer 2 follows and has not taken over. The QP is
// found under l2mu and fo.mu, as in progressL1, and nudged without them:
// the hot path takes the QP's send queue lock, which an application
// thread may hold while its poll waits for fo.mu (wr_start to
// wr_complete around a poll of a diverted CQ); a QP destroyed meanwhile
// is refused there (ENOENT).
func (r *Runtime) nudgeL1(ctx verbs.Context, qp verbs.QP) error {
	var id uintptr
	ok := false
	r.l2mu.Lock()
	for c, s := range r.shadows {
		if s.def == ctx {
			id, ok = c, true
			break
		}
	}
	r.l2mu.Unlock()
	if !ok {
		return fmt.Errorf("nudge QP %#x: no shadow rings on its context: %w", qp.QPN(), syscall.ENOSPC)
	}
	r.fo.mu.Lock()
	n, _ := r.fo.hp.(Nudger)
	q := r.fo.qps[qpKey{id, qp.QPN()}]
	var app AppQP
	busy := q != nil && (q.gone || q.destroying || q.diverted || q.intercepted)
	if q != nil {
		app = q.app
	}
	r.unlockFO()
	switch {
	case n == nil:
		return fmt.Errorf("nudge QP %#x: the hot path posts no nudge: %w", qp.QPN(), syscall.ENOSPC)
	case q == nil:
		return fmt.Errorf("nudge QP %#x: its rings are not followed: %w", qp.QPN(), syscall.ENOSPC)
	case busy:
		return fmt.Errorf("nudge QP %#x: layer 2 has it: %w", qp.QPN(), syscall.EBUSY)
	}
	return n.Nudge(app)
}

// NudgeSlots says whether the application's RC QPs on a device with
// these ports get the send slot of layer 1's nudge (the C side adds it
// at their creation): the nudge is on and a port is InfiniBand.
func (r *Runtime) NudgeSlots(ports []Port) bool {
	if r.l1 == nil || !r.cfg.nudges() {
		return false
	}
	for _, p := range ports {
		if p.LinkLayer == verbs.LinkLayerInfiniBand {
			return true
		}
	}
	return false
}

// readoptL1 hands layer 1 a QP that layer 2 gave back to the hot path:
// layer 1 protects it again if it let it go (Layer1.Readopt). Called
// without fo.mu (layer 1's hooks take it).
func (r *Runtime) readoptL1(q *l2qp) {
	if r.l1 != nil {
		r.l1.Readopt(q.set.def, q.qp)
	}
}

// letGoL1 tells layer 1 that layer 2 took a QP over (diverted it): layer
// 1 forgets it. It reports whether layer 1 protected it. Called with
// fo.mu held (from divert): LetGo takes only layer 1's own lock and calls
// no hook.
func (r *Runtime) letGoL1(dev string, qpn uint32) bool {
	return r.l1 != nil && r.l1.LetGo(dev, qpn)
}

// l1Status is layer 1's view of a QP, when it knows it.
func (r *Runtime) l1Status(dev string, qpn uint32) (Layer1Status, bool) {
	if r.l1 == nil {
		return Layer1Status{}, false
	}
	return r.l1.Status(dev, qpn)
}
