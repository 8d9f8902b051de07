package replica

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Replay protection. memberlist's AES-GCM authenticates every packet and
// stream with the cluster key, but says nothing of freshness: a captured
// push, replayed to another keyed node (or to its own destination again),
// would be applied, bringing back the entry of an owner the cluster had
// since removed. So every peer message names, inside the authenticated
// payload, the member it is sent to, its send time and the sender's
// message number (counting up from a random start at each Start, so that
// a restarted node does not reuse numbers). A node takes a message only
// when it is addressed to it, was sent within ReplayWindow of its own
// clock, and its (sender, number) was not taken before; the numbers taken
// are remembered for the window, past which the time check refuses a
// replay anyway. The memory this takes is the messages received within
// one window.

type replayGuard struct {
	window time.Duration
	seq    atomic.Uint64

	mu     sync.Mutex
	seen   map[string]map[uint64]int64 // sender -> number -> send time
	pruned time.Time
}

func newReplayGuard(window time.Duration) *replayGuard {
	g := &replayGuard{window: window, seen: map[string]map[uint64]int64{}}
	var b [8]byte
	if _, err := rand.Read(b[:]); err == nil {
		g.seq.Store(binary.BigEndian.Uint64(b[:]) >> 1)
	} else {
		g.seq.Store(uint64(time.Now().UnixNano()))
	}
	return g
}

// next is the number of the next message this node sends.
func (g *replayGuard) next() uint64 { return g.seq.Add(1) }

// check decides whether this node (self) takes m, received at now.
func (g *replayGuard) check(m message, self string, now time.Time) error {
	if m.To != self {
		return fmt.Errorf("addressed to %q, not to this node", m.To)
	}
	sent := time.Unix(0, m.SentAt)
	if d := now.Sub(sent); d > g.window || d < -g.window {
		return fmt.Errorf("sent %v away from this node's clock (window %v)", d.Round(time.Millisecond), g.window)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.pruned) > g.window/4 {
		old := now.Add(-g.window).UnixNano()
		for from, nums := range g.seen {
			for n, at := range nums {
				if at < old {
					delete(nums, n)
				}
			}
			if len(nums) == 0 {
				delete(g.seen, from)
			}
		}
		g.pruned = now
	}
	nums := g.seen[m.From]
	if nums == nil {
		nums = map[uint64]int64{}
		g.seen[m.From] = nums
	}
	if _, ok := nums[m.Seq]; ok {
		return fmt.Errorf("message %d of %s taken before", m.Seq, m.From)
	}
	nums[m.Seq] = m.SentAt
	return nil
}
