package shim

import "github.com/ibpath/ibpath/verbs"

// PortEvent gives layer 1 a port or device event (PORT_ERR, PORT_ACTIVE,
// LID_CHANGE, SM_CHANGE, GID_CHANGE, CLIENT_REREGISTER, DEVICE_FATAL)
// seen on the shim's own context of device dev. Such events reach every
// context of a device, so one seen there stands for the application's
// contexts of dev, to which it is applied: on PORT_ERR the armed QPs of
// that port migrate at once. Other events are ignored. Hook calls caused
// by the event (HandOver, Changed) are normally made before it returns.
func (l *Layer1) PortEvent(dev string, ev verbs.AsyncEvent) {
	switch ev.Type.Scope() {
	case verbs.ScopePort, verbs.ScopeDevice:
	default:
		return
	}
	ev.QP, ev.CQ = nil, nil
	l.mu.Lock()
	if !l.closed {
		for _, c := range l.ctxs[dev] {
			l.mgr.HandleEvent(c, ev)
		}
		l.collect()
	}
	l.mu.Unlock()
	l.deliver()
	l.kick()
}

// QPEvent gives layer 1 a QP event the application read from its own
// context (PATH_MIG, PATH_MIG_ERR, QP_FATAL, QP_REQ_ERR,
// QP_ACCESS_ERR; others are ignored). QP events reach only the QP's own
// context, so a program that never reads them is covered by the
// migration poll instead (apm.Config.MigrationPoll).
func (l *Layer1) QPEvent(dev string, qpn uint32, typ verbs.EventType) {
	if typ.Scope() != verbs.ScopeQP {
		return
	}
	l.mu.Lock()
	if q := l.qps[l1Key{dev, qpn}]; q != nil && !l.closed {
		l.mgr.HandleEvent(q.ctx, verbs.AsyncEvent{Type: typ, QP: q.qp})
		l.collect()
	}
	l.mu.Unlock()
	l.deliver()
	l.kick()
}
