package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// HCA describes an adapter as path choice on another node needs it: its
// ports with their current states, LIDs, LMC, link layer and GIDs (the
// GID table indexed like the device's). It carries the fields of
// pathsel.HCA, which this package does not import (store imports verbs
// only); the daemon converts.
type HCA struct {
	Name  string
	GUID  uint64
	APM   bool // IBV_DEVICE_AUTO_PATH_MIG
	Ports []HCAPort
}

// HCAPort is one port of an HCA.
type HCAPort struct {
	Num       uint8
	State     verbs.PortState
	LinkLayer verbs.LinkLayer
	LID       uint16
	LMC       uint8
	GIDs      []verbs.GID
}

// Describer describes the local adapter that holds route: what this
// node answers to a peer's describe request (and to DescribeHCA for a
// local route). An error means no local adapter holds the route, or it
// cannot be read; its text reaches the asker.
type Describer func(route Route) (HCA, error)

// ErrNoHCA: the node that holds a route has no adapter description for
// it (the route left, the device cannot be read, or the node does not
// describe its adapters).
var ErrNoHCA = errors.New("replica: no adapter description")

// DefaultDescribeTTL is how long a peer's description is reused. Port
// states change: an answer older than this is asked again.
const DefaultDescribeTTL = time.Second

// describeCacheMax bounds the cached answers (expired ones are dropped
// first when it is reached).
const describeCacheMax = 4096

type describedHCA struct {
	hca HCA
	at  time.Time
}

// DescribeHCA returns the description of the adapter that owns route
// (a GID, else a LID) on whichever node holds it, with its ports'
// current states: answered by Config.Describe when the route is this
// node's, else asked of the live member whose metadata holds the route
// over the authenticated data channel, and cached for DescribeTTL.
// Errors: ErrNoRoute when no live member holds the route, ErrNoHCA when
// its node has no description for it, or the context's error when the
// peer does not answer in time (PushTimeout when ctx has no deadline).
func (r *Replicator) DescribeHCA(ctx context.Context, route Route) (HCA, error) {
	if r.closed.Load() {
		return HCA{}, ErrClosed
	}
	name, ok := r.dir.resolve(route)
	if !ok {
		return HCA{}, fmt.Errorf("replica: describe the adapter of %v: %w", route, ErrNoRoute)
	}
	if name == r.cfg.Name {
		return r.describeLocal(route)
	}
	if h, ok := r.cachedHCA(route); ok {
		r.stats.describesCached.Add(1)
		return h, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.PushTimeout)
		defer cancel()
	}
	id := r.pullSeq.Add(1)
	ch := make(chan message, 1)
	r.descMu.Lock()
	r.descs[id] = ch
	r.descMu.Unlock()
	defer func() {
		r.descMu.Lock()
		delete(r.descs, id)
		r.descMu.Unlock()
	}()
	r.stats.describes.Add(1)
	if err := r.send(name, message{Type: msgDescribe, ID: id, Route: route}); err != nil {
		return HCA{}, fmt.Errorf("replica: describe the adapter of %v: ask %s: %w", route, name, err)
	}
	select {
	case m := <-ch:
		if m.HCA == nil {
			return HCA{}, fmt.Errorf("replica: describe the adapter of %v: %s answered: %w: %s", route, name, ErrNoHCA, m.Reason)
		}
		r.cacheHCA(route, *m.HCA)
		return *m.HCA, nil
	case <-ctx.Done():
		return HCA{}, fmt.Errorf("replica: describe the adapter of %v: waiting for %s: %w", route, name, ctx.Err())
	case <-r.stop:
		return HCA{}, ErrClosed
	}
}

func (r *Replicator) describeLocal(route Route) (HCA, error) {
	if r.cfg.Describe == nil {
		return HCA{}, fmt.Errorf("%w: node %s does not describe its adapters", ErrNoHCA, r.cfg.Name)
	}
	h, err := r.cfg.Describe(route)
	if err != nil {
		return HCA{}, fmt.Errorf("%w: %w", ErrNoHCA, err)
	}
	return h, nil
}

func (r *Replicator) cachedHCA(route Route) (HCA, bool) {
	r.descMu.Lock()
	defer r.descMu.Unlock()
	c, ok := r.descCache[route]
	if !ok || time.Since(c.at) >= r.cfg.DescribeTTL {
		return HCA{}, false
	}
	return c.hca, true
}

func (r *Replicator) cacheHCA(route Route, h HCA) {
	now := time.Now()
	r.descMu.Lock()
	defer r.descMu.Unlock()
	if len(r.descCache) >= describeCacheMax {
		for k, c := range r.descCache {
			if now.Sub(c.at) >= r.cfg.DescribeTTL {
				delete(r.descCache, k)
			}
		}
		if len(r.descCache) >= describeCacheMax {
			clear(r.descCache)
		}
	}
	r.descCache[route] = describedHCA{hca: h, at: now}
}

// onDescribe answers a peer's describe request from Config.Describe.
func (r *Replicator) onDescribe(m message) {
	r.stats.describesAnswered.Add(1)
	ans := message{Type: msgDescribed, ID: m.ID}
	if h, err := r.describeLocal(m.Route); err != nil {
		ans.Reason = err.Error()
		if len(ans.Reason) > 255 {
			ans.Reason = ans.Reason[:255]
		}
	} else {
		ans.HCA = &h
	}
	if err := r.send(m.From, ans); err != nil {
		r.log.Warn("replica: describe answer failed", "peer", m.From, "err", err)
	}
}

// onDescribed hands an answer to the request waiting for it.
func (r *Replicator) onDescribed(m message) {
	r.descMu.Lock()
	ch := r.descs[m.ID]
	r.descMu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}

func (rt Route) String() string {
	switch {
	case rt.GID != (verbs.GID{}) && rt.LID != 0:
		return fmt.Sprintf("GID %v (LID %d)", rt.GID, rt.LID)
	case rt.GID != (verbs.GID{}):
		return fmt.Sprintf("GID %v", rt.GID)
	}
	return fmt.Sprintf("LID %d", rt.LID)
}
