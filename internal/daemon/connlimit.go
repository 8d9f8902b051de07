package daemon

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ratelimit"
)

// The socket's bounds on what one local user holds: every connection
// costs a file descriptor and a goroutine, and ibpathd's descriptors are
// finite (accept fails at the limit, and then root's CLI times out too).
// A non-root uid may hold Config.MaxConnsPerUser connections at once
// (owner sessions included, for as long as they last); the next is closed
// at once, logged (rate-limited) and counted. A request must arrive whole
// within requestReadTimeout (a trickled body is cut off) and an idle
// keep-alive connection is closed after idleTimeout; an owner session
// must say hello within HelloTimeout.
const (
	requestHeaderTimeout = 10 * time.Second
	requestReadTimeout   = 30 * time.Second
	idleTimeout          = 60 * time.Second
)

// timeouts are the socket's (Config.lim).
type timeouts struct {
	header, read, idle, hello time.Duration
}

func (t timeouts) withDefaults() timeouts {
	if t.header <= 0 {
		t.header = requestHeaderTimeout
	}
	if t.read <= 0 {
		t.read = requestReadTimeout
	}
	if t.idle <= 0 {
		t.idle = idleTimeout
	}
	if t.hello <= 0 {
		t.hello = HelloTimeout
	}
	return t
}

// connLimit counts the socket's connections per uid.
type connLimit struct {
	max     int
	log     *slog.Logger
	refused atomic.Uint64
	logs    ratelimit.Lines

	mu     sync.Mutex
	cred   func(net.Conn) (api.Caller, error) // peerCred; tests give other uids (setCred)
	byUID  map[uint32]int
	byConn map[net.Conn]uint32
}

func newConnLimit(max int, log *slog.Logger) *connLimit {
	return &connLimit{max: max, cred: peerCred, log: log, logs: ratelimit.Lines{Max: 10}, byUID: map[uint32]int{}, byConn: map[net.Conn]uint32{}}
}

// state is the http.Server's ConnState hook. A hijacked connection (an
// owner session) stays counted until release.
func (l *connLimit) state(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		l.mu.Lock()
		cred := l.cred
		l.mu.Unlock()
		cr, err := cred(c)
		if err != nil || cr.UID == 0 {
			return // no credentials: every request is refused anyway
		}
		l.mu.Lock()
		over := l.byUID[cr.UID] >= l.max
		if !over {
			l.byUID[cr.UID]++
			l.byConn[c] = cr.UID
		}
		l.mu.Unlock()
		if over {
			c.Close()
			l.refused.Add(1)
			if held, ok := l.logs.Allow(time.Now()); ok {
				l.log.Warn("connection refused: the user holds too many", "uid", cr.UID, "pid", cr.PID, "max", l.max, "not_logged_before", held)
			}
		}
	case http.StateClosed:
		l.release(c)
	}
}

// setCred replaces how a connection's credentials are read (tests).
func (l *connLimit) setCred(f func(net.Conn) (api.Caller, error)) {
	l.mu.Lock()
	l.cred = f
	l.mu.Unlock()
}

// release forgets c, closed (or its owner session ended).
func (l *connLimit) release(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	uid, ok := l.byConn[c]
	if !ok {
		return
	}
	delete(l.byConn, c)
	if l.byUID[uid]--; l.byUID[uid] <= 0 {
		delete(l.byUID, uid)
	}
}

// held is the number of connections uid holds.
func (l *connLimit) held(uid uint32) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byUID[uid]
}

func (l *connLimit) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d connections of %d users", len(l.byConn), len(l.byUID))
}
