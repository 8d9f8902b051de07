package shim

import (
	"context"
	"errors"
	"sync"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/internal/ownerproto"
)

// The peers' memory registrations, fetched ahead. A failover translates
// the rkey of every RDMA WRITE, READ and atomic it replays or is posted
// after it into the peer's backup rkey. The peer publishes that mapping
// when it registers the region, and its ibpathd pushes it to this node;
// but asking this node's ibpathd for it only at the failover made the
// failover wait on a round trip under its lock, at the moment ibpathd is
// busiest with the fault, and a lookup that ran out of time surfaced the
// error (the lab's nccl.on.ipdown-g2: "no backup for remote rkey", 37 s
// after the program had started). So the scan asks ibpathd (lookup_mrs,
// protocol 4) for the entries of the peers' ports of the process's QPs as
// soon as they are connected, and then, every scan, for what the node
// took since: a failover finds them in memory. A lookup on a miss stays
// for regions registered since the last scan.

// MRLister is a Publisher that lists the peers' MR entries of routes
// (ownerproto.Session.LookupMRs).
type MRLister interface {
	LookupMRs(ctx context.Context, routes []ownerproto.Route, since uint64) (ownerproto.MRPage, error)
}

// peerMRs is the cache. The scan fills it; lookups read it from any
// goroutine.
type peerMRs struct {
	mu   sync.RWMutex
	keys map[crossnic.MRRef]uint32

	// the scan's own state, under scan (held across the queries)
	scan   sync.Mutex
	gen    uint64 // the session the marks are of (Runtime.repGen)
	older  bool   // it speaks no lookup_mrs
	known  map[ownerproto.Route]bool
	groups []mrGroup // the known routes, in queries of at most MaxQueryRoutes
}

// mrGroup is the routes of one query and the mark it goes on from.
type mrGroup struct {
	routes []ownerproto.Route
	since  uint64
}

func (c *peerMRs) get(k crossnic.MRRef) (uint32, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.keys[k]
	return v, ok
}

// size is how many entries the cache holds.
func (c *peerMRs) size() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.keys)
}

func (c *peerMRs) put(ms []ownerproto.PeerMR) {
	if len(ms) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[crossnic.MRRef]uint32{}
	}
	for _, m := range ms {
		// a later entry of a key replaces the one before (the peer's
		// process that held the rkey is gone, another took it)
		c.keys[crossnic.MRRef{GID: m.Key.GID, LID: m.Key.LID, RKey: m.Key.RKey}] = m.Backup.RKey
	}
}

// routeOf is the route ibpathd keeps a port's regions under.
func routeOf(p crossnic.MRRef) ownerproto.Route {
	return ownerproto.Route{GID: p.GID, LID: p.LID}
}

// prefetchMRs brings the cache up to date with ibpathd: the entries of
// ports the process has not asked about yet, then what the node took
// since the last scan for the others. An error ends this scan's turn;
// the next scan goes on from the marks it reached.
func (r *Runtime) prefetchMRs() {
	c := &r.peerMRs
	c.scan.Lock()
	defer c.scan.Unlock()
	gen := r.repGen.Load()
	l, _ := r.publisher().(MRLister)
	if gen != c.gen || c.known == nil {
		// a new session (SetReporter): its daemon counts from its own
		// start (sessions are told apart by number, not compared: a
		// session need not be a comparable value)
		c.gen, c.older, c.known, c.groups = gen, false, map[ownerproto.Route]bool{}, nil
	}
	if l == nil || c.older {
		return
	}
	r.l2mu.Lock()
	var fresh []ownerproto.Route
	for _, s := range r.shadows {
		for _, p := range s.sh.PeerPorts() {
			if rt := routeOf(p); !c.known[rt] {
				c.known[rt] = true
				fresh = append(fresh, rt)
			}
		}
	}
	r.l2mu.Unlock()
	for len(fresh) > 0 {
		n := min(len(fresh), ownerproto.MaxQueryRoutes)
		c.groups = append(c.groups, mrGroup{routes: fresh[:n:n]})
		fresh = fresh[n:]
	}
	for i := range c.groups {
		if err := r.fetchGroup(l, &c.groups[i]); err != nil {
			if errors.Is(err, ownerproto.ErrOlderDaemon) {
				c.older = true
				r.log.Info("libibpath: ibpathd lists no peer registrations (an older version): a failover asks for each rkey", "err", err)
				return
			}
			r.log.Debug("libibpath: peers' memory registrations not fetched", "routes", len(c.groups[i].routes), "err", err)
			return
		}
	}
	c.groups = mergeGroups(c.groups)
}

// fetchGroup fetches the pages of g's routes since its mark.
func (r *Runtime) fetchGroup(l MRLister, g *mrGroup) error {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), dirTimeout)
		p, err := l.LookupMRs(ctx, g.routes, g.since)
		cancel()
		if err != nil {
			return err
		}
		r.peerMRs.put(p.MRs)
		if len(p.MRs) > 0 {
			r.log.Debug("libibpath: peers' memory registrations fetched", "entries", len(p.MRs), "routes", len(g.routes), "since", g.since, "next", p.Next)
		}
		g.since = p.Next
		if !p.More {
			return nil
		}
	}
}

// mergeGroups joins neighbouring groups while their routes fit one query:
// the joined group goes on from the earlier mark (what it lists again is
// kept again, no harm).
func mergeGroups(gs []mrGroup) []mrGroup {
	var out []mrGroup
	for _, g := range gs {
		if n := len(out); n > 0 && len(out[n-1].routes)+len(g.routes) <= ownerproto.MaxQueryRoutes {
			last := &out[n-1]
			last.routes = append(last.routes[:len(last.routes):len(last.routes)], g.routes...)
			last.since = min(last.since, g.since)
			continue
		}
		out = append(out, g)
	}
	return out
}

var _ MRLister = (*ownerproto.Session)(nil)
