package replica

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/internal/ratelimit"
	"github.com/ibpath/ibpath/store"
)

// ErrNoRoute: no live member's metadata holds the route an entry was
// published for. The entry is stored locally all the same; anti-entropy
// delivers it once the peer is known.
var ErrNoRoute = errors.New("replica: no live member holds the route")

// ErrClosed: the replicator was closed.
var ErrClosed = errors.New("replica: closed")

const (
	workers      = 4
	inboxSize    = 1024
	maxPerMsg    = 4096 // records, refs or stamps per message
	leaveTimeout = time.Second
)

// Replicator replicates a store with its peers. Its methods are safe for
// concurrent use.
type Replicator struct {
	st     *store.Store
	cfg    Config
	log    *slog.Logger
	ml     *memberlist.Memberlist
	dir    *directory
	stats  counters
	replay *replayGuard

	metaMu sync.Mutex
	meta   []byte

	pullMu  sync.Mutex
	pulls   map[uint64]chan []store.Record
	pullSeq atomic.Uint64 // ids of pulls and describe requests

	descMu    sync.Mutex
	descs     map[uint64]chan message // describe requests waiting for their answer
	descCache map[Route]describedHCA

	peersMu    sync.Mutex
	remembered []string // the peers file's addresses (Config.PeersFile)
	peersErr   bool     // the last write of the peers file failed (logged once)

	inbox  chan []byte
	stop   chan struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
}

// Start joins (or founds) the cluster and starts replicating st. It
// returns once memberlist listens; joining the seeds is attempted once
// here and retried in the background while the node is alone.
func Start(st *store.Store, cfg Config) (*Replicator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	meta, err := encodeMeta(nodeMeta(cfg.Meta))
	if err != nil {
		return nil, err
	}
	r := &Replicator{
		st: st, cfg: cfg, log: cfg.Logger.With("node", cfg.Name), meta: meta,
		pulls: map[uint64]chan []store.Record{},
		descs: map[uint64]chan message{}, descCache: map[Route]describedHCA{},
		inbox:  make(chan []byte, inboxSize),
		stop:   make(chan struct{}),
		replay: newReplayGuard(cfg.ReplayWindow),
	}
	r.dir = newDirectory(cfg.Name, func(name string, err error) {
		r.log.Warn("replica: undecodable member metadata", "member", name, "err", err)
	})

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.SecretKey = cfg.Key
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.Label = Label
	mc.TCPTimeout = cfg.PushTimeout
	mc.Delegate = (*delegate)(r)
	mc.Events = r.dir
	bridge := &logBridge{log: r.log, refused: r.stats.refusedBy, lines: ratelimit.Lines{Max: refusalLines}}
	mc.Logger = log.New(bridge, "", 0)
	if cfg.tune != nil {
		cfg.tune(mc)
	}
	if cfg.wrap != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("replica: memberlist.NewNetTransport: %w", err)
		}
		mc.BindPort = nt.GetAutoBindPort()
		mc.AdvertisePort = mc.BindPort
		mc.Transport = cfg.wrap(nt)
	}
	r.ml, err = memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("replica: memberlist.Create: %w", err)
	}
	// read before the goroutines start: anti-entropy rounds read and
	// rewrite r.remembered (under peersMu)
	var remembered []string
	if cfg.PeersFile != "" {
		// a file that cannot be read costs the fast rejoin, not the start
		if remembered, err = loadPeers(cfg.PeersFile); err != nil {
			r.log.Warn("replica: remembered peers not read; joining the seeds only", "err", err)
		} else if len(remembered) > 0 {
			r.log.Info("replica: joining the peers alive before the restart too", "peers", remembered)
		}
		r.remembered = remembered
	}
	for range workers {
		r.wg.Add(1)
		go r.worker()
	}
	r.wg.Add(1)
	go r.antiEntropyLoop()
	if seeds := append(slices.Clone(cfg.Seeds), remembered...); len(seeds) > 0 {
		if _, err := r.ml.Join(seeds); err != nil {
			r.log.Warn("replica: join failed; retrying in the background", "seeds", seeds, "err", err)
		}
	}
	if cfg.Insecure && len(cfg.Key) == 0 {
		r.log.Warn("replica: running without a cluster key: peers are not authenticated and traffic is in clear")
	}
	return r, nil
}

// Addr is the host:port this node advertises to its peers.
func (r *Replicator) Addr() string {
	n := r.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Name is this node's name in the cluster.
func (r *Replicator) Name() string { return r.cfg.Name }

// Close leaves the cluster gracefully (peers see the node as left, not
// dead) and stops replication. It does not close the store.
func (r *Replicator) Close() error {
	if r.closed.Swap(true) {
		return ErrClosed
	}
	err := r.ml.Leave(leaveTimeout)
	close(r.stop)
	if serr := r.ml.Shutdown(); serr != nil && err == nil {
		err = serr
	}
	r.wg.Wait()
	if err != nil {
		return fmt.Errorf("replica: leave: %w", err)
	}
	return nil
}

// SetMeta replaces this node's GIDs and LIDs and announces them.
func (r *Replicator) SetMeta(m Meta) error {
	b, err := encodeMeta(nodeMeta(m))
	if err != nil {
		return err
	}
	r.metaMu.Lock()
	r.meta = b
	r.metaMu.Unlock()
	if err := r.ml.UpdateNode(r.cfg.PushTimeout); err != nil {
		return fmt.Errorf("replica: memberlist.UpdateNode: %w", err)
	}
	return nil
}

// Stats returns the counters and lag percentiles.
func (r *Replicator) Stats() Stats { return r.stats.snapshot() }

// Resolve returns the live member whose metadata holds route.
func (r *Replicator) Resolve(route Route) (Member, bool) {
	name, ok := r.dir.resolve(route)
	if !ok {
		return Member{}, false
	}
	for _, m := range r.Members() {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

// Members lists every member this node has heard of, itself included,
// ordered by name, with how many entries of each this store holds.
func (r *Replicator) Members() []Member {
	live := map[string]State{}
	for _, n := range r.ml.Members() {
		live[n.Name] = State(n.State)
	}
	counts := map[string]int{}
	for _, e := range r.st.QPEntries() {
		counts[e.Owner.Node]++
	}
	for _, e := range r.st.MREntries() {
		counts[e.Owner.Node]++
	}
	r.dir.mu.RLock()
	out := make([]Member, 0, len(r.dir.members))
	for _, m := range r.dir.members {
		mm := r.dir.member(m)
		if s, ok := live[mm.Name]; ok {
			mm.State = s
		}
		mm.Entries = counts[mm.Name]
		out = append(out, mm)
	}
	r.dir.mu.RUnlock()
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// PublishQP stores the backup of the default QP k durably (store.PutQP
// rules: ErrConflict for another owner's different value), then pushes
// the entry to the node whose metadata holds remote: the node at the
// other end of the connected QP. A push error (ErrNoRoute, or the peer
// unreachable) is returned after the entry is stored: anti-entropy
// delivers it later, and publishing again is harmless.
func (r *Replicator) PublishQP(o store.Owner, k store.QPKey, v store.QPBackup, remote Route) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if err := r.st.PutQP(o, k, v); err != nil {
		return fmt.Errorf("replica: publish QP: %w", err)
	}
	return r.pushRef(store.QPRef(k), []Route{remote})
}

// PublishMR stores the backup of the default region k durably
// (store.PutMR rules), then pushes it to every node holding one of
// remotes (the peers of the QPs that use the region). Errors as
// PublishQP.
func (r *Replicator) PublishMR(o store.Owner, k store.MRKey, v store.MRBackup, remotes []Route) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if err := r.st.PutMR(o, k, v); err != nil {
		return fmt.Errorf("replica: publish MR: %w", err)
	}
	return r.pushRef(store.MRRef(k), remotes)
}

func (r *Replicator) pushRef(ref store.Ref, routes []Route) error {
	rec, ok := r.st.Record(ref)
	if !ok {
		return nil // removed meanwhile
	}
	written := time.Now().UnixNano()
	var targets []string
	var errs []error
	for _, rt := range routes {
		name, ok := r.dir.resolve(rt)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("push %v %+v for route %+v: %w", ref.Kind, ref, rt, ErrNoRoute))
		case name != r.cfg.Name && !slices.Contains(targets, name):
			targets = append(targets, name)
		}
	}
	for _, t := range targets {
		if err := r.send(t, message{Type: msgPush, WrittenAt: written, Records: []store.Record{rec}}); err != nil {
			errs = append(errs, fmt.Errorf("push %v to %s: %w", ref.Kind, t, err))
			continue
		}
		r.stats.pushesSent.Add(1)
	}
	if len(errs) > 0 {
		r.stats.pushFailures.Add(uint64(len(errs)))
		return fmt.Errorf("replica: %w", errors.Join(errs...))
	}
	return nil
}

// RemoveOwner removes every entry of o locally with tombstones
// (store.RemoveOwnerTombstones) and pushes the tombstones to every live
// peer; peers that miss them are repaired by anti-entropy. It returns how
// many entries were removed; push failures are logged, not returned.
func (r *Replicator) RemoveOwner(o store.Owner) (int, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	ts, err := r.st.RemoveOwnerTombstones(o)
	if err != nil {
		return 0, fmt.Errorf("replica: remove owner %v: %w", o, err)
	}
	if len(ts) == 0 {
		return 0, nil
	}
	recs := make([]store.Record, len(ts))
	for i, t := range ts {
		recs[i] = t.Record()
	}
	written := time.Now().UnixNano()
	for _, n := range r.ml.Members() {
		if n.Name == r.cfg.Name {
			continue
		}
		for c := range slices.Chunk(recs, maxPerMsg) {
			if err := r.send(n.Name, message{Type: msgPush, WrittenAt: written, Records: c}); err != nil {
				r.stats.pushFailures.Add(1)
				r.log.Warn("replica: tombstone push failed; anti-entropy will repair", "peer", n.Name, "err", err)
				break
			}
			r.stats.pushesSent.Add(1)
		}
	}
	return len(ts), nil
}

// LookupQP returns the backup of the default QP k: from memory, or on a
// miss from the node whose metadata holds k's GID or LID (the node of
// that QP), storing what comes back. store.ErrNotFound when neither has
// it. The pull waits for ctx, or PushTimeout when ctx has no deadline.
func (r *Replicator) LookupQP(ctx context.Context, k store.QPKey) (store.QPBackup, store.Owner, error) {
	v, o, err := r.st.GetQP(k)
	if !errors.Is(err, store.ErrNotFound) {
		return v, o, err
	}
	if err := r.pull(ctx, store.QPRef(k), QPRoute(k)); err != nil {
		return v, o, err
	}
	return r.st.GetQP(k)
}

// LookupMR is LookupQP for a default region.
func (r *Replicator) LookupMR(ctx context.Context, k store.MRKey) (store.MRBackup, store.Owner, error) {
	v, o, err := r.st.GetMR(k)
	if !errors.Is(err, store.ErrNotFound) {
		return v, o, err
	}
	if err := r.pull(ctx, store.MRRef(k), MRRoute(k)); err != nil {
		return v, o, err
	}
	return r.st.GetMR(k)
}

// pull asks the node of route for ref and applies the answer. It returns
// nil when the answer was applied (or there was none: the caller's
// second read then reports ErrNotFound).
func (r *Replicator) pull(ctx context.Context, ref store.Ref, route Route) error {
	if r.closed.Load() {
		return ErrClosed
	}
	name, ok := r.dir.resolve(route)
	if !ok || name == r.cfg.Name {
		return store.ErrNotFound
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.PushTimeout)
		defer cancel()
	}
	r.stats.pulls.Add(1)
	id := r.pullSeq.Add(1)
	ch := make(chan []store.Record, 1)
	r.pullMu.Lock()
	r.pulls[id] = ch
	r.pullMu.Unlock()
	defer func() {
		r.pullMu.Lock()
		delete(r.pulls, id)
		r.pullMu.Unlock()
	}()
	if err := r.send(name, message{Type: msgPull, ID: id, Refs: []store.Ref{ref}}); err != nil {
		return fmt.Errorf("replica: pull %v from %s: %w", ref.Kind, name, err)
	}
	select {
	case recs := <-ch:
		if len(recs) == 0 {
			return nil
		}
		if _, err := r.apply(recs); err != nil {
			return fmt.Errorf("replica: pull %v from %s: %w", ref.Kind, name, err)
		}
		r.stats.pullHits.Add(1)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("replica: pull %v from %s: %w", ref.Kind, name, ctx.Err())
	case <-r.stop:
		return ErrClosed
	}
}

// apply stores records from a peer, dropping tombstones older than the
// TTL (this node has, or soon will have, collected them).
func (r *Replicator) apply(recs []store.Record) (int, error) {
	limit := uint64(time.Now().Add(-r.cfg.TombstoneTTL).UnixMilli()) << 16
	recs = slices.DeleteFunc(recs, func(rec store.Record) bool { return rec.Deleted && rec.Version < limit })
	return r.st.Apply(recs)
}

// send encodes m and sends it to the named member over memberlist's
// reliable (TCP, encrypted) channel.
func (r *Replicator) send(to string, m message) error {
	n, ok := r.dir.node(to)
	if !ok {
		return fmt.Errorf("unknown member %q", to)
	}
	m.From, m.To, m.SentAt, m.Seq = r.cfg.Name, to, time.Now().UnixNano(), r.replay.next()
	b, err := encode(m)
	if err != nil {
		return err
	}
	if err := r.ml.SendReliable(n, b); err != nil {
		return fmt.Errorf("memberlist.SendReliable: %w", err)
	}
	return nil
}
