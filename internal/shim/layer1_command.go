package shim

import (
	"fmt"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
)

// Command carries out a relayed arm or migrate (dry run included) on a
// QP layer 1 protects. ok is false when layer 1 does not know the QP:
// the runtime then answers as before (why the QP is not protected).
func (l *Layer1) Command(c ownerproto.Command) (res ownerproto.Result, ok bool) {
	l.mu.Lock()
	q := l.qps[l1Key{c.Device, c.QPN}]
	if q == nil || l.closed {
		l.mu.Unlock()
		return ownerproto.Result{}, false
	}
	before, _ := l.mgr.QPStatus(q.qp)
	res.Before = describeL1(before)
	var err error
	switch {
	case c.Op == ownerproto.OpArm:
		err = l.mgr.Arm(q.qp)
	case c.Op != ownerproto.OpMigrate:
		err = fmt.Errorf("unknown op %q", c.Op)
	case c.DryRun:
		if before.State != fsm.APMArmed {
			err = fmt.Errorf("migrate QP %#x: not armed (%v: %s)", c.QPN, before.State, whyNot(before))
		}
	default:
		err = l.mgr.Migrate(q.qp)
	}
	after, _ := l.mgr.QPStatus(q.qp)
	l.collect()
	l.mu.Unlock()
	l.deliver()
	l.kick()
	switch {
	case err != nil:
		res.Error = fmt.Sprintf("%s QP %#x: %v", c.Device, c.QPN, err)
	case c.DryRun:
		res.OK, res.After = true, status.QPState{Primary: l1Path(before.Device, before.Alternate)}
	default:
		res.OK, res.After = true, describeL1(after)
	}
	return res, true
}

// Arm is Command for an arm.
func (l *Layer1) Arm(dev string, qpn uint32) ownerproto.Result {
	return l.commandOrUnknown(ownerproto.Command{Op: ownerproto.OpArm, Device: dev, QPN: qpn})
}

// Migrate is Command for a migrate.
func (l *Layer1) Migrate(dev string, qpn uint32, dryRun bool) ownerproto.Result {
	return l.commandOrUnknown(ownerproto.Command{Op: ownerproto.OpMigrate, Device: dev, QPN: qpn, DryRun: dryRun})
}

func (l *Layer1) commandOrUnknown(c ownerproto.Command) ownerproto.Result {
	if r, ok := l.Command(c); ok {
		return r
	}
	return ownerproto.Result{Error: fmt.Sprintf("%s QP %#x: layer 1 does not protect it", c.Device, c.QPN)}
}

// describeL1 is a QP's state and primary path, as results show it.
func describeL1(s apm.QPStatus) status.QPState {
	return status.QPState{APM: s.State.String(), Primary: l1Path(s.Device, s.Primary)}
}

func whyNot(s apm.QPStatus) string {
	switch {
	case s.Reason != "":
		return s.Reason
	case s.State == fsm.APMAwaitPeer:
		return "waiting for the peer to follow the last migration before re-arming"
	}
	return "the alternate is still loading"
}
