// Package ratelimit owns the limit on log lines that an outsider can
// provoke (a refused peer, a refused local process): at most Max a
// second, and the line that passes after a pause says how many were held
// back.
package ratelimit

import (
	"sync"
	"time"
)

// Lines lets through at most Max events a second. The zero value lets
// nothing through; set Max.
type Lines struct {
	Max int

	mu     sync.Mutex
	second time.Time
	n      int
	held   int
}

// Allow reports whether the event at now passes, and how many were held
// back since the last one that did.
func (l *Lines) Allow(now time.Time) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.second) >= time.Second {
		l.second, l.n = now, 0
	}
	if l.n >= l.Max {
		l.held++
		return 0, false
	}
	l.n++
	held, l.held = l.held, 0
	return held, true
}
