package store

import (
	"sync"
	"time"
)

// Entry versions are hybrid logical clock values:
//
//	version = wall-clock milliseconds since the Unix epoch << 16 | counter
//
// The node that writes an entry locally (PutQP, PutMR, RemoveOwner)
// assigns its version; replication carries it unchanged. The clock never
// goes backwards: a new version is the larger of the current wall time
// (counter 0) and the last version issued or seen plus one, so versions
// stay ordered through a wall-clock step back, and after receiving a
// version from a peer whose clock runs ahead. More than 65,536 writes in
// one millisecond carry into the millisecond field (the clock runs
// slightly ahead; order is kept). VersionTime recovers the wall time.
type hlc struct {
	mu   sync.Mutex
	last uint64
}

// next returns a version greater than every version issued or observed.
func (c *hlc) next() uint64 {
	wall := uint64(time.Now().UnixMilli()) << 16
	c.mu.Lock()
	defer c.mu.Unlock()
	if wall > c.last {
		c.last = wall
	} else {
		c.last++
	}
	return c.last
}

// observe moves the clock past a version written elsewhere.
func (c *hlc) observe(v uint64) {
	c.mu.Lock()
	if v > c.last {
		c.last = v
	}
	c.mu.Unlock()
}

// VersionTime is the wall-clock time at which a version was issued, to
// the millisecond.
func VersionTime(version uint64) time.Time {
	return time.UnixMilli(int64(version >> 16))
}
