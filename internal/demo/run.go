package demo

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/internal/simrun"
	"github.com/ibpath/ibpath/verbs"
)

// The shim's configuration in every process: libibpath's defaults, with
// the switch back on (the scenarios show it), and layer 1's failback
// hold and peer descriptions shortened to the scenario's scale.
var (
	shimEnv = map[string]string{shim.EnvSwitch: "on"}
	l1      = apm.Config{FailbackHold: 100 * time.Millisecond}
)

const (
	peerTTL    = 50 * time.Millisecond
	readyLimit = time.Second          // both layers protect every QP within it
	drainLimit = time.Second          // the queues drain within it, after the applications stop posting
	watchLimit = 5 * time.Millisecond // how long after a fault the timeline watches the traffic resume
)

// Report is what a run found.
type Report struct {
	// Verdict is what was checked and what held.
	Verdict simrun.Verdict
	// Faults counts the faults injected (repairs aside).
	Faults int
	// Records is everything the run saw, in order.
	Records []simrun.Record
}

// OK reports whether the verdict is PASS.
func (r Report) OK() bool { return r.Verdict.OK() }

// Run plays the scenario the options choose and prints its timeline,
// summary and verdict to out. The error says why a run could not be
// played or printed; a run that played reports its verdict in the
// Report, whatever it is.
func Run(out io.Writer, o Options) (Report, error) {
	if err := o.check(); err != nil {
		return Report{}, err
	}
	bw := bufio.NewWriter(out)
	rep, err := run(bw, o)
	if ferr := bw.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("demo: write the timeline: %w", ferr)
	}
	return rep, err
}

func run(out io.Writer, o Options) (Report, error) {
	sc := scripted(o)
	if o.Random {
		sc = random(o)
	}
	tl := newTimeline(out, o.Verbose)
	var rep Report
	w, err := simrun.New(simrun.Config{Seed: o.Seed, LinkLayer: o.LinkLayer, Env: shimEnv, APM: l1, PeerTTL: peerTTL,
		LogLevel: slog.LevelInfo, Trace: o.Verbose >= VerboseTrace, Tamper: o.Tamper, OlderIbpathd: o.OlderIbpathd,
		Observe: func(r simrun.Record) {
			rep.Records = append(rep.Records, r)
			tl.observe(r)
		}})
	if err != nil {
		return rep, fmt.Errorf("demo: %w", err)
	}
	defer w.Close()
	rep.Faults = sc.faults()
	header(tl, o, w, sc)
	if err := w.Ready(readyLimit); err != nil {
		return rep, fmt.Errorf("demo: %w", err)
	}
	tr := &traffic{t: tl, w: w}
	for _, st := range sc.steps {
		if tl.err != nil {
			return rep, fmt.Errorf("demo: write the timeline: %w", tl.err)
		}
		if err := w.RunUntil(st.at); err != nil {
			return rep, fmt.Errorf("demo: %w", err)
		}
		tl.mark(w.Now())
		if st.fault {
			tr.window()
		}
		tl.at(w.Now(), "%s", st.describe())
		for conn, why := range st.allow {
			for _, q := range w.QPs {
				if q.Conn == conn {
					w.AllowSurface(q, why)
				}
			}
		}
		if err := st.do(w); err != nil {
			return rep, fmt.Errorf("demo: %s: %w", st.describe(), err)
		}
		if st.fault {
			if err := tr.watch(st.at); err != nil {
				return rep, fmt.Errorf("demo: %w", err)
			}
		}
	}
	if err := w.RunUntil(sc.stopAt); err != nil {
		return rep, fmt.Errorf("demo: %w", err)
	}
	tl.mark(w.Now())
	tl.at(w.Now(), "the applications stop posting; the queues drain")
	settled, err := w.Quiesce(drainLimit)
	if err != nil {
		return rep, fmt.Errorf("demo: %w", err)
	}
	tl.mark(w.Now())
	tr.window()
	if !settled {
		tl.at(w.Now(), "the queues did not drain within %v", drainLimit)
	}
	rep.Verdict = w.Verdict()
	summary(tl, w, rep)
	if tl.err != nil {
		return rep, fmt.Errorf("demo: write the timeline: %w", tl.err)
	}
	return rep, nil
}

// header prints what the run is: the fabric, the processes, their
// configuration, the traffic and the scenario.
func header(tl *timeline, o Options, w *simrun.World, sc scenario) {
	cfg := w.Config()
	fabric := "2 hosts x 2 HCAs x 2 ports, LMC 1, rail-optimized leaves"
	if o.roce() {
		fabric = "2 hosts x 2 RoCE NICs x 1 port (Ethernet link layer, no LMC, no APM), rail-optimized leaves"
	}
	kind := fmt.Sprintf("seed %d", o.Seed)
	if o.Random {
		kind = fmt.Sprintf("random faults, seed %d", o.Seed)
	}
	if o.roce() {
		kind += ", RoCE"
	}
	tl.plain("ibpath simulator demo (%s): %s", kind, fabric)
	tl.plain("processes: QP A joins %s/%s and %s/%s, QP B %s/%s and %s/%s; on each host one process per QP under the shim's runtime",
		node0, o.dev(0), node1, o.dev(0), node0, o.dev(1), node1, o.dev(1))
	tl.plain("  (layers 1 and 2, stepped in virtual time; the Go stand-in of the C data path), its backup on the host's other %s,", o.adapter())
	tl.plain("  its session with ibpathd's stand-in; the shim's environment: %s=on, the rest at libibpath's defaults", shim.EnvSwitch)
	tl.plain("  layer 1 tuned to the scenario's scale: failback %v after home is armed, adapters described again after %v", l1.FailbackHold, peerTTL)
	to := verbs.TimeoutDuration(cfg.Timeout)
	tl.plain("traffic: every %v each side of each QP sends a message (a 64-byte WRITE, then a signaled SEND_WITH_IMM of the same bytes),", cfg.Step)
	tl.plain("  %d in flight at most; every completion checked; RC timeout %d (local ACK timeout %s), retry_cnt 3: the HCA alone gives a",
		cfg.Window, cfg.Timeout, ms(to))
	tl.plain("  silent path up after (1+3) x timeout = %s", ms(4*to))
	for _, l := range sc.header {
		tl.plain("%s", l)
	}
}

// traffic prints what the applications got done between two of the
// timeline's marks, and how soon traffic came back after a fault.
type traffic struct {
	t    *timeline
	w    *simrun.World
	from time.Duration
	base []int // each QP's messages received at from
}

// window prints the messages each QP side received since the last mark.
func (tr *traffic) window() {
	now := tr.w.Now()
	if tr.base == nil {
		tr.base = make([]int, len(tr.w.QPs))
	}
	line := fmt.Sprintf("traffic %.1f-%.1f ms:", float64(tr.from)/1e6, float64(now)/1e6)
	for i := 0; i < len(tr.w.QPs); i += 2 {
		a, b := tr.w.QPs[i], tr.w.QPs[i+1]
		da, db := a.Recvd-tr.base[i], b.Recvd-tr.base[i+1]
		if da == db {
			line += fmt.Sprintf("  QP %s %d messages each way", a.Conn, da)
		} else {
			line += fmt.Sprintf("  QP %s %d messages to %s, %d to %s", a.Conn, da, a.Proc.Host.Name(), db, b.Proc.Host.Name())
		}
	}
	tr.t.at(now, "%s", line)
	for i, q := range tr.w.QPs {
		tr.base[i] = q.Recvd
	}
	tr.from = now
}

// watch runs the world for a while after a fault at `at` and says, for
// each QP whose traffic it interrupted (a side got nothing done in the
// applications' first step after it), when both sides completed again.
func (tr *traffic) watch(at time.Duration) error {
	w := tr.w
	step := w.Config().Step
	done := func() []int {
		out := make([]int, len(w.QPs))
		for i, q := range w.QPs {
			out[i] = q.SendDone + q.Recvd
		}
		return out
	}
	base := done()
	back := make([]time.Duration, len(w.QPs)) // when each side completed again (0: not yet)
	var hit []bool                            // per connection: interrupted
	for t := w.Now() + step; t <= at+watchLimit; t += step {
		if err := w.RunUntil(t); err != nil {
			return err
		}
		now := done()
		for i := range now {
			if back[i] == 0 && now[i] > base[i] {
				back[i] = w.Now()
			}
		}
		if hit == nil {
			hit = make([]bool, len(w.QPs)/2)
			for c := range hit {
				hit[c] = back[2*c] == 0 || back[2*c+1] == 0
			}
		}
		all := true
		for _, b := range back {
			all = all && b != 0
		}
		if all {
			break
		}
	}
	tr.t.flush()
	type line struct {
		at   time.Duration
		text string
	}
	var lines []line
	for c, interrupted := range hit {
		qa, qb := w.QPs[2*c], w.QPs[2*c+1]
		if !interrupted || qa.Surfaced() != "" && qb.Surfaced() != "" {
			continue
		}
		a, b := back[2*c], back[2*c+1]
		if a == 0 || b == 0 {
			lines = append(lines, line{w.Now(), fmt.Sprintf("QP %s: not completing on both sides %s after the fault", qa.Conn, ms(watchLimit))})
			continue
		}
		text := fmt.Sprintf("QP %s: completing again on both sides, %s after the fault", qa.Conn, ms(max(a, b)-at))
		if qa.Surfaced() == "" && qb.Surfaced() == "" {
			text += "; no error reached the applications"
		}
		lines = append(lines, line{max(a, b), text})
	}
	slices.SortStableFunc(lines, func(x, y line) int { return cmp.Compare(x.at, y.at) })
	for _, l := range lines {
		tr.t.at(l.at, "%s", l.text)
	}
	return nil
}
