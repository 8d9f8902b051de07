package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/verbs"
)

// Defaults for the zero fields of Config.
const (
	DefaultBindPort            = 7946
	DefaultAntiEntropyInterval = 10 * time.Second
	DefaultPushTimeout         = 2 * time.Second
	DefaultTombstoneTTL        = 7 * 24 * time.Hour
	// DefaultReplayWindow is how far a peer message's send time may be
	// from the receiver's clock (replay.go).
	DefaultReplayWindow = 2 * time.Minute
	// Label is memberlist's cluster label: it goes on every packet and
	// stream (authenticated with the cluster key), and a peer of another
	// label, or of none, is refused.
	Label = "ibpath-replication/1"
)

// Config configures Start. Zero fields take the documented defaults.
type Config struct {
	// Name is this node's name in the cluster; it must be unique and
	// should equal the Node of the store.Owner values this node publishes
	// (Members counts entries by it). Default: the host name.
	Name string
	// BindAddr is the address memberlist listens on (TCP and UDP).
	// Default "0.0.0.0".
	BindAddr string
	// BindPort is the port (TCP and UDP); 0 picks a free one (read it
	// back with Replicator.Addr). DefaultBindPort is memberlist's usual.
	BindPort int
	// AdvertiseAddr is the address peers use to reach this node; default:
	// chosen by memberlist from BindAddr.
	AdvertiseAddr string
	// Key is the cluster key: 16, 24 or 32 bytes (AES-128/192/256). It
	// encrypts and authenticates all gossip and data exchange; peers
	// without it are refused. Start refuses to run without a key unless
	// Insecure is set.
	Key []byte
	// Insecure runs without a cluster key: unauthenticated and in clear.
	// Only for tests and closed labs.
	Insecure bool
	// Seeds are host:port addresses of members to join at Start; more
	// are retried every AntiEntropyInterval while this node is alone.
	Seeds []string
	// PeersFile keeps the addresses of the peers last seen alive across
	// restarts (written at anti-entropy rounds when they change; never
	// emptied by a node alone). Start joins them with the seeds, and
	// they are retried with the seeds while the node is alone: a node
	// restarted without seeds, or before its peers noticed it was gone,
	// finds its cluster at once. Empty: not kept.
	PeersFile string
	// Meta is this node's GIDs and LIDs; any of them resolves to this
	// node. At most 512 bytes encoded (ErrMetaTooLarge).
	Meta Meta
	// AntiEntropyInterval is the period of digest exchange with one
	// random live peer (and of tombstone collection and reconnection to
	// failed members). Default DefaultAntiEntropyInterval.
	AntiEntropyInterval time.Duration
	// PushTimeout bounds connecting to a peer for a push, and a pull when
	// the caller's context has no deadline. Default DefaultPushTimeout.
	PushTimeout time.Duration
	// TombstoneTTL is how long tombstones are kept. A node partitioned
	// (or down) for longer can bring removed entries back. Default
	// DefaultTombstoneTTL.
	TombstoneTTL time.Duration
	// Logger receives replication and memberlist logs; default
	// slog.Default().
	Logger *slog.Logger
	// Describe describes this node's adapter that holds a route, for
	// peers' DescribeHCA (and local routes). Nil: this node answers
	// every describe request with ErrNoHCA.
	Describe Describer
	// DescribeTTL is how long a peer's adapter description is reused
	// by DescribeHCA before it is asked again. Keep it short: port
	// states change. Default DefaultDescribeTTL (1 s).
	DescribeTTL time.Duration
	// ReplayWindow bounds the difference between a peer message's send
	// time and this node's clock; messages outside it are refused, and
	// within it each is taken once (replay.go). The nodes' clocks must
	// agree within it (NTP). Default DefaultReplayWindow.
	ReplayWindow time.Duration

	// tune adjusts memberlist's configuration (tests: faster timers).
	tune func(*memberlist.Config)
	// wrap replaces memberlist's transport by a wrapper of it (tests:
	// partitions).
	wrap func(memberlist.Transport) memberlist.Transport
}

// Meta is the part of a node's identity that routes resolve against.
type Meta struct {
	GIDs []verbs.GID
	LIDs []uint16
}

// ErrNoKey: Start was given no cluster key and Insecure is not set.
var ErrNoKey = errors.New("replica: no cluster key (set Config.Key, or Config.Insecure to run unauthenticated)")

// withDefaults validates c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	if len(c.Key) == 0 && !c.Insecure {
		return c, ErrNoKey
	}
	if len(c.Key) != 0 {
		switch len(c.Key) {
		case 16, 24, 32:
		default:
			return c, fmt.Errorf("replica: cluster key of %d bytes: want 16, 24 or 32", len(c.Key))
		}
	}
	if c.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("replica: os.Hostname: %w", err)
		}
		c.Name = h
	}
	if len(c.Name) > 255 {
		return c, fmt.Errorf("replica: node name of %d bytes (at most 255)", len(c.Name))
	}
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0"
	}
	if c.AntiEntropyInterval <= 0 {
		c.AntiEntropyInterval = DefaultAntiEntropyInterval
	}
	if c.PushTimeout <= 0 {
		c.PushTimeout = DefaultPushTimeout
	}
	if c.TombstoneTTL <= 0 {
		c.TombstoneTTL = DefaultTombstoneTTL
	}
	if c.ReplayWindow <= 0 {
		c.ReplayWindow = DefaultReplayWindow
	}
	if c.DescribeTTL <= 0 {
		c.DescribeTTL = DefaultDescribeTTL
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
