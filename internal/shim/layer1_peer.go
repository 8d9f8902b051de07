package shim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
)

// HCALookup is what layer 1 needs of the ibpathd session: the adapter at
// the other end of a path, with its ports' current states.
// *ownerproto.Session implements it.
type HCALookup interface {
	LookupHCA(ctx context.Context, route ownerproto.Route) (pathsel.HCA, error)
}

// ErrNoSession: layer 1 has no ibpathd session to learn the peer's
// adapter from, so it cannot choose an alternate path.
var ErrNoSession = errors.New("no ibpathd session: the adapter at the other end of the path cannot be described (ibpathd not running or not reachable, or IBPATH_SOCKET=off)")

// Peer descriptions are reused for PeerTTL; after that, for up to
// l1PeerStale, the last answer is still used while a fresh one is asked
// for in the background, so the manager (which calls Peer under layer 1's
// lock, from its timer and its events) waits on ibpathd only for a route
// it has never described, which Modify asks for before taking the lock.
const l1PeerStale = 5 * time.Second

// l1CacheMax bounds the descriptions kept (old ones are dropped first).
const l1CacheMax = 1024

// l1Peers is layer 1's apm.PeerResolver: it asks ibpathd (lookup_hca)
// through the session and caches the answers briefly.
type l1Peers struct {
	ttl, timeout time.Duration
	now          func() time.Time
	spawn        func(func()) // runs a background refresh; nil: a goroutine

	mu     sync.Mutex
	sess   HCALookup
	cache  map[ownerproto.Route]*l1Peer
	closed bool
	wg     sync.WaitGroup // background refreshes
}

type l1Peer struct {
	hca        pathsel.HCA
	err        error
	at         time.Time
	refreshing bool
}

func newL1Peers(ttl, timeout time.Duration, now func() time.Time, spawn func(func())) *l1Peers {
	return &l1Peers{ttl: ttl, timeout: timeout, now: now, spawn: spawn, cache: map[ownerproto.Route]*l1Peer{}}
}

// routeOfAH is the route a path leads to: its DGID when global, else its
// DLID.
func routeOfAH(ah verbs.AHAttr) ownerproto.Route {
	if ah.IsGlobal {
		return ownerproto.Route{GID: ah.GRH.DGID}
	}
	return ownerproto.Route{LID: ah.DLID}
}

// setSession attaches (or with nil detaches) the session. Failed answers
// are forgotten: a new session may know better.
func (p *l1Peers) setSession(s HCALookup) {
	if ps, ok := s.(*ownerproto.Session); ok && ps == nil {
		s = nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sess = s
	if s != nil {
		for r, e := range p.cache {
			if e.err != nil {
				delete(p.cache, r)
			}
		}
	}
}

// Peer implements apm.PeerResolver.
func (p *l1Peers) Peer(ah verbs.AHAttr) (pathsel.HCA, error) {
	r := routeOfAH(ah)
	p.mu.Lock()
	e, sess := p.cache[r], p.sess
	var age time.Duration
	if e != nil {
		age = p.now().Sub(e.at)
	}
	switch {
	case e != nil && age < p.ttl:
		p.mu.Unlock()
		return e.hca, e.err
	case sess == nil:
		p.mu.Unlock()
		return pathsel.HCA{}, fmt.Errorf("layer 1: the adapter holding %s: %w", r, ErrNoSession)
	case e != nil && age < l1PeerStale:
		if !e.refreshing && !p.closed {
			e.refreshing = true
			refresh := func() { p.fetch(sess, r) }
			if p.spawn != nil {
				p.spawn(refresh)
			} else {
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					refresh()
				}()
			}
		}
		p.mu.Unlock()
		return e.hca, e.err
	}
	p.mu.Unlock()
	return p.fetch(sess, r)
}

// prefetch makes sure a description of r is fresh, asking ibpathd if
// not; Modify calls it before taking layer 1's lock.
func (p *l1Peers) prefetch(r ownerproto.Route) {
	p.mu.Lock()
	e, sess := p.cache[r], p.sess
	fresh := e != nil && p.now().Sub(e.at) < p.ttl
	p.mu.Unlock()
	if !fresh && sess != nil {
		p.fetch(sess, r)
	}
}

// fetch asks ibpathd and caches the answer, an error included (so probes
// of a QP whose peer nobody describes do not ask once each).
func (p *l1Peers) fetch(sess HCALookup, r ownerproto.Route) (pathsel.HCA, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	h, err := sess.LookupHCA(ctx, r)
	cancel()
	if err != nil {
		err = fmt.Errorf("layer 1: describe the adapter holding %s through ibpathd: %w", r, err)
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.cache) >= l1CacheMax {
		for k, e := range p.cache {
			if now.Sub(e.at) >= l1PeerStale {
				delete(p.cache, k)
			}
		}
		if len(p.cache) >= l1CacheMax {
			clear(p.cache)
		}
	}
	p.cache[r] = &l1Peer{hca: h, err: err, at: now}
	return h, err
}

// close waits for background refreshes (each bounded by the timeout).
func (p *l1Peers) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}
