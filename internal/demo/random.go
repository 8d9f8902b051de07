package demo

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ibpath/ibpath/internal/simrun"
)

// A random scenario (--random) draws from the seed two to four faults
// that heal, one after the other, each with its repair, then, one time in
// five each, an HCA that dies, a whole host whose HCAs all die, both ends'
// HCAs of a connection, or a backup and then its default HCA. The
// kinds are those of the campaigns of crossnic and verbs/sim that a
// process-level run can drive:
//
//	pull     a cable of either port of an HCA pulled, plugged back after 20-300 ms
//	flap     a cable pulled and plugged back 2-4 times (down 1-30 ms, up 5-60 ms)
//	hca      every cable of an HCA pulled, plugged back after 20-300 ms
//	leaf     a leaf switch (one rail, one port of each host's HCA) dies, revived after 20-300 ms
//	loss     1, 2 or 5% of the packets through a port lost for 20-150 ms
//	delay    the packets through a port delayed by up to 10, 50 or 200 µs (reordered) for 20-150 ms
//	stall    every cable of an HCA pulled while the peer's process of that
//	         connection is stopped (not scheduled) for 1-50 ms: the failover
//	         waits for the peer's answer; plugged back after 20-300 ms
//	death    an HCA dies for good
//	host     both HCAs of a host die: nothing healthy is left for its QPs,
//	         whose errors, and their peers', may reach the applications (layer 3)
//	both     the default HCAs of one connection die on both hosts at once
//	backup   a host's backup HCA loses its cables, then its default HCA dies
//	         (with two HCAs a host, the backup of one connection is the
//	         other's default: both connections' errors may reach the
//	         applications)
//
//	kill     the process of one end of a connection killed (SIGKILL: the
//	         kernel destroys its QPs, backups included); its peer has
//	         nothing left to talk to, and its error may reach its
//	         application (layer 3); the killed side is not checked after
//
//	handshake a host's default HCA of one connection loses its cables, its
//	         backup 0-500 µs later too, during the failover, for 5-40 ms: that
//	         connection must come through; the other (whose default is that
//	         backup, whose backup is the dead HCA) may surface (layer 3)
//
//	ibpathd  drawn besides, one schedule in three: every node's ibpathd
//	         answers no lookup and takes no publication (as while it
//	         restarts) around one of the healing faults, from 0-10 ms
//	         before it until 0-50 ms after its repair; what the runtimes
//	         cached stays theirs
//
// The last six end a schedule (kill and handshake one time in fifteen
// each: they are drawn last, where the others leave the schedule without
// an end).
//
// Each fault starts 150-350 ms after the previous one healed, when the
// layers have brought the traffic home again: two faults never overlap.
// A flapping cable may hit layer 2 while it switches back (on RoCE, or
// once layer 1 let the QP go), which may surface the error (docs/SHIM.md,
// "Known limits"): the QPs of that HCA are allowed to.

// faultKinds are the kinds of a random scenario's healing faults.
var faultKinds = []string{"pull", "flap", "hca", "leaf", "loss", "delay", "stall"}

// Drawing bounds.
const (
	firstFault = 20 * time.Millisecond  // the first fault, after the world is ready
	settleMin  = 150 * time.Millisecond // between a repair and the next fault, at least
	settleDraw = 200 * time.Millisecond // and a draw of up to this more
	tailAfter  = 400 * time.Millisecond // the applications stop posting this long after the last step
)

// random draws a scenario from o.Seed.
func random(o Options) scenario {
	rng := rand.New(rand.NewPCG(o.Seed, 0x1b9a7f)) // a stream of its own: the fabric's draws stay the fabric's
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	host := func() string { return []string{node0, node1}[rng.IntN(2)] }
	var steps []step
	var spans [][2]time.Duration // each healing fault's start and end
	t := firstFault
	n := 2 + rng.IntN(3)
	for range n {
		h, hca := host(), rng.IntN(2)
		dev, port := o.dev(hca), uint8(1+rng.IntN(o.ports()))
		var end time.Duration
		switch kind := faultKinds[rng.IntN(len(faultKinds))]; kind {
		case "pull":
			end = t + ms(20, 300)
			steps = append(steps,
				step{at: t, fault: true, text: fmt.Sprintf("cable of %s/%s port %d pulled", h, dev, port), do: cables(h, dev, false, port)},
				step{at: end, text: fmt.Sprintf("cable of %s/%s port %d plugged back in", h, dev, port), do: cables(h, dev, true, port)})
		case "flap":
			count := 2 + rng.IntN(3)
			allow := map[string]string{simrun.Conns[hca]: "a link flapping again while layer 2 switches back (docs/SHIM.md, Known limits)"}
			end = t
			for i := range count {
				down := ms(1, 30)
				steps = append(steps,
					step{at: end, fault: true, allow: allow, text: fmt.Sprintf("flap %d of %d: cable of %s/%s port %d pulled", i+1, count, h, dev, port),
						do: cables(h, dev, false, port)},
					step{at: end + down, text: fmt.Sprintf("flap %d of %d: cable of %s/%s port %d plugged back in", i+1, count, h, dev, port),
						do: cables(h, dev, true, port)})
				end += down
				if i < count-1 {
					end += ms(5, 60)
				}
			}
		case "hca":
			end = t + ms(20, 300)
			steps = append(steps,
				step{at: t, fault: true, text: fmt.Sprintf("%s of %s/%s pulled", o.cablesWord(), h, dev), do: cables(h, dev, false, o.allPorts()...)},
				step{at: end, text: fmt.Sprintf("%s of %s/%s plugged back in", o.cablesWord(), h, dev), do: cables(h, dev, true, o.allPorts()...)})
		case "leaf":
			leaf := fmt.Sprintf("rail%d-p%d", hca, port)
			end = t + ms(20, 300)
			steps = append(steps,
				step{at: t, fault: true, text: fmt.Sprintf("leaf %s dies: port %d of %s on both hosts loses its link", leaf, port, dev),
					do: func(w *simrun.World) error { return w.SetLeaf(leaf, false) }},
				step{at: end, text: fmt.Sprintf("leaf %s revived", leaf), do: func(w *simrun.World) error { return w.SetLeaf(leaf, true) }})
		case "loss":
			p := []float64{0.01, 0.02, 0.05}[rng.IntN(3)]
			end = t + ms(20, 150)
			steps = append(steps,
				step{at: t, fault: true, text: fmt.Sprintf("%g%% of the packets through %s/%s port %d lost", 100*p, h, dev, port),
					do: func(w *simrun.World) error { return w.SetLoss(h, dev, port, p) }},
				step{at: end, text: fmt.Sprintf("no more loss through %s/%s port %d", h, dev, port),
					do: func(w *simrun.World) error { return w.SetLoss(h, dev, port, 0) }})
		case "stall":
			peer := map[string]string{node0: node1, node1: node0}[h]
			conn, d := simrun.Conns[hca], ms(1, 50)
			end = t + ms(20, 300)
			steps = append(steps,
				step{at: t, fault: true, text: fmt.Sprintf("process %s %s stopped for %v", peer, conn, d),
					do: func(w *simrun.World) error { return w.Stall(peer, conn, d) }},
				step{at: t, fault: true, text: fmt.Sprintf("%s of %s/%s pulled", o.cablesWord(), h, dev), do: cables(h, dev, false, o.allPorts()...)},
				step{at: end, text: fmt.Sprintf("%s of %s/%s plugged back in", o.cablesWord(), h, dev), do: cables(h, dev, true, o.allPorts()...)})
		case "delay":
			d := []time.Duration{10 * time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond}[rng.IntN(3)]
			end = t + ms(20, 150)
			steps = append(steps,
				step{at: t, fault: true, text: fmt.Sprintf("the packets through %s/%s port %d delayed by up to %v, out of order", h, dev, port, d),
					do: func(w *simrun.World) error { return w.SetDelay(h, dev, port, d) }},
				step{at: end, text: fmt.Sprintf("no more delay through %s/%s port %d", h, dev, port),
					do: func(w *simrun.World) error { return w.SetDelay(h, dev, port, 0) }})
		}
		spans = append(spans, [2]time.Duration{t, end})
		t = end + settleMin + ms(0, int(settleDraw/time.Millisecond))
	}
	switch rng.IntN(5) {
	case 3:
		// both ends' default HCAs of one connection at once: each side
		// fails over while the other does (no error may reach them)
		dev := o.dev(rng.IntN(2))
		steps = append(steps, step{at: t, fault: true, text: fmt.Sprintf("%s %s/%s and %s/%s die together", o.adapter(), node0, dev, node1, dev),
			do: func(w *simrun.World) error {
				for _, h := range []string{node0, node1} {
					if err := w.KillHCA(h, dev); err != nil {
						return err
					}
				}
				return nil
			}})
		t += tailAfter
	case 4:
		// the backup first: the other HCA's cables of a host, then its
		// default HCA dies: nothing healthy is left for that connection
		h, i := host(), rng.IntN(2)
		dev, bak := o.dev(i), o.dev(1-i)
		// With two HCAs a host, the backup of one connection is the
		// other's default: both are left with nothing healthy.
		why := fmt.Sprintf("%s's %s lost its cables and its %s died", h, bak, dev)
		allow := map[string]string{simrun.Conns[0]: why, simrun.Conns[1]: why}
		steps = append(steps,
			step{at: t, fault: true, text: fmt.Sprintf("%s of %s/%s (the backup of %s) pulled", o.cablesWord(), h, bak, dev), do: cables(h, bak, false, o.allPorts()...)},
			step{at: t + ms(5, 50), fault: true, allow: allow, text: fmt.Sprintf("%s %s/%s dies, its backup down", o.adapter(), h, dev),
				do: func(w *simrun.World) error { return w.KillHCA(h, dev) }})
		t = steps[len(steps)-1].at + tailAfter
	case 1:
		h, dev := host(), o.dev(rng.IntN(2))
		steps = append(steps, step{at: t, fault: true, text: fmt.Sprintf("%s %s/%s dies", o.adapter(), h, dev),
			do: func(w *simrun.World) error { return w.KillHCA(h, dev) }})
		t += tailAfter
	case 2:
		h := host()
		why := fmt.Sprintf("both %ss of %s died", o.adapter(), h)
		allow := map[string]string{}
		for _, c := range simrun.Conns {
			allow[c] = why
		}
		steps = append(steps, step{at: t, fault: true, allow: allow,
			text: fmt.Sprintf("both %ss of %s die: nothing healthy is left for its QPs", o.adapter(), h),
			do: func(w *simrun.World) error {
				for i := range 2 {
					if err := w.KillHCA(h, o.dev(i)); err != nil {
						return err
					}
				}
				return nil
			}})
		t += tailAfter
	default:
		switch rng.IntN(3) {
		case 1:
			// the process of one end of a connection killed: the kernel
			// destroys its QPs, the peer has nothing left to talk to
			h, conn := host(), simrun.Conns[rng.IntN(2)]
			steps = append(steps, step{at: t, fault: true, text: fmt.Sprintf("process %s %s killed", h, conn),
				do: func(w *simrun.World) error { return w.Kill(h, conn) }})
			t += tailAfter
		case 2:
			// the backup fails during the handshake: a host's default HCA
			// of one connection loses its cables, and its backup HCA loses
			// them too 0-500 µs later, while the failover's control
			// messages cross, for 5-40 ms (under one local ACK timeout:
			// the HCA resends them once it is back). That connection must
			// come through; the other, whose default is that backup and
			// whose backup is the dead HCA, may not (layer 3).
			h, i := host(), rng.IntN(2)
			dev, bak := o.dev(i), o.dev(1-i)
			after := []time.Duration{0, 50 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond}[rng.IntN(5)]
			down := ms(5, 40)
			why := fmt.Sprintf("%s's %s lost its cables while its backup %s had lost them", h, bak, dev)
			steps = append(steps,
				step{at: t, fault: true, text: fmt.Sprintf("%s of %s/%s pulled", o.cablesWord(), h, dev), do: cables(h, dev, false, o.allPorts()...)},
				step{at: t + after, fault: true, allow: map[string]string{simrun.Conns[1-i]: why},
					text: fmt.Sprintf("%s of %s/%s (the backup of %s) pulled, during the failover", o.cablesWord(), h, bak, dev),
					do:   cables(h, bak, false, o.allPorts()...)},
				step{at: t + after + down, text: fmt.Sprintf("%s of %s/%s plugged back in", o.cablesWord(), h, bak), do: cables(h, bak, true, o.allPorts()...)})
			t += after + down + tailAfter
		default:
			t += tailAfter - settleMin
		}
	}
	// Drawn last, so that the draws above keep their seeds' schedules:
	// one schedule in three has every ibpathd down (as while it
	// restarts) around one of its healing faults, from 0-10 ms before
	// it until 0-50 ms after its repair.
	if rng.IntN(3) == 0 {
		sp := spans[rng.IntN(len(spans))]
		down, up := sp[0]-ms(0, 10), sp[1]+ms(0, 50)
		steps = append(steps,
			step{at: down, fault: true, text: "ibpathd answers no lookup (as while it restarts)",
				do: func(w *simrun.World) error { w.SetDirectory(false); return nil }},
			step{at: up, text: "ibpathd answers again", do: func(w *simrun.World) error { w.SetDirectory(true); return nil }})
		slices.SortStableFunc(steps, func(a, b step) int { return cmp.Compare(a.at, b.at) })
	}
	return scenario{
		header: append([]string{fmt.Sprintf("schedule drawn from seed %d: %d faults that heal, one after the other%s:", o.Seed, n, tailWords(steps))}, plan(steps)...),
		steps:  steps,
		stopAt: t,
	}
}

// tailWords says how a random schedule ends.
func tailWords(steps []step) string {
	last := steps[len(steps)-1]
	switch {
	case !last.fault:
		return ""
	case strings.Contains(last.text, "backup down"):
		return ", then a backup loses its cables and its default adapter dies"
	case strings.Contains(last.text, "plugged back in") && strings.Contains(steps[len(steps)-2].text, "during the failover"):
		return ", then a backup fails during the failover and comes back"
	case strings.HasSuffix(last.text, " killed"):
		return ", then a process is killed"
	case strings.Contains(last.text, "die together"):
		return ", then the adapters at both ends of a connection die"
	case len(last.allow) > 0:
		return ", then a host loses every adapter"
	}
	return ", then an adapter dies"
}
