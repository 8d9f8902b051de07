package shim

import (
	"time"

	"github.com/ibpath/ibpath/fsm"
)

// A QP re-armed after a migration, or armed at its connect, stays in
// REARM until the first packet from its peer on the primary path
// (docs/SIMULATOR.md rule 86), and Linux verbs has no ARMED event: the
// manager queries it every apm.Config.PollMax (10 ms) to see ARMED. An
// idle QP would be queried that way for as long as it stays idle, 100
// ibv_query_qp a second each (a firmware command on mlx5). With a
// Progress hook layer 1 sets apm.Config.RearmIdle (DefaultRearmIdle): a
// QP idle that long in REARM is polled ever more rarely, up to
// MigrationPollMax, and layer 1 reads its shadow rings' send positions
// every rearmWatchEvery instead, which costs no device command. When
// they moved, packets flow and the QP is about to arm: layer 1 tells the
// manager (apm.Manager.Traffic), whose poll comes back to PollMax.

// DefaultRearmIdle is apm.Config.RearmIdle when Layer1Options.Progress is
// set and the configuration leaves it zero.
const DefaultRearmIdle = time.Second

// rearmWatchEvery is how often layer 1 reads the progress of QPs idle in
// REARM: the most by which ARMED is seen later than with the fixed poll,
// once traffic resumes.
const rearmWatchEvery = 100 * time.Millisecond

// l1Rearm is the send positions of an idle QP in REARM at the last look.
type l1Rearm struct {
	seen            bool
	posted, retired uint64
}

// rearmWatch is one idle QP, copied out of layer 1's lock.
type rearmWatch struct {
	k l1Key
	q *l1QP
}

// watchRearm reads the progress of every QP idle in REARM, when due, and
// tells the manager of those whose sends moved since the last look. It
// reports whether any QP is watched (the tick then comes back within
// rearmWatchEvery). Progress is called without l.mu.
func (l *Layer1) watchRearm() bool {
	if l.hooks.Progress == nil {
		return false
	}
	now := l.hooks.Clock.Now()
	var ws []rearmWatch
	l.mu.Lock()
	if l.closed || len(l.idle) == 0 {
		l.mu.Unlock()
		return false
	}
	if now < l.nextRearmWatch {
		l.mu.Unlock()
		return true
	}
	l.nextRearmWatch = now + rearmWatchEvery
	for k := range l.idle {
		if q := l.qps[k]; q != nil {
			ws = append(ws, rearmWatch{k: k, q: q})
		}
	}
	l.mu.Unlock()
	type result struct {
		rearmWatch
		posted, retired uint64
		ok              bool
	}
	rs := make([]result, 0, len(ws))
	for _, w := range ws {
		posted, retired, ok := l.hooks.Progress(w.q.ctx, w.q.qp)
		rs = append(rs, result{rearmWatch: w, posted: posted, retired: retired, ok: ok})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		if l.closed || l.qps[r.k] != r.q || !l.idle[r.k] {
			continue // forgotten, let go or busy meanwhile
		}
		last := r.q.rearm
		switch {
		case !r.ok:
			// the data path does not follow it: keep it polled as
			// without RearmIdle
			l.mgr.Traffic(r.q.qp)
		case last.seen && (r.posted != last.posted || r.retired != last.retired):
			l.rearmTraffic++
			l.mgr.Traffic(r.q.qp)
		}
		r.q.rearm = l1Rearm{seen: true, posted: r.posted, retired: r.retired}
	}
	return true
}

// collectIdle keeps l.idle: the QPs in REARM that the manager polls as
// idle. l.mu held.
func (l *Layer1) collectIdle(k l1Key, q *l1QP, state fsm.APMState) {
	if state == fsm.APMRearming && l.mgr.IdleInRearm(q.qp) {
		l.idle[k] = true
	} else if l.idle[k] {
		delete(l.idle, k)
		q.rearm = l1Rearm{}
	}
}
