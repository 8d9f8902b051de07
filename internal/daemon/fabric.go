package daemon

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
)

// pickFabric decides between real HCAs and the embedded simulated fabric.
func (d *Daemon) pickFabric() error {
	cls := filepath.Join(d.cfg.Sysfs, "class", "infiniband")
	var found []pathsel.HCAInfo
	var derr error
	if d.cfg.Fabric != "sim" {
		found, derr = pathsel.Discover(pathsel.DiscoverOptions{SysfsRoot: d.cfg.Sysfs})
	}
	switch {
	case d.cfg.Fabric == "sim":
		d.fabric = status.Fabric{Kind: status.FabricSim, Reason: "--fabric sim"}
	case d.cfg.Fabric == "hardware" && derr != nil:
		return fmt.Errorf("fabric hardware: discovery: %w", derr)
	case d.cfg.Fabric == "hardware" && len(found) == 0:
		return fmt.Errorf("fabric hardware: no RDMA device under %s", cls)
	case derr != nil && len(found) == 0:
		d.fabric = status.Fabric{Kind: status.FabricSim, Reason: fmt.Sprintf("discovery failed: %v", derr)}
	case len(found) == 0:
		d.fabric = status.Fabric{Kind: status.FabricSim, Reason: fmt.Sprintf("no RDMA device under %s", cls)}
	default:
		d.fabric = status.Fabric{Kind: status.FabricHardware, Reason: fmt.Sprintf("%d RDMA device(s) under %s", len(found), cls), Sysfs: d.cfg.Sysfs}
		if derr != nil {
			d.log.Warn("discovery: some devices could not be read", "err", derr)
		}
	}
	if d.fabric.Kind == status.FabricHardware {
		return nil
	}
	d.log.Warn("no RDMA hardware in use: ibpathd runs on the embedded simulated fabric", "reason", d.fabric.Reason,
		"seed", d.cfg.Sim.Seed, "hosts", d.cfg.Sim.Hosts, "index", d.cfg.Sim.Index, "qps", d.cfg.Sim.QPs)
	n, err := startSimNode(d.cfg.Sim, d.log.With("fabric", "sim"), d.simEvent)
	if err != nil {
		return fmt.Errorf("fabric sim: %w", err)
	}
	d.sim = n
	d.fabric.Sim = status.SimFabric{Seed: d.cfg.Sim.Seed, Host: fmt.Sprintf("node%d", d.cfg.Sim.Index), Hosts: d.cfg.Sim.Hosts}
	return nil
}

// discover reads the node's devices: sysfs on hardware, the device
// contexts on the simulated fabric.
func (d *Daemon) discover() ([]pathsel.HCAInfo, error) {
	if d.sim == nil {
		return pathsel.Discover(pathsel.DiscoverOptions{SysfsRoot: d.cfg.Sysfs})
	}
	var out []pathsel.HCAInfo
	for i, c := range d.sim.ctxs {
		h, err := pathsel.DiscoverContext(d.sim.names[i], c)
		if err != nil {
			return out, err
		}
		out = append(out, h)
	}
	return out, nil
}

// fullReadInterval is how often, at the most, the port poll on hardware
// goes without a full discovery. Between two full reads a poll reads only
// what changes at run time (pathsel.ReadPortStates: node GUIDs, port
// state, phys_state, LID, LMC, SM LID, rate; no GID table); a GID change
// alone (RoCE GIDs follow the netdev's IP addresses) shows within this
// interval.
const fullReadInterval = 30 * time.Second

// fullReadEvery is how many port polls make fullReadInterval: 30 at the
// default 1 s poll, 1 (every poll) for polls of 30 s or longer.
func fullReadEvery(poll time.Duration) int {
	if poll <= 0 {
		return 1
	}
	return max(1, int(fullReadInterval/poll))
}

// portPoll is the port watcher's state between polls on hardware. Only
// refreshPorts, which New and then the port watcher call one at a time,
// uses it.
type portPoll struct {
	every int // a full discovery at least every this many polls
	since int // polls since the last full discovery
	// fullReads and lightReads count full discoveries and light reads
	// (tests).
	fullReads, lightReads atomic.Uint64
}

// needFullRead decides, on hardware, whether this poll must re-read the
// whole inventory: on the first poll, when the last one failed, every
// fullReadEvery polls, and when the light read fails or differs from the
// last inventory. Otherwise the devices, their ports and the ports'
// run-time attributes are as in the last inventory: what DiffPorts could
// still report (a GID table, or a link layer, which does not change while
// a device is registered) is left to the periodic full read.
func (d *Daemon) needFullRead() bool {
	d.invMu.Lock()
	old, oldErr := d.inv, d.invErr
	d.invMu.Unlock()
	d.poll.since++
	if old == nil || oldErr != nil || d.poll.since >= d.poll.every {
		return true
	}
	light, err := pathsel.ReadPortStates(pathsel.DiscoverOptions{SysfsRoot: d.cfg.Sysfs})
	d.poll.lightReads.Add(1)
	return err != nil || pathsel.PortStatesDiffer(old, light)
}

// refreshPorts re-reads the devices, emits PortStateChanged for every
// port whose state changed, and keeps the result for status. On hardware
// a poll first makes the light read (needFullRead) and stops there when
// nothing changed; the events come from two full inventories either way.
func (d *Daemon) refreshPorts() {
	if d.sim == nil {
		if !d.needFullRead() {
			return
		}
		d.poll.since = 0
		d.poll.fullReads.Add(1)
	}
	inv, err := d.discover()
	d.invMu.Lock()
	old := d.inv
	d.inv, d.invErr = inv, err
	d.invMu.Unlock()
	if err != nil {
		d.log.Warn("port refresh", "err", err)
	} else {
		d.damp.observe(inv)
	}
	if old == nil {
		return
	}
	for _, c := range pathsel.DiffPorts(old, inv) {
		switch {
		case c.Kind == pathsel.PortChanged && c.Fields&(pathsel.FieldState|pathsel.FieldPhysState) != 0:
			d.event(status.Event{Kind: status.EvPortStateChanged, Device: c.Device, Port: c.Port,
				From: c.Old.State.String(), To: c.New.State.String(), Reason: c.Fields.String()})
		case c.Kind == pathsel.PortChanged:
			d.log.Info("port attributes changed", "change", c.String())
		default:
			d.log.Warn("device change", "change", c.String())
			if c.Port != 0 {
				d.event(status.Event{Kind: status.EvPortStateChanged, Device: c.Device, Port: c.Port,
					From: c.Old.State.String(), To: c.New.State.String(), Reason: c.Kind.String()})
			}
		}
	}
}

// watchPorts polls the ports. On hardware, a port event also arrives as an
// async event on the owners' device contexts; polling sysfs is what the
// daemon can do without opening every device itself.
func (d *Daemon) watchPorts() { d.every(d.cfg.PortPoll, d.refreshPorts) }

// every runs f every period until the daemon stops (one of d.wg's).
func (d *Daemon) every(period time.Duration, f func()) {
	defer d.wg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			f()
		}
	}
}

// localRoutes are this node's GIDs and LIDs, which replication advertises
// so a peer can find the node that holds a QP's other end.
func (d *Daemon) localRoutes() []ownerproto.Route {
	d.invMu.Lock()
	defer d.invMu.Unlock()
	var out []ownerproto.Route
	for _, h := range d.inv {
		for _, p := range h.Ports {
			if p.LID != 0 {
				for b := 0; b < 1<<p.LMC; b++ {
					out = append(out, ownerproto.Route{LID: p.LID + uint16(b)})
				}
			}
			for _, g := range p.GIDs {
				out = append(out, ownerproto.Route{GID: g.GID})
			}
		}
	}
	return out
}
