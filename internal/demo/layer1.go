package demo

import (
	"fmt"
	"strings"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// Layer-1 configuration of both hosts.
// The demo's loop feeds every QP event to the managers, so the migration
// poll (for programs whose QP events nobody reads) is kept out of its
// timeline: layer 2 flushes and resets QP B behind layer 1's back, and
// the demo hands it back to layer 1 itself when it comes home.
var l1Config = apm.Config{Failback: fsm.FailbackAuto, FailbackHold: 100 * time.Millisecond, MigrationPoll: time.Hour}

// host is one node as ibpath runs it: the application process, its open
// devices and its layer-1 manager.
type host struct {
	name    string
	mgr     *apm.Manager
	devs    []*device
	wait    time.Duration // from the manager's last Tick
	pending bool
}

func (h *host) endpoint(dev string, qpn uint32) *endpoint {
	for _, d := range h.devs {
		if d.name != dev {
			continue
		}
		for _, e := range d.eps {
			if e.qp.QPN() == qpn {
				return e
			}
		}
	}
	return nil
}

func (h *host) endpointOf(qp verbs.QP) *endpoint {
	for _, d := range h.devs {
		for _, e := range d.eps {
			if e.qp == qp {
				return e
			}
		}
	}
	return nil
}

// recorder is the managers' next layer: it records the QP and prints the
// handover, then gives a protected QP to its layer-2 connection
// (crossnic.Conn.HandOver). An unprotected QP's error then reaches the
// application as plain verbs report it.
type recorder struct {
	s *scenario
	h *host
}

func (r *recorder) HandOver(qp verbs.QP, reason string) {
	s := r.s
	rec := HandoverRecord{At: s.f.Now(), Host: r.h.name, QPN: qp.QPN(), Reason: reason}
	name := fmt.Sprintf("%s qpn %#x", r.h.name, qp.QPN())
	e := r.h.endpointOf(qp)
	if e != nil {
		rec.Device, rec.QP, name = e.dev.name, e.qpName, e.String()
	}
	s.res.Handovers = append(s.res.Handovers, rec)
	if e == nil || e.l2 == nil {
		s.p.at(s.f.Now(), "%s layer 1: handed to layer 2, which does not protect it: plain verbs from here: %s", name, reason)
		return
	}
	s.p.at(s.f.Now(), "%s layer 1: handed to layer 2 (cross-NIC): %s", name, reason)
	e.l2.conn.HandOver(qp, reason)
	s.l2Check(e, "layer 1 handed over: "+reason)
}

// newCatalog describes every HCA of the fabric through an observer context
// of its own, as the replicated store will describe peers: the managers
// resolve the adapter a path leads to through it. A dead HCA cannot be
// described and so is never chosen.
func newCatalog(f *sim.Fabric) (*pathsel.Catalog, error) {
	cat := &pathsel.Catalog{}
	for _, h := range f.Hosts() {
		for _, a := range h.HCAs() {
			obs, err := h.Open(a.Name())
			if err != nil {
				return nil, fmt.Errorf("ibv_open_device %s/%s (observer): %w", h.Name(), a.Name(), err)
			}
			cat.Add(func() (pathsel.HCA, error) { return pathsel.Describe(obs) })
		}
	}
	return cat, nil
}

// l1Change is one change of a QP's layer-1 status, ready to print.
type l1Change struct {
	e    *endpoint
	text string
}

// diffL1 compares h's manager status with before (taken just before the
// manager handled cause), records every change and describes it.
func (s *scenario) diffL1(h *host, before []apm.QPStatus, cause string) []l1Change {
	var out []l1Change
	for _, st := range h.mgr.Status() {
		var old apm.QPStatus
		found := false
		for _, b := range before {
			if b.Device == st.Device && b.QPN == st.QPN {
				old, found = b, true
			}
		}
		if found && old == st {
			continue
		}
		e := h.endpoint(st.Device, st.QPN)
		if e == nil {
			continue
		}
		c := Layer1Change{At: s.f.Now(), Host: h.name, Device: st.Device, QP: e.qpName, Cause: cause,
			Before: old, After: st, New: !found}
		s.res.Layer1 = append(s.res.Layer1, c)
		if st.State == fsm.APMHandedOver && s.handedOver(h.name, st.QPN) {
			continue // the recorder printed it
		}
		if c.Cause == "PATH_MIG" && st.Migrations > old.Migrations {
			s.noteHWMigration(e)
		}
		if s.muted[e.qpName] {
			s.res.Muted[e.qpName]++
			continue
		}
		out = append(out, l1Change{e: e, text: describeL1(c)})
	}
	return out
}

func (s *scenario) handedOver(host string, qpn uint32) bool {
	for _, r := range s.res.Handovers {
		if r.Host == host && r.QPN == qpn {
			return true
		}
	}
	return false
}

// noteHWMigration notes that e's HCA migrated by itself. Two in a row
// within bounceWindow mean the sides of the QP chase each other between
// paths: the timeline says so once, then stops printing that QP's
// migrations, re-arms and retries (the summary counts them).
func (s *scenario) noteHWMigration(e *endpoint) {
	now := s.f.Now()
	last := e.lastHWMig
	e.lastHWMig = now
	if last == 0 || now-last > bounceWindow || s.muted[e.qpName] {
		return
	}
	s.muted[e.qpName] = true
	s.res.Bounced = append(s.res.Bounced, Bounce{QP: e.qpName, Host: e.dev.host.name, At: now})
	s.p.at(now, "%v: PATH_MIG again %s later: the sides keep swapping paths (QP %s's further ones not printed)",
		e, ms(now-last), e.qpName)
}

// describeL1 says what changed and why, then the new status.
func describeL1(c Layer1Change) string {
	st := c.After
	now := l1State(st)
	var why string
	switch {
	case c.New && st.State == fsm.APMUnsupported:
		return "unsupported: " + st.Reason
	case c.New:
		return now + " (alternate given at INIT->RTR, REARM at RTR->RTS)"
	case st.Migrations > c.Before.Migrations && c.Cause == "PORT_ERR":
		why = "PORT_ERR: proactive migration, at once"
	case st.Migrations > c.Before.Migrations && c.Cause == "PATH_MIG":
		why = "PATH_MIG: the HCA followed the peer"
	case st.Migrations > c.Before.Migrations && st.Primary == st.Home:
		why = fmt.Sprintf("failback after the %v hold-down", l1Config.FailbackHold)
	case st.Migrations > c.Before.Migrations:
		why = "migrated (" + c.Cause + ")"
	case st.State == fsm.APMHandedOver:
		return now
	case c.Cause == "tick" && st.State == fsm.APMArmed && c.Before.State == fsm.APMRearming:
		return now // the ARMED poll
	case c.Cause == "re-register":
		why = "registered again: layer 2 switched back and reset the QP, dropping its alternate"
	case c.Cause == "tick" && st.HasAlt && st.Alternate == st.Home && st.Primary != st.Home:
		why = "probe: home path usable again"
	case c.Cause == "PORT_ACTIVE" && st.HasAlt && st.Alternate == st.Home:
		why = "PORT_ACTIVE: home path usable again"
	default:
		why = c.Cause
	}
	return why + " -> " + now
}

// l1State renders a status: state, primary, alternate, reason.
func l1State(st apm.QPStatus) string {
	if st.State == fsm.APMHandedOver || st.State == fsm.APMUnsupported {
		return fmt.Sprintf("%v (%s)", st.State, st.Reason)
	}
	out := fmt.Sprintf("%v, primary %v", st.State, st.Primary)
	if st.HasAlt {
		out += fmt.Sprintf(", alternate %v", st.Alternate)
		if st.Alternate == st.Home {
			out += " (home)"
		}
	} else if st.Reason != "" {
		out += " (" + st.Reason + ")"
	}
	return out
}

// printL1 prints changes, one line per QP and description: identical
// changes of both sides of a QP at the same instant share a line.
func (s *scenario) printL1(cs []l1Change) {
	done := make([]bool, len(cs))
	for i, c := range cs {
		if done[i] {
			continue
		}
		who := c.e.dev.String()
		for j := i + 1; j < len(cs); j++ {
			if !done[j] && cs[j].e.qpName == c.e.qpName && cs[j].text == c.text {
				done[j] = true
				who += " + " + cs[j].e.dev.String()
			}
		}
		s.p.at(s.f.Now(), "%s QP %s layer 1: %s", who, c.e.qpName, c.text)
	}
}

// pump is the runtime loop of both hosts, run synchronously in virtual
// time: every pending async event of every open device is shown to the
// application and to its host's manager; then each manager does its timed
// work (ARMED polls, probes, failback). It repeats while that raised more
// events: a migration by ibv_modify_qp raises PATH_MIG at once.
func (s *scenario) pump() error {
	for round := 0; round < 8; round++ {
		n := 0
		for _, h := range s.hosts {
			for _, d := range h.devs {
				k, err := s.pollEvents(d)
				if err != nil {
					return err
				}
				n += k
			}
		}
		var batch []l1Change
		for _, h := range s.hosts {
			before := h.mgr.Status()
			h.wait, h.pending = h.mgr.Tick()
			batch = append(batch, s.diffL1(h, before, "tick")...)
		}
		s.printL1(batch)
		// Layer 2's timed work: probing a reset default QP, the
		// handshake timeout, purging the backup.
		for _, e := range s.eps {
			if e.l2 != nil {
				e.l2.conn.Tick()
				s.l2Check(e, "tick")
			}
		}
		if n == 0 && len(batch) == 0 {
			break
		}
	}
	return nil
}

// nextDue is when a manager asked to be called again (0: not before the
// next application step).
func (s *scenario) nextDue() time.Duration {
	due := time.Duration(0)
	for _, h := range s.hosts {
		if t := s.f.Now() + h.wait; h.pending && t > s.f.Now() && (due == 0 || t < due) {
			due = t
		}
	}
	return due
}

// l1Summary prints each QP's layer-1 status and each manager's counters.
func (s *scenario) l1Summary() {
	p := s.p
	p.plain("%-2s %-13s %-12s %-8s %-13s %4s  %s", "QP", "layer 1", "state", "primary", "alternate", "migr", "reason")
	for _, r := range s.res.Endpoints {
		if !r.L1Known {
			p.plain("%-2s %-13s not registered", r.QP, r.Host+"/"+r.Device)
			continue
		}
		st := r.L1
		alt := "-"
		if st.HasAlt {
			alt = st.Alternate.String()
			if st.Alternate == st.Home {
				alt += " (home)"
			}
		}
		reason := st.Reason
		if st.State == fsm.APMArmed && r.MigKnown && r.Mig != verbs.MigArmed {
			// Layer 2 reset the QP on the peer's notification, behind
			// layer 1's back: the status is the one it last saw.
			reason = fmt.Sprintf("stale: the QP is %v (layer 2 reset it)", r.Mig)
		}
		p.plain("%s", strings.TrimRight(fmt.Sprintf("%-2s %-13s %-12v %-8v %-13s %4d  %s", r.QP, r.Host+"/"+r.Device,
			st.State, st.Primary, alt, st.Migrations, reason), " "))
	}
	for _, h := range s.hosts {
		st := s.res.Managers[h.name]
		qps := 0
		for _, r := range s.res.Endpoints {
			if r.Host == h.name && r.L1Known {
				qps++
			}
		}
		p.plain("layer 1 on %s: %d QPs (%d registrations), %d loads, %d ARMED seen, migrations: %d by ibpath (%d failbacks) + %d by the HCA, %d handovers",
			h.name, qps, st.Registered, st.Loads, st.Armed, st.Migrations, st.Failbacks, st.HWMigrations, st.Handovers)
	}
}

// formatL1 renders changes for error messages.
func formatL1(cs []Layer1Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s %s/%s QP %s [%s]: %s\n", ms(c.At), c.Host, c.Device, c.QP, c.Cause, l1State(c.After))
	}
	return b.String()
}

// pullGap notes how long e went without a successful completion across
// the cable pull; once both sides of QP A have resumed it prints the
// comparison with what the hardware alone would have cost.
func (s *scenario) pullGap(e *endpoint, gap time.Duration) {
	if e.qpName != "A" {
		return
	}
	e.t.pullGap = gap
	s.res.PullRecovery = max(s.res.PullRecovery, gap)
	for _, x := range s.eps {
		if x.qpName == "A" && x.t.pullGap == 0 {
			return
		}
	}
	if s.roce() {
		s.p.at(s.f.Now(), "QP A: completing again on both sides after a %s gap: an HCA retry crossed the repaired cable;", ms(s.res.PullRecovery))
		s.p.plain("%13s  a cable out past the last retry fails the oldest WR with RETRY_EXC_ERR (1+%d) x %s = %s after it was sent", "",
			rcRetryCnt, ms(verbs.TimeoutDuration(rcTimeout)), ms(hwGiveUp()))
		return
	}
	s.p.at(s.f.Now(), "QP A: completing again on both sides after a %s gap; the HCA alone would wait (1+%d) x %s = %s",
		ms(s.res.PullRecovery), rcRetryCnt, ms(verbs.TimeoutDuration(rcTimeout)), ms(hwGiveUp()))
}
