package replica

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// partition is a set of blocked host addresses shared by the filtering
// transports of a test: a node's outgoing packets and connections to a
// blocked host are dropped, in both directions when every node wraps.
type partition struct {
	mu      sync.Mutex
	blocked map[string]bool
}

func (p *partition) set(hosts ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = map[string]bool{}
	for _, h := range hosts {
		p.blocked[h] = true
	}
}

// cut reports whether traffic between self and addr is cut: it is when
// exactly one side of the pair is blocked.
func (p *partition) cut(self, addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blocked[self] != p.blocked[host]
}

type filterTransport struct {
	memberlist.Transport
	self string
	p    *partition
}

func (p *partition) wrap(self string) func(memberlist.Transport) memberlist.Transport {
	return func(t memberlist.Transport) memberlist.Transport {
		return &filterTransport{Transport: t, self: self, p: p}
	}
}

func (f *filterTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if f.p.cut(f.self, addr) {
		return time.Now(), nil // lost on the wire
	}
	return f.Transport.WriteTo(b, addr)
}

func (f *filterTransport) DialTimeout(addr string, d time.Duration) (net.Conn, error) {
	if f.p.cut(f.self, addr) {
		return nil, errors.New("partitioned")
	}
	return f.Transport.DialTimeout(addr, d)
}
