package daemon

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
)

// What an owner may say. An owner session is any local process of any
// user, so what it reports, publishes and signals is checked against what
// it can own:
//
//   - a QP report names a QP no other owner, and not ibpathd's simulated
//     workload, has reported (the first report holds it until its QP is
//     gone or its session ends): no process can pose as another's QP, to
//     take the actions meant for it;
//   - a QP entry's key is a route of the device of a QP the owner
//     reported, with that QP's number; a region's key is a route of this
//     node: no process can publish an entry for another's QP, or one a
//     peer would take for another node's;
//   - an event is of a kind an owner produces (a migration, failover or
//     switch back, never a port's state) about one of the owner's QPs.
//
// A refusal is logged, counted (OwnerRefusals) and, for a publication,
// answered with its reason.

// ownerEventKinds are the events an owner reports.
var ownerEventKinds = map[string]bool{status.EvPathMigrated: true, status.EvFailover: true, status.EvSwitchback: true}

// claimQP records q, reported by o, unless another owner or the
// simulated workload holds its device and number.
func (d *Daemon) claimQP(o *owner, q status.QP) error {
	ref := qpRef{q.Device, q.QPN}
	for _, s := range d.simQPs() {
		if s.Device == q.Device && s.QPN == q.QPN {
			return fmt.Errorf("%s QP %#x is a QP of ibpathd's simulated workload", q.Device, q.QPN)
		}
	}
	q.OwnerPID, q.OwnerUID = o.hello.PID, o.caller.UID
	for _, p := range []*status.Path{&q.Primary, &q.Alternate, &q.Home} {
		if p.Port != 0 && p.Device == "" {
			p.Device = q.Device // protocol 1 named no device in its paths: the QP's own
		}
	}
	d.owners.mu.Lock()
	defer d.owners.mu.Unlock()
	if h := d.owners.byQP[ref]; h != nil && h != o {
		return fmt.Errorf("%s QP %#x was reported by pid %d first", q.Device, q.QPN, h.hello.PID)
	}
	if d.owners.byID[o.hello.PID] != o {
		return fmt.Errorf("the session of pid %d has ended", o.hello.PID)
	}
	d.owners.byQP[ref] = o
	o.mu.Lock()
	o.qps[ref] = q
	o.mu.Unlock()
	return nil
}

// releaseQP forgets a QP o reported gone.
func (d *Daemon) releaseQP(o *owner, ref qpRef) {
	d.owners.mu.Lock()
	if d.owners.byQP[ref] == o {
		delete(d.owners.byQP, ref)
	}
	d.owners.mu.Unlock()
	o.mu.Lock()
	delete(o.qps, ref)
	o.mu.Unlock()
}

// releaseAll forgets every QP of o, whose session ended. Called with
// d.owners.mu held.
func (d *Daemon) releaseAll(o *owner) {
	for ref, h := range d.owners.byQP {
		if h == o {
			delete(d.owners.byQP, ref)
		}
	}
}

// mayPublish checks a publication of o (module comment above).
func (d *Daemon) mayPublish(o *owner, m ownerproto.Msg) error {
	if p := m.PublishQP; p != nil {
		return d.mayPublishQP(o, p.Key)
	}
	k := m.PublishMR.Key
	r := ownerproto.Route{GID: k.GID, LID: k.LID}
	if !d.portsHold(nil, r) {
		return fmt.Errorf("region key %s rkey %#x: %s is not a route of this node", r, k.RKey, r)
	}
	return nil
}

// portsHold reports whether a port of one of devs (of any device when
// devs is nil) holds r. The port poll's inventory is asked first; on a
// miss the devices are read again, at most once a second: a RoCE port's
// GIDs follow its netdev's addresses, which the poll reads in full only
// every fullReadInterval, and a process publishes its QPs as soon as they
// are connected.
func (d *Daemon) portsHold(devs []string, r ownerproto.Route) bool {
	d.invMu.Lock()
	ok := devicesHold(d.inv, devs, r)
	d.invMu.Unlock()
	if ok {
		return true
	}
	if _, again := d.rereads.Allow(time.Now()); !again {
		return false
	}
	inv, err := d.discover()
	return err == nil && devicesHold(inv, devs, r)
}

func (d *Daemon) mayPublishQP(o *owner, k store.QPKey) error {
	r := ownerproto.Route{GID: k.GID, LID: k.LID}
	var devs []string
	o.mu.Lock()
	for ref := range o.qps {
		if ref.qpn == k.QPN {
			devs = append(devs, ref.dev)
		}
	}
	o.mu.Unlock()
	if len(devs) == 0 {
		return fmt.Errorf("QP key %s qpn %#x: this process reported no QP %#x", r, k.QPN, k.QPN)
	}
	if d.portsHold(devs, r) {
		return nil
	}
	return fmt.Errorf("QP key %s qpn %#x: %s is not a route of the device of this process's QP %#x (%v)", r, k.QPN, r, k.QPN, devs)
}

// mayReport checks an event o sends.
func (d *Daemon) mayReport(o *owner, e status.Event) error {
	if !ownerEventKinds[e.Kind] {
		return fmt.Errorf("event %q: not an event a process reports", e.Kind)
	}
	o.mu.Lock()
	_, ok := o.qps[qpRef{e.Device, e.QPN}]
	o.mu.Unlock()
	if !ok {
		return fmt.Errorf("event %s of %s QP %#x: not a QP this process reported", e.Kind, e.Device, e.QPN)
	}
	return nil
}

// ownerRefused counts and logs a refusal of what an owner said. The
// lines are rate-limited (refusalLog): one process can send refusable
// messages as fast as it likes.
func (d *Daemon) ownerRefused(log *slog.Logger, what string, err error) {
	d.ownerRefusals.Add(1)
	if n, ok := d.refusalLog.Allow(time.Now()); ok {
		if n > 0 {
			log.Warn(what, "err", err, "not_logged_before", n)
		} else {
			log.Warn(what, "err", err)
		}
	}
}
