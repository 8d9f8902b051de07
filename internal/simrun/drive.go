package simrun

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// Now is the virtual time.
func (w *World) Now() time.Duration { return w.Fabric.Now() }

// RunUntil runs the world to virtual time t: the fabric, the runtimes'
// background work at every instant they asked for, and the
// applications' loop every Step.
func (w *World) RunUntil(t time.Duration) error {
	for w.nextApp < w.Fabric.Now() {
		w.nextApp += w.cfg.Step // the fabric ran without the world: the steps it missed are gone
	}
	for {
		next := w.nextApp
		for _, p := range w.Procs {
			if p.hasDue && p.due < next {
				next = p.due
			}
		}
		if next > t {
			break
		}
		next = max(next, w.Fabric.Now())
		w.Fabric.RunUntil(next)
		if next == w.nextApp {
			if err := w.appStep(); err != nil {
				return err
			}
			w.nextApp += w.cfg.Step
			continue
		}
		for _, p := range w.Procs {
			if p.hasDue && p.due <= next {
				p.step()
				if p.hasDue && p.due <= next {
					// work left at this instant after stepRounds
					// passes: the next microsecond takes it up
					p.due = next + time.Microsecond
				}
			}
		}
	}
	w.Fabric.RunUntil(t)
	for _, p := range w.Procs {
		p.step()
	}
	return nil
}

// appStep is one pass of every application's loop: the async events
// each application reads, the runtimes' due work (the events of their
// own contexts among it), the applications' completions and posts. What
// the applications' calls make due in a runtime it does in them, or asks
// for a time (the next step reads it).
func (w *World) appStep() error {
	now := w.Fabric.Now()
	for _, p := range w.Procs {
		if !p.running(now) {
			continue
		}
		if err := p.readEvents(); err != nil {
			return err
		}
	}
	for _, p := range w.Procs {
		p.step()
	}
	for _, q := range w.QPs {
		if q.Proc.running(now) {
			q.poll()
		}
	}
	for _, q := range w.QPs {
		if q.Proc.running(now) {
			q.post()
		}
	}
	return nil
}

// Ready runs the world until both layers protect every QP (on RoCE,
// layer 2 alone: there is no APM), or fails after limit of virtual time.
func (w *World) Ready(limit time.Duration) error {
	end := w.Now() + limit
	for {
		missing := ""
		for _, q := range w.QPs {
			if s := q.Status(); !protected(s, w.roce()) {
				missing = fmt.Sprintf("%s QP %#x: layer %s, layer 1 %s, layer 2 %q (%s)", q.Name(), q.QPN(), s.Layer, s.APM, s.CrossNIC, s.Reason)
				break
			}
		}
		if missing == "" {
			return nil
		}
		if w.Now() >= end {
			return fmt.Errorf("simrun: not every QP protected after %v: %s", limit, missing)
		}
		if err := w.RunUntil(w.Now() + w.cfg.Step); err != nil {
			return err
		}
	}
}

// protected: layer 2 armed (its backup connected) and, on InfiniBand,
// layer 1 armed.
func protected(s status.QP, roce bool) bool {
	return s.CrossNIC == fsm.SQDefault.String() && (roce || s.APM == fsm.APMArmed.String())
}

func (w *World) roce() bool { return w.cfg.LinkLayer == verbs.LinkLayerEthernet }

// Quiesce stops the applications' sends and runs the world until every
// QP settled (every SEND posted completed, every message sent arrived,
// or an error reached the application), at most limit longer. It
// reports whether they all settled.
func (w *World) Quiesce(limit time.Duration) (bool, error) {
	w.posting = false
	end := w.Now() + limit
	for w.Now() < end {
		if w.settled() {
			return true, nil
		}
		if err := w.RunUntil(w.Now() + w.cfg.Step); err != nil {
			return false, err
		}
	}
	return w.settled(), nil
}

func (w *World) settled() bool {
	for _, q := range w.QPs {
		if !q.settled() {
			return false
		}
	}
	return true
}

// Status is the QP's status in its runtime (what it reports to ibpathd).
func (q *QP) Status() status.QP {
	for _, s := range q.Proc.RT.QPs() {
		if s.QPN == q.qp.QPN() && s.Device == q.Proc.Device {
			return s
		}
	}
	return status.QP{}
}
