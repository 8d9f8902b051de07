package shim

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
)

// Attacher keeps a session with ibpathd while the process runs: it dials
// in the background, reports every QP when attached, answers relayed
// commands, and dials again (with backoff) when the daemon goes away. The
// application never waits for it.
type Attacher struct {
	rt     *Runtime
	socket string
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once

	mu       sync.Mutex
	attached bool
}

// Backoff bounds between attempts.
const (
	minRetry = 500 * time.Millisecond
	maxRetry = 30 * time.Second
)

// Attach starts the background session with the daemon at socket.
func Attach(rt *Runtime, socket string) *Attacher {
	a := &Attacher{rt: rt, socket: socket, stop: make(chan struct{})}
	a.wg.Add(1)
	go a.loop()
	return a
}

// Attached reports whether a session is up.
func (a *Attacher) Attached() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attached
}

func (a *Attacher) loop() {
	defer a.wg.Done()
	wait := minRetry
	inc, err := ownerproto.StartTime(os.Getpid())
	if err != nil {
		a.rt.log.Warn("libibpath: not attaching to ibpathd", "err", err)
		return
	}
	hello := ownerproto.Hello{PID: os.Getpid(), Incarnation: inc, Comm: comm()}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := ownerproto.Dial(ctx, a.socket, hello, a.rt.Command)
		cancel()
		if err == nil {
			a.rt.log.Info("libibpath: attached to ibpathd", "socket", a.socket, "node", s.Node())
			a.set(true)
			a.rt.SetReporter(s)
			wait = minRetry
			select {
			case <-s.Done():
				a.rt.log.Info("libibpath: ibpathd session ended; carrying on without it", "err", s.Err())
			case <-a.stop:
			}
			a.rt.SetReporter(nil)
			a.set(false)
			s.Close()
		} else {
			a.rt.log.Debug("libibpath: ibpathd not reachable; carrying on without it", "socket", a.socket, "err", err)
		}
		select {
		case <-a.stop:
			return
		case <-time.After(wait):
		}
		if wait *= 2; wait > maxRetry {
			wait = maxRetry
		}
	}
}

func (a *Attacher) set(v bool) {
	a.mu.Lock()
	a.attached = v
	a.mu.Unlock()
}

// Close ends the session and stops dialling.
func (a *Attacher) Close() {
	a.once.Do(func() {
		close(a.stop)
		a.wg.Wait()
	})
}

func comm() string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
