package shimtest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
)

// Cluster is what the ibpathds of the nodes do for layer 2, in memory:
// every publication is readable by every node at once (push and
// replication included), and every event a process sent is kept.
type Cluster struct {
	mu     sync.Mutex
	qps    map[store.QPKey]store.QPBackup
	mrs    map[store.MRKey]store.MRBackup
	push   []ownerproto.Route                 // the push target of every QP publication
	mrPush map[store.MRKey][]ownerproto.Route // the push targets of each MR's publications
	events []status.Event                     // every event the processes sent
	// mrSeq numbers the MR entries in the order they were taken, as an
	// ibpathd's memory does (lookup_mrs)
	mrSeq map[store.MRKey]uint64
	seq   uint64
	// mrLists counts the lookup_mrs answered
	mrLists int
}

// NewCluster returns a cluster that holds nothing yet.
func NewCluster() *Cluster {
	return &Cluster{qps: map[store.QPKey]store.QPBackup{}, mrs: map[store.MRKey]store.MRBackup{},
		mrPush: map[store.MRKey][]ownerproto.Route{}, mrSeq: map[store.MRKey]uint64{}}
}

// ClusterState is a copy of what a Cluster holds.
type ClusterState struct {
	QPs    map[store.QPKey]store.QPBackup
	MRs    map[store.MRKey]store.MRBackup
	Push   []ownerproto.Route                 // the push target of every QP publication, in order
	MRPush map[store.MRKey][]ownerproto.Route // the push targets of each MR's publications
	Events []status.Event                     // every event the processes sent, in order
}

// State returns a copy of what c holds.
func (c *Cluster) State() ClusterState {
	c.mu.Lock()
	defer c.mu.Unlock()
	mrPush := map[store.MRKey][]ownerproto.Route{}
	for k, v := range c.mrPush {
		mrPush[k] = append([]ownerproto.Route(nil), v...)
	}
	return ClusterState{QPs: maps.Clone(c.qps), MRs: maps.Clone(c.mrs), Push: append([]ownerproto.Route(nil), c.push...),
		MRPush: mrPush, Events: append([]status.Event(nil), c.events...)}
}

// Forget drops every mapping published so far (a store emptied).
func (c *Cluster) Forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.qps, c.mrs, c.mrSeq = map[store.QPKey]store.QPBackup{}, map[store.MRKey]store.MRBackup{}, map[store.MRKey]uint64{}
}

// MRLists is how many lookup_mrs the cluster answered.
func (c *Cluster) MRLists() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mrLists
}

// Reports records what a process reported of its QPs (shim.Reporter);
// it drops events.
type Reports struct {
	mu   sync.Mutex
	qps  []status.QP
	gone []uint32
}

// ReportQP implements shim.Reporter.
func (r *Reports) ReportQP(q status.QP) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.qps = append(r.qps, q)
	return nil
}

// QPGone implements shim.Reporter.
func (r *Reports) QPGone(_ string, qpn uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone = append(r.gone, qpn)
	return nil
}

// Event implements shim.Reporter.
func (r *Reports) Event(status.Event) error { return nil }

// Reported returns every status reported, in order.
func (r *Reports) Reported() []status.QP {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]status.QP(nil), r.qps...)
}

// Gone returns the QPNs reported gone, in order.
func (r *Reports) Gone() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint32(nil), r.gone...)
}

// Node is one process's session with its node's ibpathd, over a
// Cluster: the shim's Reporter (reports kept in its Reports, events in
// the cluster) and Publisher.
type Node struct {
	Reports
	c *Cluster
	// PageMRs bounds the entries of a lookup_mrs answer
	// (ownerproto.MaxPageMRs when 0)
	PageMRs int
}

// NewNode returns a session of a process with the cluster c.
func NewNode(c *Cluster) *Node { return &Node{c: c} }

// Event implements shim.Reporter: the cluster keeps it.
func (n *Node) Event(e status.Event) error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.c.events = append(n.c.events, e)
	return nil
}

// PublishQP implements shim.Publisher.
func (n *Node) PublishQP(_ context.Context, p ownerproto.PublishQP) error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.c.qps[p.Key] = p.Backup
	n.c.push = append(n.c.push, p.Remote)
	return nil
}

// PublishMR implements shim.Publisher.
func (n *Node) PublishMR(_ context.Context, p ownerproto.PublishMR) error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if old, ok := n.c.mrs[p.Key]; !ok || old != p.Backup {
		n.c.seq++
		n.c.mrSeq[p.Key] = n.c.seq
	}
	n.c.mrs[p.Key] = p.Backup
	n.c.mrPush[p.Key] = append(n.c.mrPush[p.Key], p.Remotes...)
	return nil
}

// LookupQP implements shim.Publisher.
func (n *Node) LookupQP(_ context.Context, k store.QPKey) (store.QPBackup, error) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	v, ok := n.c.qps[k]
	if !ok {
		return v, ownerproto.ErrNotFound
	}
	return v, nil
}

// LookupMR implements shim.Publisher.
func (n *Node) LookupMR(_ context.Context, k store.MRKey) (store.MRBackup, error) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	v, ok := n.c.mrs[k]
	if !ok {
		return v, ownerproto.ErrNotFound
	}
	return v, nil
}

// LookupMRs implements shim.MRLister as ibpathd's lookup_mrs does: the
// entries of routes taken after since, oldest first, PageMRs of them at
// most (ownerproto.MaxPageMRs when 0).
func (n *Node) LookupMRs(_ context.Context, routes []ownerproto.Route, since uint64) (ownerproto.MRPage, error) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.c.mrLists++
	want := map[ownerproto.Route]bool{}
	for _, r := range routes {
		want[r] = true
	}
	if since > n.c.seq {
		since = 0
	}
	var keys []store.MRKey
	for k := range n.c.mrs {
		if n.c.mrSeq[k] > since && want[ownerproto.Route{GID: k.GID, LID: k.LID}] {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b store.MRKey) int { return cmp.Compare(n.c.mrSeq[a], n.c.mrSeq[b]) })
	page := ownerproto.MRPage{Next: n.c.seq}
	limit := n.PageMRs
	if limit <= 0 {
		limit = ownerproto.MaxPageMRs
	}
	if len(keys) > limit {
		keys, page.More = keys[:limit], true
		page.Next = n.c.mrSeq[keys[limit-1]]
	}
	for _, k := range keys {
		page.MRs = append(page.MRs, ownerproto.PeerMR{Key: k, Backup: n.c.mrs[k]})
	}
	return page, nil
}

// Adapters stands in for ibpathd's lookup_hca (layer 1's HCALookup): it
// describes any adapter added to it, with its ports' current states.
type Adapters struct {
	cat   pathsel.Catalog
	mu    sync.Mutex
	calls int
}

// Add adds an adapter, described afresh at every lookup.
func (d *Adapters) Add(describe func() (pathsel.HCA, error)) { d.cat.Add(describe) }

// AddProvider adds every adapter of p, each described through a context
// of its own (an adapter that dies can no longer be described).
func (d *Adapters) AddProvider(p verbs.Provider) error {
	devs, err := p.Devices()
	if err != nil {
		return fmt.Errorf("list the adapters: %w", err)
	}
	for _, dev := range devs {
		obs, err := p.Open(dev.Name)
		if err != nil {
			return fmt.Errorf("ibv_open_device %s (to describe it): %w", dev.Name, err)
		}
		d.cat.Add(func() (pathsel.HCA, error) { return pathsel.Describe(obs) })
	}
	return nil
}

// LookupHCA implements shim.HCALookup.
func (d *Adapters) LookupHCA(_ context.Context, r ownerproto.Route) (pathsel.HCA, error) {
	d.mu.Lock()
	d.calls++
	d.mu.Unlock()
	ah := verbs.AHAttr{DLID: r.LID}
	if !r.GID.IsZero() {
		ah = verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: r.GID}}
	}
	h, err := d.cat.Peer(ah)
	if err != nil {
		return pathsel.HCA{}, fmt.Errorf("%w: %v", ownerproto.ErrNotFound, err)
	}
	return h, nil
}

// Calls counts the lookups.
func (d *Adapters) Calls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}
