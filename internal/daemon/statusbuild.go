package daemon

import (
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
)

// Status returns a snapshot of the node's status.
func (d *Daemon) Status() status.Node { return d.StatusOf(-1) }

// StatusOf is the status with at most rows QP rows (all when rows < 0),
// the first by owner (the simulated workload first, then by pid), device
// and QPN. QPsTotal, Layers and the totals count every QP whatever rows
// is: a node with 100,000 QPs answers a summary without copying and
// sorting them all (docs/PERFORMANCE.md, "ibpathd under load").
func (d *Daemon) StatusOf(rows int) status.Node {
	n := status.Node{Schema: status.SchemaVersion, Node: d.cfg.Node, Version: d.cfg.Build.Version, Started: d.started, Fabric: d.fabric, Damping: d.damp.config().String(), Health: d.healthRule(),
		Layers: map[string]int{status.LayerAPM: 0, status.LayerCrossNIC: 0, status.LayerNone: 0, status.LayerOther: 0}}
	armed := fsm.APMArmed.String()
	count := func(q status.QP) {
		n.QPsTotal++
		if _, ok := n.Layers[q.Layer]; ok {
			n.Layers[q.Layer]++
		} else {
			n.Layers[status.LayerOther]++
		}
		if q.APM == armed {
			n.Totals.ArmedQPs++
		}
	}
	room := func() int {
		if rows < 0 {
			return math.MaxInt
		}
		return rows - len(n.QPs)
	}
	d.invMu.Lock()
	if d.invErr != nil {
		n.Fabric.Error = d.invErr.Error()
	}
	now := d.damp.now()
	for _, h := range d.inv {
		hs := hcaStatus(h)
		for i := range hs.Ports {
			hs.Ports[i].Damping = d.damp.port(h.Name, hs.Ports[i].Num, now)
			hs.Ports[i].Health = d.portHealthStatus(h.Name, hs.Ports[i].Num)
			if pd := hs.Ports[i].Damping; pd != nil && pd.Suppressed {
				n.Totals.SuppressedPorts++
			}
			if ph := hs.Ports[i].Health; ph != nil && ph.OutOfService {
				n.Totals.DegradedPorts++
			}
		}
		n.HCAs = append(n.HCAs, hs)
	}
	ports := pathPorts(d.inv)
	d.invMu.Unlock()
	ds := d.newDrainStatus()
	for _, q := range d.simQPs() {
		count(q)
		ds.see(q, nil)
		if room() > 0 {
			fillPaths(ports, &q)
			n.QPs = append(n.QPs, q)
		}
	}
	for _, o := range d.owners.list() {
		var qs []status.QP
		o.mu.Lock()
		want := room() > 0
		for _, q := range o.qps {
			count(q)
			ds.see(q, o)
			if want {
				qs = append(qs, q)
			}
		}
		held := len(o.qps)
		o.mu.Unlock()
		sort.Slice(qs, func(i, j int) bool {
			if qs[i].Device != qs[j].Device {
				return qs[i].Device < qs[j].Device
			}
			return qs[i].QPN < qs[j].QPN
		})
		qs = qs[:min(len(qs), room())]
		for i := range qs {
			fillPaths(ports, &qs[i])
		}
		n.QPs = append(n.QPs, qs...)
		n.Owners = append(n.Owners, status.Owner{PID: o.hello.PID, UID: o.caller.UID, Comm: o.hello.Comm,
			Incarnation: o.hello.Incarnation, Attached: o.attached, QPs: held, Proto: o.hello.Proto})
	}
	n.Drains = ds.list
	if n.HCAs == nil {
		n.HCAs = []status.HCA{}
	}
	if n.QPs == nil {
		n.QPs = []status.QP{}
	}
	if n.Owners == nil {
		n.Owners = []status.Owner{}
	}
	n.Repl = d.repl.Repl()
	n.Peers = d.repl.Peers()
	if n.Peers == nil {
		n.Peers = []status.Peer{}
	}
	st := d.repl.Store()
	n.Store.Path = d.storePath()
	n.Store.QPs, n.Store.MRs = st.Entries()
	n.Store.Tombstones = st.Tombstones()
	n.Store.Note = d.storeNote
	n.Totals.Migrations, n.Totals.Failovers, n.Totals.Switchbacks = d.migrations.Load(), d.failovers.Load(), d.switchbacks.Load()
	n.Totals.OwnerRefusals, n.Totals.ConnectionsRefused = d.ownerRefusals.Load(), d.conns.refused.Load()
	d.repl.Totals(&n.Totals)
	return n
}

func hcaStatus(h pathsel.HCAInfo) status.HCA {
	s := status.HCA{Name: h.Name, NodeType: h.NodeType, FW: h.FW, APM: h.APM, Uverbs: h.Uverbs, Ports: []status.Port{}}
	if h.NodeGUID != 0 {
		g := h.NodeGUID
		s.NodeGUID = fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
	}
	for _, p := range h.Ports {
		ps := status.Port{Num: p.Num, State: p.State.String(), PhysState: p.PhysState.String(), LinkLayer: p.LinkLayer.String(),
			LID: p.LID, LMC: p.LMC, SMLID: p.SMLID, Rate: p.Rate, Netdev: p.Netdev}
		for _, g := range p.GIDs {
			ps.GIDs = append(ps.GIDs, g.GID.String())
		}
		s.Ports = append(s.Ports, ps)
	}
	return s
}

// simQPs lists the embedded workload's QPs, which ibpathd owns.
func (d *Daemon) simQPs() []status.QP {
	if d.sim == nil {
		return nil
	}
	var sts []apm.QPStatus
	d.sim.local.Do(func(m *apm.Manager) { sts = m.Status() })
	uid := uint32(os.Getuid())
	out := make([]status.QP, 0, len(sts))
	for _, s := range sts {
		out = append(out, qpStatus(s, uid))
	}
	return out
}

// qpStatus renders layer 1's view of a QP.
func qpStatus(s apm.QPStatus, uid uint32) status.QP {
	q := status.QP{Device: s.Device, QPN: s.QPN, Port: s.Primary.Port, OwnerUID: uid, APM: s.State.String(),
		Primary: l1Path(s.Device, s.Primary), Home: l1Path(s.Device, s.Home), Migrations: s.Migrations, Reason: s.Reason}
	if s.HasAlt {
		q.Alternate = l1Path(s.Device, s.Alternate)
	}
	switch s.State {
	case fsm.APMUnprotected, fsm.APMUnsupported, fsm.APMHandedOver:
		q.Layer = status.LayerNone // the workload has no layer 2
	default:
		q.Layer = status.LayerAPM
	}
	return q
}

// l1Path is a path of layer 1 on device dev; zero for none.
func l1Path(dev string, p fsm.PathRef) status.Path {
	if p.Port == 0 {
		return status.Path{}
	}
	return status.Path{Device: dev, Port: p.Port, PathBits: p.Bits}
}

// describe is a QP's state and primary path, as action results show it.
func describe(q status.QP) status.QPState { return status.QPState{APM: q.APM, Primary: q.Primary} }
