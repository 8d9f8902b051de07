package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ibpath/ibpath/pathsel"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
)

var _ api.Backend = (*Daemon)(nil)

// Arm re-arms the alternate path of the target's QPs.
func (d *Daemon) Arm(ctx context.Context, c api.Caller, req api.ActionRequest) (api.ActionResult, error) {
	if req.DryRun {
		return api.ActionResult{}, badRequest("arm: --dry-run is only for migrate")
	}
	return d.act(ctx, c, ownerproto.OpArm, req)
}

// Migrate moves the target's QPs to their armed alternate path.
func (d *Daemon) Migrate(ctx context.Context, c api.Caller, req api.ActionRequest) (api.ActionResult, error) {
	return d.act(ctx, c, ownerproto.OpMigrate, req)
}

// Subscribe returns the status events.
func (d *Daemon) Subscribe(buf int) (<-chan status.Event, func()) { return d.events.subscribe(buf) }

func badRequest(format string, a ...any) *api.Error {
	return &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf(format, a...)}
}

func notFound(format string, a ...any) *api.Error {
	return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf(format, a...)}
}

// target is one QP an action applies to, with who owns it.
type target struct {
	qp    status.QP
	owner *owner // nil: a QP of the simulated workload, which ibpathd owns
}

// resolve lists the QPs a target names, checking that a named device,
// port or QP exists.
func (d *Daemon) resolve(t api.Target) ([]target, error) {
	var all []target
	for _, q := range d.simQPs() {
		all = append(all, target{qp: q})
	}
	for _, o := range d.owners.list() {
		o.mu.Lock()
		for _, q := range o.qps {
			all = append(all, target{qp: q, owner: o})
		}
		o.mu.Unlock()
	}
	if t.All {
		return all, nil
	}
	var out []target
	for _, x := range all {
		if x.qp.Device != t.Device {
			continue
		}
		if (t.QPN != 0 && x.qp.QPN == t.QPN) || (t.Port != 0 && x.qp.Port == t.Port) {
			out = append(out, x)
		}
	}
	if t.QPN != 0 {
		if len(out) == 0 {
			return nil, notFound("%s: no such QP on this node", t)
		}
		return out, nil
	}
	if !d.hasPort(t.Device, t.Port) {
		return nil, notFound("%s: no such port on this node", t)
	}
	return out, nil
}

func (d *Daemon) hasPort(dev string, port uint8) bool {
	_, ok := d.portInfo(dev, port)
	return ok
}

// portInfo is port n of device dev in the inventory.
func (d *Daemon) portInfo(dev string, n uint8) (pathsel.PortInfo, bool) {
	d.invMu.Lock()
	defer d.invMu.Unlock()
	for _, h := range d.inv {
		if h.Name != dev {
			continue
		}
		for _, p := range h.Ports {
			if p.Num == n {
				return p, true
			}
		}
	}
	return pathsel.PortInfo{}, false
}

func (d *Daemon) act(ctx context.Context, c api.Caller, op string, req api.ActionRequest) (api.ActionResult, error) {
	if err := req.Target.Validate(); err != nil {
		return api.ActionResult{}, badRequest("%s: %v", op, err)
	}
	ts, err := d.resolve(req.Target)
	if err != nil {
		return api.ActionResult{}, err
	}
	var ownerUID uint32
	if len(ts) == 1 {
		ownerUID = ts[0].qp.OwnerUID
	}
	if err := d.policy.checkAction(c, op, req.Target, ownerUID); err != nil {
		d.log.Warn("action refused", "op", op, "target", req.Target.String(), "uid", c.UID, "pid", c.PID)
		return api.ActionResult{}, err
	}
	res := api.ActionResult{Action: op, Target: req.Target, DryRun: req.DryRun, Results: d.actAll(ctx, op, req.DryRun, ts)}
	ports := d.pathPorts()
	for i := range res.Results {
		fillPath(ports, &res.Results[i].Before.Primary)
		fillPath(ports, &res.Results[i].After.Primary)
	}
	d.log.Info("action", "op", op, "target", req.Target.String(), "dry_run", req.DryRun, "qps", len(res.Results),
		"failed", res.Failed(), "uid", c.UID, "pid", c.PID)
	return res, nil
}

// actConcurrency bounds the commands of one action under way at once.
const actConcurrency = 16

// actAll acts on every target, up to actConcurrency at once, and returns
// the results in the targets' order. The QPs of one owner are commanded
// one after the other; once an owner failed to answer in time, its other
// QPs are not commanded (each would wait the whole command timeout): a
// process that reads commands and never answers delays an action by one
// timeout, not one per QP.
func (d *Daemon) actAll(ctx context.Context, op string, dryRun bool, ts []target) []api.QPResult {
	out := make([]api.QPResult, len(ts))
	byOwner := map[*owner][]int{}
	var order []*owner
	for i, x := range ts {
		if _, ok := byOwner[x.owner]; !ok {
			order = append(order, x.owner)
		}
		byOwner[x.owner] = append(byOwner[x.owner], i)
	}
	sem := make(chan struct{}, actConcurrency)
	var wg sync.WaitGroup
	for _, o := range order {
		idx := byOwner[o]
		if o == nil { // the simulated workload: no waiting on anyone
			for _, i := range idx {
				out[i], _ = d.actOne(ctx, op, dryRun, ts[i])
			}
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			silent := ""
			for _, i := range idx {
				if silent != "" {
					out[i] = api.QPResult{Device: ts[i].qp.Device, QPN: ts[i].qp.QPN, OwnerPID: ts[i].qp.OwnerPID,
						Before: describe(ts[i].qp), Error: silent}
					continue
				}
				var stuck bool
				if out[i], stuck = d.actOne(ctx, op, dryRun, ts[i]); stuck {
					silent = fmt.Sprintf("not sent: owner pid %d did not answer an earlier command of this action", o.hello.PID)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// actOne acts on one target; stuck reports that its owner did not answer
// (in time, or at all).
func (d *Daemon) actOne(ctx context.Context, op string, dryRun bool, x target) (r api.QPResult, stuck bool) {
	r = api.QPResult{Device: x.qp.Device, QPN: x.qp.QPN, OwnerPID: x.qp.OwnerPID, Before: describe(x.qp)}
	if x.owner != nil {
		cctx, cancel := context.WithTimeout(ctx, d.cfg.CommandTimeout)
		defer cancel()
		out, err := x.owner.command(cctx, ownerproto.Command{Op: op, Device: x.qp.Device, QPN: x.qp.QPN, DryRun: dryRun})
		if err != nil {
			r.Error = err.Error()
			var ae *api.Error
			return r, errors.As(err, &ae) && (ae.Code == api.CodeOwnerTimeout || ae.Code == api.CodeOwnerGone)
		}
		r.OK, r.Error = out.OK, out.Error
		if out.Before != (status.QPState{}) {
			r.Before = out.Before
		}
		r.After = out.After
		return r, false
	}
	return d.simAct(op, dryRun, x.qp, r), false
}

// simAct acts on a QP of the simulated workload through its layer-1
// manager.
func (d *Daemon) simAct(op string, dryRun bool, q status.QP, r api.QPResult) api.QPResult {
	qp, ok := d.sim.qp(q.Device, q.QPN)
	if !ok {
		r.Error = "the QP is gone"
		return r
	}
	var err error
	var after apm.QPStatus
	d.sim.local.Do(func(m *apm.Manager) {
		switch {
		case op == ownerproto.OpArm:
			err = m.Arm(qp)
		case dryRun:
			st, _ := m.QPStatus(qp)
			if !st.HasAlt || st.State.String() != "armed" {
				err = fmt.Errorf("migrate QP %#x: not armed (%v)", q.QPN, st.State)
			}
			st.Primary, st.Alternate = st.Alternate, st.Primary
			after = st
			return
		default:
			err = m.Migrate(qp)
		}
		after, _ = m.QPStatus(qp)
	})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.OK = true
	r.After = describe(qpStatus(after, q.OwnerUID))
	if dryRun {
		r.After = status.QPState{Primary: r.After.Primary}
	}
	return r
}
