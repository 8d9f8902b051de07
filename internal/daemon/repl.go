package daemon

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/store/replica"
)

// ReplConfig configures replication to the other ibpathd of the cluster.
type ReplConfig struct {
	Bind      string   // gossip address host:port
	Advertise string   // address peers use, when Bind is a wildcard
	Join      []string // peers to join at start
	KeyFile   string   // cluster key (16, 24 or 32 bytes, raw or hex)
	// Insecure runs without a cluster key: only for a single node or a
	// test bed, and said so in the log and status.
	Insecure bool
	// Off runs without replication (a single node).
	Off bool
	// AntiEntropy is the period of digest exchanges (replica's default
	// when 0).
	AntiEntropy time.Duration
}

// replicator is what the daemon needs from replication.
type replicator interface {
	PublishQP(o store.Owner, k store.QPKey, v store.QPBackup, remote ownerproto.Route) error
	PublishMR(o store.Owner, k store.MRKey, v store.MRBackup, remotes []ownerproto.Route) error
	RemoveOwner(o store.Owner) (int, error)
	// LookupQP and LookupMR read memory, and on a miss (replicated) pull
	// from the node that holds the key's route.
	LookupQP(ctx context.Context, k store.QPKey) (store.QPBackup, error)
	LookupMR(ctx context.Context, k store.MRKey) (store.MRBackup, error)
	// DescribeHCA asks the node holding route for the description of
	// the adapter behind it (replicated; cached briefly).
	DescribeHCA(ctx context.Context, route ownerproto.Route) (pathsel.HCA, error)
	Store() *store.Store
	Peers() []status.Peer
	Repl() status.Repl
	Totals(t *status.Totals)
	Close() error
}

// localOnly is replication switched off: the local store alone.
type localOnly struct {
	st     *store.Store
	reason string
}

func (l localOnly) PublishQP(o store.Owner, k store.QPKey, v store.QPBackup, _ ownerproto.Route) error {
	return l.st.PutQP(o, k, v)
}

func (l localOnly) PublishMR(o store.Owner, k store.MRKey, v store.MRBackup, _ []ownerproto.Route) error {
	return l.st.PutMR(o, k, v)
}

func (l localOnly) RemoveOwner(o store.Owner) (int, error) { return l.st.RemoveOwner(o) }

func (l localOnly) LookupQP(_ context.Context, k store.QPKey) (store.QPBackup, error) {
	v, _, err := l.st.GetQP(k)
	return v, err
}

func (l localOnly) LookupMR(_ context.Context, k store.MRKey) (store.MRBackup, error) {
	v, _, err := l.st.GetMR(k)
	return v, err
}

func (l localOnly) DescribeHCA(_ context.Context, r ownerproto.Route) (pathsel.HCA, error) {
	return pathsel.HCA{}, fmt.Errorf("no adapter of this node holds %s, and replication is off (%s): other nodes' adapters are unknown", r, l.reason)
}
func (l localOnly) Store() *store.Store   { return l.st }
func (l localOnly) Peers() []status.Peer  { return nil }
func (l localOnly) Repl() status.Repl     { return status.Repl{Mode: status.ReplOff, Reason: l.reason} }
func (l localOnly) Totals(*status.Totals) {}
func (l localOnly) Close() error          { return l.st.Close() }

// replicated is the store with peer-to-peer replication.
type replicated struct {
	st       *store.Store
	r        *replica.Replicator
	log      *slog.Logger
	insecure bool
}

func (p replicated) Repl() status.Repl {
	m := status.ReplKeyed
	if p.insecure {
		m = status.ReplInsecure
	}
	r := status.Repl{Mode: m, Addr: p.r.Addr()}
	if p.insecure {
		r.Reason = "--insecure: peers are not authenticated"
	}
	return r
}

func route(r ownerproto.Route) replica.Route { return replica.Route{GID: r.GID, LID: r.LID} }

// pushed reports a push failure of an entry that is durable here: the
// owner's publication succeeded (anti-entropy delivers the entry later),
// so it is logged rather than returned.
func (p replicated) pushed(err error, stored bool) error {
	if err == nil || !stored {
		return err
	}
	p.log.Warn("entry stored; its push to the peer failed (anti-entropy will deliver it)", "err", err)
	return nil
}

func (p replicated) PublishQP(o store.Owner, k store.QPKey, v store.QPBackup, remote ownerproto.Route) error {
	err := p.r.PublishQP(o, k, v, route(remote))
	got, owner, gerr := p.st.GetQP(k)
	return p.pushed(err, gerr == nil && got == v && owner == o)
}

func (p replicated) PublishMR(o store.Owner, k store.MRKey, v store.MRBackup, remotes []ownerproto.Route) error {
	rs := make([]replica.Route, len(remotes))
	for i, r := range remotes {
		rs[i] = route(r)
	}
	err := p.r.PublishMR(o, k, v, rs)
	got, owner, gerr := p.st.GetMR(k)
	return p.pushed(err, gerr == nil && got == v && owner == o)
}

func (p replicated) RemoveOwner(o store.Owner) (int, error) { return p.r.RemoveOwner(o) }

func (p replicated) LookupQP(ctx context.Context, k store.QPKey) (store.QPBackup, error) {
	v, _, err := p.r.LookupQP(ctx, k)
	return v, err
}

func (p replicated) LookupMR(ctx context.Context, k store.MRKey) (store.MRBackup, error) {
	v, _, err := p.r.LookupMR(ctx, k)
	return v, err
}
func (p replicated) DescribeHCA(ctx context.Context, r ownerproto.Route) (pathsel.HCA, error) {
	h, err := p.r.DescribeHCA(ctx, route(r))
	if err != nil {
		return pathsel.HCA{}, err
	}
	return fromReplicaHCA(h), nil
}
func (p replicated) Store() *store.Store { return p.st }

func (p replicated) Peers() []status.Peer {
	var out []status.Peer
	for _, m := range p.r.Members() {
		if m.Self {
			continue
		}
		sp := status.Peer{Name: m.Name, Addr: m.Addr, State: m.State.String(), LIDs: m.LIDs, Entries: m.Entries}
		for _, g := range m.GIDs {
			sp.GIDs = append(sp.GIDs, g.String())
		}
		out = append(out, sp)
	}
	return out
}

func (p replicated) Totals(t *status.Totals) {
	s := p.r.Stats()
	t.ReplicationLagP50Seconds, t.ReplicationLagP99Seconds = s.LagP50.Seconds(), s.LagP99.Seconds()
	t.PeersRefused = s.PeersRefused
	t.RecordsRefused = s.RecordsRefused
	t.MessagesRefused = s.MessagesRefused
}

func (p replicated) Close() error {
	err := p.r.Close()
	if cerr := p.st.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadClusterKey reads a cluster key file: 16, 24 or 32 raw bytes, or
// their hex encoding (surrounding white space ignored).
func ReadClusterKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cluster key %s: mode %v lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	if t := strings.TrimSpace(string(b)); len(t) == 32 || len(t) == 48 || len(t) == 64 {
		if k, err := hex.DecodeString(t); err == nil {
			return k, nil
		}
	}
	switch len(b) {
	case 16, 24, 32:
		return b, nil
	}
	return nil, fmt.Errorf("cluster key %s: %d bytes; want 16, 24 or 32 bytes, or 32, 48 or 64 hex digits", path, len(b))
}

// startRepl opens the store (openStore: note says what was found) and
// starts replication as configured.
func startRepl(path string, cfg Config, routes []ownerproto.Route, describe replica.Describer, log *slog.Logger) (replicator, string, error) {
	st, note, err := openStore(path, storeLockWait, log)
	if err != nil {
		return nil, "", err // it names the store
	}
	r, err := startReplOn(st, path, cfg, routes, describe, log)
	return r, note, err
}

// startReplOn starts replication of the open store st as configured; st
// is closed on failure.
func startReplOn(st *store.Store, path string, cfg Config, routes []ownerproto.Route, describe replica.Describer, log *slog.Logger) (replicator, error) {
	var err error
	if cfg.Repl.Off {
		log.Info("replication off: backup attributes stay on this node")
		return localOnly{st, "--no-replication"}, nil
	}
	if cfg.Repl.KeyFile == "" && !cfg.Repl.Insecure && len(cfg.Repl.Join) == 0 {
		why := "standalone: no cluster key and no peer to join configured"
		log.Warn("replication off: backup attributes stay on this node; set --cluster-key-file and --join to replicate", "reason", why)
		return localOnly{st, why}, nil
	}
	rc := replica.Config{Name: cfg.Node, Seeds: cfg.Repl.Join, Insecure: cfg.Repl.Insecure, Logger: log,
		AntiEntropyInterval: cfg.Repl.AntiEntropy, Describe: describe,
		// beside the store: the peers to rejoin after a restart
		PeersFile: filepath.Join(filepath.Dir(path), "peers")}
	host, port, err := net.SplitHostPort(cfg.Repl.Bind)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("gossip bind %q: %w", cfg.Repl.Bind, err)
	}
	rc.BindAddr = host
	if rc.BindPort, err = strconv.Atoi(port); err != nil || rc.BindPort < 0 || rc.BindPort > 65535 {
		st.Close()
		return nil, fmt.Errorf("gossip bind %q: bad port", cfg.Repl.Bind)
	}
	rc.AdvertiseAddr = cfg.Repl.Advertise
	if cfg.Repl.KeyFile != "" {
		if rc.Key, err = ReadClusterKey(cfg.Repl.KeyFile); err != nil {
			st.Close()
			return nil, err
		}
	} else if !cfg.Repl.Insecure {
		st.Close()
		return nil, fmt.Errorf("replication to %v needs a cluster key (--cluster-key-file); or --insecure for a test bed, or --no-replication", cfg.Repl.Join)
	}
	if cfg.Repl.Insecure {
		log.Warn("replication WITHOUT a cluster key: any host that reaches the gossip port can join and write entries")
	}
	for _, r := range routes {
		if r.GID.IsZero() {
			rc.Meta.LIDs = append(rc.Meta.LIDs, r.LID)
		} else {
			rc.Meta.GIDs = append(rc.Meta.GIDs, r.GID)
		}
	}
	r, err := replica.Start(st, rc)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("replication: %w", err)
	}
	log.Info("replication started", "addr", r.Addr(), "join", cfg.Repl.Join, "gids", len(rc.Meta.GIDs), "lids", len(rc.Meta.LIDs))
	return replicated{st: st, r: r, log: log, insecure: len(rc.Key) == 0}, nil
}
