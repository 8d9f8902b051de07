package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/store/replica"
	"github.com/ibpath/ibpath/verbs"
)

// Adapter descriptions for layer 1 (lookup_hca): the adapter that holds a
// route, with its ports' current states. Whether a route is this node's is
// decided from the port poll's last inventory, without reading anything:
// a shim asks for the other end of its QPs' paths, on another node in all
// but loopback tests, as often as every probe of a peer (layer 1 probes
// every 50 ms a QP away from home or without an alternate; its cache keeps
// an answer 250 ms), so a read per request would be paid per session and
// per probe. A local route is described from this node's devices with the
// port states of the moment (currentInventory: on hardware the port poll's
// inventory once a light read found the ports unchanged, a full discovery
// otherwise; the device contexts on the simulated fabric); any other route
// is asked of the node whose replication metadata holds it, which answers
// the same way, and the answer is cached here for
// replica.DefaultDescribeTTL (1 s).

// errNotLocal: no adapter of this node holds the route.
var errNotLocal = errors.New("no adapter of this node holds the route")

// describeLocal describes this node's adapter that holds r. A route that
// no port of the port poll's last good inventory holds is not local, and
// nothing is read to say so: routes change only with a port's LID or LMC
// (which the poll's light read sees, and answers with a full read: such a
// route is local from the next poll on) or its GID table (which only full
// reads see: from the next one on, within fullReadInterval, as the GIDs a
// description carries).
func (d *Daemon) describeLocal(r ownerproto.Route) (pathsel.HCA, error) {
	d.invMu.Lock()
	last, lastErr := d.inv, d.invErr
	d.invMu.Unlock()
	if last != nil && lastErr == nil && !inventoryHolds(last, r) {
		return pathsel.HCA{}, fmt.Errorf("%s: %w", r, errNotLocal)
	}
	inv, err := d.currentInventory()
	for _, h := range inv {
		for _, p := range h.Ports {
			if holds(p, r) {
				return d.drainView(h.HCA()), nil
			}
		}
	}
	if err != nil {
		return pathsel.HCA{}, fmt.Errorf("%s: %w (discovery: %w)", r, errNotLocal, err)
	}
	return pathsel.HCA{}, fmt.Errorf("%s: %w", r, errNotLocal)
}

// inventoryHolds reports whether a port of inv is the destination of r.
func inventoryHolds(inv []pathsel.HCAInfo, r ownerproto.Route) bool { return devicesHold(inv, nil, r) }

// devicesHold reports whether a port of one of devs in inv (of any
// device when devs is nil) is the destination of r.
func devicesHold(inv []pathsel.HCAInfo, devs []string, r ownerproto.Route) bool {
	for _, h := range inv {
		if devs != nil && !slices.Contains(devs, h.Name) {
			continue
		}
		for _, p := range h.Ports {
			if holds(p, r) {
				return true
			}
		}
	}
	return false
}

// holds reports whether port p is the destination of r: r's GID when it
// has one, else its LID (in the port's LMC range).
func holds(p pathsel.PortInfo, r ownerproto.Route) bool {
	if !r.GID.IsZero() {
		for _, g := range p.GIDs {
			if g.GID == r.GID {
				return true
			}
		}
		return false
	}
	return p.Port().HasLID(r.LID)
}

// describeForPeer answers a peer's describe request (replica.Describer).
func (d *Daemon) describeForPeer(r replica.Route) (replica.HCA, error) {
	h, err := d.describeLocal(ownerproto.Route{GID: r.GID, LID: r.LID})
	if err != nil {
		return replica.HCA{}, err
	}
	return toReplicaHCA(h), nil
}

// describe is lookup_hca's answer: local, else from the route's node.
func (d *Daemon) describe(ctx context.Context, r ownerproto.Route) (pathsel.HCA, error) {
	h, err := d.describeLocal(r)
	if err == nil || !errors.Is(err, errNotLocal) {
		return h, err
	}
	return d.repl.DescribeHCA(ctx, r)
}

// lookupHCA answers a lookup_hca, off the session's read loop: it may
// wait for a peer.
func (d *Daemon) lookupHCA(o *owner, m ownerproto.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	var f ownerproto.Found
	if h, err := d.describe(ctx, *m.Lookup.HCA); err != nil {
		f.Error = err.Error()
	} else {
		hca := ownerproto.HCAFrom(h)
		f.HCA = &hca
	}
	if err := o.c.Send(ownerproto.Msg{Type: ownerproto.TypeFound, ID: m.ID, Found: &f}); err != nil {
		d.log.Warn("lookup_hca reply", "owner_pid", o.hello.PID, "err", err)
	}
}

func toReplicaHCA(h pathsel.HCA) replica.HCA {
	out := replica.HCA{Name: h.Name, GUID: h.GUID, APM: h.APM}
	for _, p := range h.Ports {
		out.Ports = append(out.Ports, replica.HCAPort{Num: p.Num, State: p.State, LinkLayer: p.LinkLayer, LID: p.LID, LMC: p.LMC,
			GIDs: append([]verbs.GID(nil), p.GIDs...)})
	}
	return out
}

func fromReplicaHCA(h replica.HCA) pathsel.HCA {
	out := pathsel.HCA{Name: h.Name, GUID: h.GUID, APM: h.APM}
	for _, p := range h.Ports {
		out.Ports = append(out.Ports, pathsel.Port{Num: p.Num, State: p.State, LinkLayer: p.LinkLayer, LID: p.LID, LMC: p.LMC,
			GIDs: append([]verbs.GID(nil), p.GIDs...)})
	}
	return out
}

// currentInventory is this node's devices with their ports' states of the
// moment. On hardware it is the port poll's last inventory when a light
// read (pathsel.ReadPortStates: a few files per port) finds every port as
// it was; only a change, or no inventory yet, costs a full discovery,
// which reads every GID table (a thousand files per RoCE port). Only
// routes this node holds get here (describeLocal): a peer's describe
// request, at most once per route per replica.DefaultDescribeTTL from each
// peer, and a shim's lookup_hca of a path to this node. The GID tables may
// be up to the poll's full-read interval old.
func (d *Daemon) currentInventory() ([]pathsel.HCAInfo, error) {
	d.describeReads.Add(1)
	if d.sim != nil {
		return d.discover()
	}
	d.invMu.Lock()
	inv, invErr := d.inv, d.invErr
	d.invMu.Unlock()
	if inv == nil || invErr != nil {
		return d.discover()
	}
	light, err := pathsel.ReadPortStates(pathsel.DiscoverOptions{SysfsRoot: d.cfg.Sysfs})
	if err != nil || pathsel.PortStatesDiffer(inv, light) {
		return d.discover()
	}
	return inv, nil
}
