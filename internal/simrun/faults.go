package simrun

import (
	"fmt"
	"math"
	"time"

	"github.com/ibpath/ibpath/verbs/sim"
)

// The faults a caller injects, each recorded (KindFault) at the virtual
// time it happens. Hosts are named node0 and node1, devices as the
// fabric names them (mlx5_0, mlx5_1; rxe0, rxe1 on RoCE), leaves
// rail<HCA>-p<port>.

// HCA returns the device dev of host.
func (w *World) HCA(host, dev string) (*sim.HCA, error) {
	h := w.Fabric.Host(host)
	if h == nil {
		return nil, fmt.Errorf("simrun: no host %q in the fabric", host)
	}
	a := h.HCA(dev)
	if a == nil {
		return nil, fmt.Errorf("simrun: no device %s on %s", dev, host)
	}
	return a, nil
}

// Port returns port n of the device dev of host.
func (w *World) Port(host, dev string, n uint8) (*sim.Port, error) {
	a, err := w.HCA(host, dev)
	if err != nil {
		return nil, err
	}
	p := a.Port(n)
	if p == nil {
		return nil, fmt.Errorf("simrun: %s/%s has no port %d", host, dev, n)
	}
	return p, nil
}

// SetCable pulls (up false) or plugs back (up true) the cable of a port.
func (w *World) SetCable(host, dev string, n uint8, up bool) error {
	p, err := w.Port(host, dev, n)
	if err != nil {
		return err
	}
	w.record(Record{Kind: KindFault, Text: fmt.Sprintf("cable of %s/%s port %d %s", host, dev, n, map[bool]string{true: "plugged back", false: "pulled"}[up])})
	if err := w.Fabric.SetLink(p, up); err != nil {
		return fmt.Errorf("simrun: sim.Fabric.SetLink(%v, %v): %w", p, up, err)
	}
	return nil
}

// KillHCA makes a device die: DEVICE_FATAL, its QPs flushed, its ports
// dead. A process's context on it stays dead.
func (w *World) KillHCA(host, dev string) error {
	a, err := w.HCA(host, dev)
	if err != nil {
		return err
	}
	w.record(Record{Kind: KindFault, Text: fmt.Sprintf("%s/%s dies", host, dev)})
	if err := w.Fabric.KillHCA(a); err != nil {
		return fmt.Errorf("simrun: sim.Fabric.KillHCA(%s/%s): %w", host, dev, err)
	}
	return nil
}

// SetLeaf kills (alive false) or revives a leaf switch: every port
// cabled to it goes down, or trains again.
func (w *World) SetLeaf(name string, alive bool) error {
	s := w.Fabric.Leaf(name)
	if s == nil {
		return fmt.Errorf("simrun: no leaf %q in the fabric", name)
	}
	w.record(Record{Kind: KindFault, Text: fmt.Sprintf("leaf %s %s", name, map[bool]string{true: "revived", false: "dies"}[alive])})
	op, call := w.Fabric.FailSwitch, "FailSwitch"
	if alive {
		op, call = w.Fabric.ReviveSwitch, "ReviveSwitch"
	}
	if err := op(s); err != nil {
		return fmt.Errorf("simrun: sim.Fabric.%s(%s): %w", call, name, err)
	}
	return nil
}

// SetLoss loses each packet entering or leaving a port with probability
// p (requests and responses alike; 0 ends it).
func (w *World) SetLoss(host, dev string, n uint8, p float64) error {
	port, err := w.Port(host, dev, n)
	if err != nil {
		return err
	}
	w.record(Record{Kind: KindFault, Text: fmt.Sprintf("loss on %s/%s port %d: %g%%", host, dev, n, 100*p)})
	if err := w.Fabric.SetLoss(port, p, p); err != nil {
		return fmt.Errorf("simrun: sim.Fabric.SetLoss(%v): %w", port, err)
	}
	return nil
}

// SetDelay delays each packet entering or leaving a port by a draw in
// [0, max]: packets arrive late and out of order (0 ends it).
func (w *World) SetDelay(host, dev string, n uint8, max time.Duration) error {
	port, err := w.Port(host, dev, n)
	if err != nil {
		return err
	}
	w.record(Record{Kind: KindFault, Text: fmt.Sprintf("delay on %s/%s port %d: up to %v", host, dev, n, max)})
	if err := w.Fabric.SetDelay(port, max); err != nil {
		return fmt.Errorf("simrun: sim.Fabric.SetDelay(%v): %w", port, err)
	}
	return nil
}

// AllowSurface says that an error may reach the application of q, and
// why (a fault that leaves its traffic no healthy path): the verdict
// then takes its errors for layer 3 at work rather than a violation.
func (w *World) AllowSurface(q *QP, why string) {
	if q.maySurface == "" {
		q.maySurface = why
	}
}

// MaySurface is why an error may reach q's application ("" when none
// may).
func (q *QP) MaySurface() string { return q.maySurface }

// Stall stops the process of connection conn on host for d, as a
// process that is not scheduled (SIGSTOP, an overloaded core): neither
// the application nor the runtime runs, nothing is polled or posted, no
// event is read; its HCA goes on answering the peer's packets.
func (w *World) Stall(host, conn string, d time.Duration) error {
	for _, p := range w.Procs {
		if p.Host.Name() == host && p.Name == host+" "+conn {
			w.record(Record{Kind: KindFault, Text: fmt.Sprintf("process %s stopped for %v", p.Name, d)})
			p.stopped = w.Fabric.Now() + d
			return nil
		}
	}
	return fmt.Errorf("simrun: no process of connection %q on %s", conn, host)
}

// Kill ends the process of connection conn on host, as SIGKILL does: it
// never runs again, and the kernel tears down every device context it
// opened (sim.Context.Teardown: its QPs destroyed, the application's and
// the runtime's backup alike). Its application is gone, so nothing of
// its QP is checked any more; its peer has nothing healthy left to talk
// to, and may see the error (layer 3).
func (w *World) Kill(host, conn string) error {
	for _, p := range w.Procs {
		if p.Host.Name() != host || p.Name != host+" "+conn {
			continue
		}
		w.record(Record{Kind: KindFault, Text: fmt.Sprintf("process %s killed", p.Name)})
		p.killed, p.stopped = true, time.Duration(math.MaxInt64)
		for _, c := range p.ctxs {
			c.Teardown()
		}
		p.QP.stopped = true
		w.AllowSurface(p.QP.Peer, fmt.Sprintf("its peer process %s was killed", p.Name))
		return nil
	}
	return fmt.Errorf("simrun: no process of connection %q on %s", conn, host)
}

// Killed reports whether the process was killed (Kill).
func (p *Proc) Killed() bool { return p.killed }

// SetDirectory takes every node's ibpathd away (up false), as while it
// restarts, or brings it back: the processes' sessions get their lookups
// (layer 1's descriptions of the peers' adapters, layer 2's backup QPs
// and MRs) and publications refused meanwhile. What the runtimes cached
// before stays theirs.
func (w *World) SetDirectory(up bool) {
	w.record(Record{Kind: KindFault, Text: map[bool]string{true: "ibpathd answers again", false: "ibpathd answers no lookup"}[up]})
	w.dirDown = !up
}
