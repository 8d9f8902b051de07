package replica

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Stats are the replicator's counters since Start.
type Stats struct {
	PushesSent     uint64 // push messages delivered to a peer's socket
	PushFailures   uint64 // pushes that found no route or could not be sent
	PushesReceived uint64 // push messages received and applied
	Pulls          uint64 // lookups that missed locally and asked a peer
	PullHits       uint64 // pulls that brought the entry back
	Repairs        uint64 // records changed here by anti-entropy
	Rounds         uint64 // anti-entropy digest exchanges started here
	PeersRefused   uint64 // distinct peer hosts whose packets or streams were refused: not authenticated with the cluster key
	RefusedTraffic uint64 // the packets and streams refused so
	BadMessages    uint64 // peer messages that did not decode, or were dropped on overload
	// RecordsRefused counts records of peers not applied: their key's
	// route is not one their owner's node advertises, or (pushes) they
	// came from another node than their owner's (handlers.go, admit).
	RecordsRefused uint64
	// MessagesRefused counts decoded peer messages refused as replays:
	// sent to another member, outside the replay window, or seen before
	// (replay.go).
	MessagesRefused uint64
	// Describes counts adapter descriptions asked of peers,
	// DescribesCached those DescribeHCA answered from its cache, and
	// DescribesAnswered the peers' requests this node answered.
	Describes, DescribesCached, DescribesAnswered uint64
	// LagP50 and LagP99 are percentiles of the replication lag of the
	// last LagSamples received pushes: from the commit at the origin to
	// the commit here (origin and receiver wall clocks: meaningful when
	// they are synchronised, exact on one host).
	LagP50, LagP99 time.Duration
	LagSamples     int
}

const lagWindow = 4096

type counters struct {
	pushesSent, pushFailures, pushesReceived atomic.Uint64
	pulls, pullHits, repairs, rounds         atomic.Uint64
	refused, refusedTraffic                  atomic.Uint64
	bad, recordsRefused, replays             atomic.Uint64
	describes, describesCached               atomic.Uint64
	describesAnswered                        atomic.Uint64

	hostsMu      sync.Mutex
	refusedHosts map[string]bool // counted in refused (at most maxRefusedHosts)

	mu   sync.Mutex
	lags []time.Duration // ring of the last lagWindow samples
	next int
}

// maxRefusedHosts bounds the hosts remembered to count refused peers
// once each; past it every refusal from a new host counts.
const maxRefusedHosts = 4096

// refusedBy counts a refused packet or stream of host, and the host
// once.
func (c *counters) refusedBy(host string) {
	c.refusedTraffic.Add(1)
	c.hostsMu.Lock()
	defer c.hostsMu.Unlock()
	if c.refusedHosts[host] {
		return
	}
	if c.refusedHosts == nil {
		c.refusedHosts = map[string]bool{}
	}
	if len(c.refusedHosts) < maxRefusedHosts {
		c.refusedHosts[host] = true
	}
	c.refused.Add(1)
}

func (c *counters) lag(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.mu.Lock()
	if len(c.lags) < lagWindow {
		c.lags = append(c.lags, d)
	} else {
		c.lags[c.next] = d
		c.next = (c.next + 1) % lagWindow
	}
	c.mu.Unlock()
}

func (c *counters) snapshot() Stats {
	s := Stats{
		PushesSent:      c.pushesSent.Load(),
		PushFailures:    c.pushFailures.Load(),
		PushesReceived:  c.pushesReceived.Load(),
		Pulls:           c.pulls.Load(),
		PullHits:        c.pullHits.Load(),
		Repairs:         c.repairs.Load(),
		Rounds:          c.rounds.Load(),
		PeersRefused:    c.refused.Load(),
		RefusedTraffic:  c.refusedTraffic.Load(),
		BadMessages:     c.bad.Load(),
		RecordsRefused:  c.recordsRefused.Load(),
		MessagesRefused: c.replays.Load(),

		Describes:         c.describes.Load(),
		DescribesCached:   c.describesCached.Load(),
		DescribesAnswered: c.describesAnswered.Load(),
	}
	c.mu.Lock()
	lags := slices.Clone(c.lags)
	c.mu.Unlock()
	if len(lags) > 0 {
		slices.Sort(lags)
		s.LagP50 = percentile(lags, 50)
		s.LagP99 = percentile(lags, 99)
		s.LagSamples = len(lags)
	}
	return s
}

// percentile of sorted, nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i, len(sorted))-1)]
}

func sortDurations(d []time.Duration) { slices.Sort(d) }
