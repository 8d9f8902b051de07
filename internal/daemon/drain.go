package daemon

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// A drain takes a port out of service while its link is up, for
// maintenance: every process holding QPs is told (ownerproto.OpDrain) and
// keeps its traffic off the port until the undrain (docs/DAEMON.md,
// "Maintenance"); the port is described DOWN to the peers, so that they
// do not fail back onto it either; the drain is kept in drains.json and
// applied again after a restart, and to processes that attach later.

// drainStatusRows bounds the QPs listed under one drained port.
const drainStatusRows = 100

func (d *Daemon) openDrains() error {
	s, err := loadDrains(filepath.Join(d.cfg.StateDir, drainsFile))
	if err != nil {
		return err
	}
	d.drains = s
	for _, x := range s.all() {
		d.log.Info("port drained (kept from before the restart)", "device", x.Device, "port", x.Port, "since", x.Since)
		if d.sim != nil {
			d.sim.drain(x.Device, x.Port, true)
		}
	}
	return nil
}

// Drain takes a port out of service.
func (d *Daemon) Drain(ctx context.Context, c api.Caller, req api.PortRequest) (api.DrainResult, error) {
	return d.drainPort(ctx, c, req, true)
}

// Undrain puts a drained port back in service.
func (d *Daemon) Undrain(ctx context.Context, c api.Caller, req api.PortRequest) (api.DrainResult, error) {
	return d.drainPort(ctx, c, req, false)
}

func (d *Daemon) drainPort(ctx context.Context, c api.Caller, req api.PortRequest, on bool) (api.DrainResult, error) {
	op := ownerproto.OpUndrain
	if on {
		op = ownerproto.OpDrain
	}
	if err := req.Validate(); err != nil {
		return api.DrainResult{}, badRequest("%s: %v", op, err)
	}
	if err := d.policy.checkAction(c, op, api.Target{Device: req.Device, Port: req.Port}, 0); err != nil {
		d.log.Warn("action refused", "op", op, "port", req.String(), "uid", c.UID, "pid", c.PID)
		return api.DrainResult{}, err
	}
	if on && !d.hasPort(req.Device, req.Port) {
		return api.DrainResult{}, notFound("%s %s: no such port on this node", op, req)
	}
	var changed bool
	var err error
	if on {
		changed, err = d.drains.add(drained{Device: req.Device, Port: req.Port, Since: time.Now().UTC(), ByUID: c.UID})
	} else {
		changed, err = d.drains.remove(req.Device, req.Port)
	}
	if err != nil {
		return api.DrainResult{}, &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("%s %s: %v", op, req, err)}
	}
	res := api.DrainResult{Action: op, Device: req.Device, Port: req.Port, Drained: on, Changed: changed}
	if !on && d.healthOut(req.Device, req.Port) {
		// ibpathd keeps it out of service for its health (health.go)
		res.Note = fmt.Sprintf("%s stays out of service: ibpathd found it degraded; it comes back once healthy again and its flap damping allows", req)
		d.log.Info(op, "port", req.String(), "changed", changed, "note", res.Note, "uid", c.UID, "pid", c.PID)
		return res, nil
	}
	if d.sim != nil {
		res.Owners = append(res.Owners, d.sim.drain(req.Device, req.Port, on))
	}
	res.Owners = append(res.Owners, d.tellOwners(ctx, d.owners.list(), []ownerproto.Command{{Op: op, Device: req.Device, Port: req.Port}})...)
	d.log.Info(op, "port", req.String(), "changed", changed, "owners", len(res.Owners), "uid", c.UID, "pid", c.PID)
	return res, nil
}

// tellOwners sends cmds to each owner (up to actConcurrency owners at
// once, each owner's commands in order) and returns the answer of each
// owner's last command, or its first failure. An owner of protocol 1 is
// told nothing: it has no drain.
func (d *Daemon) tellOwners(ctx context.Context, os []*owner, cmds []ownerproto.Command) []api.OwnerAnswer {
	out := make([]api.OwnerAnswer, len(os))
	sem := make(chan struct{}, actConcurrency)
	var wg sync.WaitGroup
	for i, o := range os {
		out[i].PID = o.hello.PID
		if o.hello.Proto < ownerproto.OpDrainProto {
			out[i].Error = noDrain(o)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, c := range cmds {
				cctx, cancel := context.WithTimeout(ctx, d.cfg.CommandTimeout)
				r, err := o.command(cctx, c)
				cancel()
				if err != nil {
					out[i] = api.OwnerAnswer{PID: o.hello.PID, Error: err.Error()}
					return
				}
				out[i] = api.OwnerAnswer{PID: o.hello.PID, OK: r.OK, After: r.Note, Error: r.Error}
				if !r.OK {
					return
				}
			}
		}()
	}
	wg.Wait()
	return out
}

func noDrain(o *owner) string {
	return fmt.Sprintf("pid %d runs a libibpath of owner protocol %d, which has no drain: its QPs stay where they are until it is restarted with this version's libibpath",
		o.hello.PID, o.hello.Proto)
}

// drainNewOwner tells an owner that just attached about the drained
// ports, off its session's read loop.
func (d *Daemon) drainNewOwner(o *owner) {
	all := d.drains.all()
	var cmds []ownerproto.Command
	for _, x := range all {
		cmds = append(cmds, ownerproto.Command{Op: ownerproto.OpDrain, Device: x.Device, Port: x.Port})
	}
	for k := range d.healthDrains() {
		if !d.drains.has(k.Device, k.Port) {
			cmds = append(cmds, ownerproto.Command{Op: ownerproto.OpDrain, Device: k.Device, Port: k.Port})
		}
	}
	if len(cmds) == 0 || o.hello.Proto < ownerproto.OpDrainProto {
		return
	}
	if a := d.tellOwners(context.Background(), []*owner{o}, cmds)[0]; a.Error != "" {
		d.log.Warn("drain: a process that attached was not told", "pid", o.hello.PID, "err", a.Error)
	}
}

// drainStatus lists the drained ports with the QPs still on each: it is
// called with every QP of the node (StatusOf's count).
type drainStatus struct {
	d    *Daemon
	list []status.Drain
}

func (d *Daemon) newDrainStatus() *drainStatus {
	s := &drainStatus{d: d}
	for _, x := range d.drains.all() {
		s.list = append(s.list, status.Drain{Device: x.Device, Port: x.Port, Since: x.Since, ByUID: x.ByUID, QPs: []status.DrainQP{}})
	}
	hd := d.healthDrains()
	keys := slices.SortedFunc(maps.Keys(hd), pathsel.ComparePortKeys)
	for _, k := range keys {
		if x := hd[k]; !d.drains.has(k.Device, k.Port) {
			why := "degraded: " + x.why
			if x.healthy {
				why = "degraded (healthy again, back once its flap damping allows): " + x.why
			}
			s.list = append(s.list, status.Drain{Device: k.Device, Port: k.Port, Since: x.since.UTC(), Reason: why, QPs: []status.DrainQP{}})
		}
	}
	return s
}

// see notes q if its traffic still uses a drained port.
func (s *drainStatus) see(q status.QP, o *owner) {
	if len(s.list) == 0 || q.CrossNIC != "" && q.CrossNIC != "default" {
		return
	}
	for i := range s.list {
		x := &s.list[i]
		if x.Device != q.Device || x.Port != q.Port {
			continue
		}
		x.QPsLeft++
		if len(x.QPs) < drainStatusRows {
			x.QPs = append(x.QPs, status.DrainQP{OwnerPID: q.OwnerPID, QPN: q.QPN, Layer: q.Layer, Why: whyStays(q, o)})
		}
	}
}

// whyStays says why a QP's traffic has not left a drained port.
func whyStays(q status.QP, o *owner) string {
	switch {
	case o != nil && o.hello.Proto < ownerproto.OpDrainProto:
		return noDrain(o)
	case q.Reason != "":
		return q.Layer + ": " + q.Reason
	case q.Layer == status.LayerAPM:
		return "layer 1 is moving it (" + q.APM + ")"
	case q.Layer == status.LayerCrossNIC:
		return "layer 2 is failing it over"
	}
	return "no layer protects it: its traffic cannot move"
}

// drainView shows the drained ports of h DOWN, as the peers and local
// processes must see them: no path is chosen towards them.
func (d *Daemon) drainView(h pathsel.HCA) pathsel.HCA {
	if d.drains == nil {
		return h
	}
	cloned := false
	for i, p := range h.Ports {
		if d.drains.has(h.Name, p.Num) || d.healthOut(h.Name, p.Num) {
			if !cloned {
				h.Ports, cloned = slices.Clone(h.Ports), true
			}
			h.Ports[i].State = verbs.PortDown
		}
	}
	return h
}

// drain applies a drain or undrain to the simulated workload's layer 1
// (both hosts' view of this host's port: the peer host must not fail
// back onto it either).
func (n *simNode) drain(dev string, port uint8, on bool) api.OwnerAnswer {
	n.mu.Lock()
	if on {
		if !slices.Contains(n.drained[dev], port) {
			n.drained[dev] = append(n.drained[dev], port)
		}
	} else if i := slices.Index(n.drained[dev], port); i >= 0 {
		n.drained[dev] = slices.Delete(n.drained[dev], i, i+1)
	}
	n.mu.Unlock()
	moved := 0
	n.local.Do(func(m *apm.Manager) {
		if on {
			moved = m.Drain(dev, port)
		} else {
			m.Undrain(dev, port)
		}
	})
	after := "undrained"
	if on {
		after = fmt.Sprintf("drained; QPs moving off: %d", moved)
	}
	return api.OwnerAnswer{PID: 0, OK: true, After: after}
}

// viewOf is a describer of a host's adapter with the drained ports DOWN.
func (n *simNode) viewOf(c verbs.Context) func() (pathsel.HCA, error) {
	return func() (pathsel.HCA, error) {
		h, err := pathsel.Describe(c)
		if err != nil {
			return h, err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		ports := n.drained[h.Name]
		if len(ports) == 0 {
			return h, nil
		}
		h.Ports = slices.Clone(h.Ports)
		for i := range h.Ports {
			if slices.Contains(ports, h.Ports[i].Num) {
				h.Ports[i].State = verbs.PortDown
			}
		}
		return h, nil
	}
}
