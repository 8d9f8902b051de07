package demo

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/internal/simrun"
)

// scenario is what a run plays: steps at virtual times, then the
// applications stop posting and the queues drain.
type scenario struct {
	header []string // what the header says of it
	steps  []step
	stopAt time.Duration // the applications stop posting
}

// step is one fault or repair.
type step struct {
	at    time.Duration
	fault bool   // a fault (false: a repair)
	text  string // what it does, as the timeline says it
	do    func(w *simrun.World) error
	// allow names the connections whose errors may reach the
	// applications from this step on (layer 3: no healthy path is left),
	// and why.
	allow map[string]string
}

// faults counts the scenario's faults.
func (s scenario) faults() int {
	n := 0
	for _, st := range s.steps {
		if st.fault {
			n++
		}
	}
	return n
}

// The fabric as the scenarios name it.
const (
	node0 = "node0"
	node1 = "node1"
)

// dev names HCA i as the fabric does: mlx5_i, or rxei on RoCE.
func (o Options) dev(i int) string {
	if o.roce() {
		return fmt.Sprintf("rxe%d", i)
	}
	return fmt.Sprintf("mlx5_%d", i)
}

// ports is the number of ports of each HCA.
func (o Options) ports() int {
	if o.roce() {
		return 1
	}
	return 2
}

// adapter names an HCA in words: HCA on InfiniBand, NIC on RoCE.
func (o Options) adapter() string {
	if o.roce() {
		return "NIC"
	}
	return "HCA"
}

// cables pulls or plugs the cables of the listed ports of host's HCA dev.
func cables(host, dev string, up bool, ports ...uint8) func(*simrun.World) error {
	return func(w *simrun.World) error {
		for _, p := range ports {
			if err := w.SetCable(host, dev, p, up); err != nil {
				return err
			}
		}
		return nil
	}
}

// allPorts lists the ports of an HCA.
func (o Options) allPorts() []uint8 {
	ps := []uint8{1}
	if o.ports() == 2 {
		ps = append(ps, 2)
	}
	return ps
}

// cablesWord names the cables of an HCA: both on InfiniBand, the one on
// RoCE.
func (o Options) cablesWord() string {
	if o.roce() {
		return "the cable"
	}
	return "both cables"
}

// The scripted scenario, in virtual time.
const (
	pullAt    = 5 * time.Millisecond   // pull the cable of node0's HCA 0 port 1 (QP A)
	plugAt    = 200 * time.Millisecond // plug it back in
	cutAt     = 300 * time.Millisecond // pull every cable of node0's HCA 1 (QP B)
	recableAt = 340 * time.Millisecond // plug them back in: layer 2 switches QP B back
	killAt    = 450 * time.Millisecond // kill node0's HCA 1
	stopAt    = 990 * time.Millisecond // stop posting, let the queues drain
)

// scripted is the default scenario.
func scripted(o Options) scenario {
	a, b := o.dev(0), o.dev(1)
	return scenario{
		header: []string{
			fmt.Sprintf("script: %v pull the cable of %s/%s port 1 (QP A), %v plug it back; %v pull %s of %s/%s (QP B), %v plug back;",
				pullAt, node0, a, plugAt, cutAt, o.cablesWord(), node0, b, recableAt),
			fmt.Sprintf("  %v kill %s %s/%s, %v stop posting", killAt, o.adapter(), node0, b, stopAt),
		},
		stopAt: stopAt,
		steps: []step{
			{at: pullAt, fault: true, text: fmt.Sprintf("cable of %s/%s port 1 pulled", node0, a), do: cables(node0, a, false, 1)},
			{at: plugAt, text: fmt.Sprintf("cable of %s/%s port 1 plugged back in", node0, a), do: cables(node0, a, true, 1)},
			{at: cutAt, fault: true, text: fmt.Sprintf("%s of %s/%s pulled: QP B's default %s has no path left", o.cablesWord(), node0, b, o.adapter()),
				do: cables(node0, b, false, o.allPorts()...)},
			{at: recableAt, text: fmt.Sprintf("%s of %s/%s plugged back in", o.cablesWord(), node0, b), do: cables(node0, b, true, o.allPorts()...)},
			{at: killAt, fault: true, text: fmt.Sprintf("%s %s/%s dies", o.adapter(), node0, b),
				do: func(w *simrun.World) error { return w.KillHCA(node0, b) }},
		},
	}
}

// describe is a step's line in the timeline.
func (s step) describe() string {
	if s.fault {
		return "FAULT: " + s.text
	}
	return "REPAIR: " + s.text
}

// plan lists the steps for the header of a random scenario.
func plan(steps []step) []string {
	var out []string
	for _, s := range steps {
		kind := "repair"
		if s.fault {
			kind = "fault "
		}
		out = append(out, fmt.Sprintf("  %10.3f ms  %s %s", float64(s.at)/float64(time.Millisecond), kind, s.text))
	}
	return out
}
