package shim

import (
	"time"

	"github.com/ibpath/ibpath/fsm"
)

// After a migration ibpath made (a PORT_ERR on the primary port, an
// operator's migrate, a failback), a QP stays MIGRATED until its peer has
// followed: re-arming earlier would clear MigReq while the peer still
// sits on the old path (docs/APM.md). The manager re-arms after
// apm.Config.PeerWait, 1.5 local ACK timeouts: from 100 ms to seconds,
// during which a second fault finds no armed alternate. The data path
// knows sooner: a successful completion of a WR posted after the
// migration was answered by the peer on the new path. Layer 1 reads the
// shadow rings' send positions (Layer1Options.Progress) while a QP
// waits: it marks how many sends were posted when it first saw the QP
// waiting, and once more than that many have been retired it tells the
// manager (PeerFollowed), which re-arms at once.

// followPoll is how often layer 1 looks at the rings of a QP that waits
// for its peer.
const followPoll = time.Millisecond

// l1Follow is a waiting QP's mark.
type l1Follow struct {
	marked bool
	posted uint64 // sends posted when the mark was taken
	migs   int    // the QP's migration count then: one wait, one mark
}

// followWatch is one waiting QP, copied out of layer 1's lock.
type followWatch struct {
	k    l1Key
	q    *l1QP
	f    l1Follow
	migs int
}

// followPeers reads the progress of every QP waiting for its peer, marks
// those seen waiting for the first time and tells the manager of those
// whose peer followed. It reports whether any QP is still watched (the
// tick then comes back within followPoll). Progress is called without
// l.mu: it takes the runtime's locks.
func (l *Layer1) followPeers() bool {
	if l.hooks.Progress == nil {
		return false
	}
	var ws []followWatch
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	for k := range l.await { // kept by collect: most ticks find none
		q := l.qps[k]
		if q == nil {
			continue
		}
		if st, ok := l.mgr.QPStatus(q.qp); ok && st.State == fsm.APMAwaitPeer {
			ws = append(ws, followWatch{k: k, q: q, f: q.follow, migs: st.Migrations})
		}
	}
	l.mu.Unlock()
	if len(ws) == 0 {
		return false
	}
	type result struct {
		followWatch
		posted   uint64
		followed bool
	}
	var rs []result
	for _, w := range ws {
		posted, retired, ok := l.hooks.Progress(w.q.ctx, w.q.qp)
		if !ok {
			continue
		}
		rs = append(rs, result{followWatch: w, posted: posted, followed: w.f.marked && w.f.migs == w.migs && retired > w.f.posted})
	}
	watching := false
	l.mu.Lock()
	for _, r := range rs {
		if l.closed || l.qps[r.k] != r.q {
			continue // forgotten or let go meanwhile
		}
		st, ok := l.mgr.QPStatus(r.q.qp)
		if !ok || st.State != fsm.APMAwaitPeer || st.Migrations != r.migs {
			continue // moved on meanwhile: the next tick looks again
		}
		switch {
		case r.followed:
			l.log.Debug("libibpath: layer 1 saw the peer follow the migration", "device", r.k.dev, "qpn", r.k.qpn,
				"primary", st.Primary.String(), "sends_before", r.f.posted)
			r.q.follow = l1Follow{}
			l.mgr.PeerFollowed(r.q.qp)
		case !r.q.follow.marked || r.q.follow.migs != r.migs:
			r.q.follow = l1Follow{marked: true, posted: r.posted, migs: r.migs}
			watching = true
		default:
			watching = true
		}
	}
	l.collect()
	l.mu.Unlock()
	l.deliver()
	return watching
}
