package shim

import "time"

// wallClock is layer 1's clock in a live process: monotonic time since
// the layer started. apm reads time only through a verbs.Clock (tests give
// it the simulated fabric's).
type wallClock struct{ start time.Time }

func newWallClock() wallClock { return wallClock{start: time.Now()} }

func (c wallClock) Now() time.Duration { return time.Since(c.start) }
