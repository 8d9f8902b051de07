package asyncev

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// probe is a poll function that reports each call on a channel and answers
// with whatever the test sets.
type probe struct {
	calls    atomic.Int64
	inFlight atomic.Bool
	overlaps atomic.Int64
	called   chan int64
	next     atomic.Int64 // time.Duration
	pending  atomic.Bool
	hold     time.Duration // time spent inside poll
}

func newProbe(next time.Duration, pending bool) *probe {
	p := &probe{called: make(chan int64, 4096)}
	p.next.Store(int64(next))
	p.pending.Store(pending)
	return p
}

func (p *probe) poll() (time.Duration, bool) {
	if !p.inFlight.CompareAndSwap(false, true) {
		p.overlaps.Add(1)
	}
	defer p.inFlight.Store(false)
	if p.hold > 0 {
		time.Sleep(p.hold)
	}
	n := p.calls.Add(1)
	select {
	case p.called <- n:
	default:
	}
	return time.Duration(p.next.Load()), p.pending.Load()
}

func (p *probe) wantCall(t *testing.T, what string) int64 {
	t.Helper()
	select {
	case n := <-p.called:
		return n
	case <-time.After(guard):
		t.Fatalf("no call of poll %s", what)
	}
	return 0
}

func (p *probe) wantNoCall(t *testing.T, within time.Duration, what string) {
	t.Helper()
	select {
	case n := <-p.called:
		t.Fatalf("poll called (call %d) %s", n, what)
	case <-time.After(within):
	}
}

func TestPollerIdleUntilKick(t *testing.T) {
	pr := newProbe(0, false)
	pl := StartPoller(pr.poll, PollerOptions{})
	defer pl.Close()
	pr.wantCall(t, "at start")
	pr.wantNoCall(t, 30*time.Millisecond, "while nothing is pending and nobody kicked")
	for i := range 3 {
		pl.Kick()
		if n := pr.wantCall(t, "after Kick"); n != int64(i+2) {
			t.Fatalf("call %d after kick %d", n, i+1)
		}
	}
	pr.wantNoCall(t, 30*time.Millisecond, "after the kicks were served")
}

func TestPollerRepeatsWhilePending(t *testing.T) {
	pr := newProbe(time.Millisecond, true)
	pl := StartPoller(pr.poll, PollerOptions{})
	defer pl.Close()
	for range 10 {
		pr.wantCall(t, "while pending")
	}
	pr.pending.Store(false)
	// One call may already be scheduled; after it the poller goes idle.
	for {
		select {
		case <-pr.called:
			continue
		case <-time.After(30 * time.Millisecond):
		}
		break
	}
	pr.wantNoCall(t, 30*time.Millisecond, "after poll reported nothing pending")
	pr.pending.Store(true)
	pl.Kick()
	pr.wantCall(t, "after Kick")
	pr.wantCall(t, "pending again")
}

func TestPollerClampsNext(t *testing.T) {
	// next far beyond MaxInterval: the poller still comes back soon.
	pr := newProbe(time.Hour, true)
	pl := StartPoller(pr.poll, PollerOptions{MaxInterval: time.Millisecond})
	defer pl.Close()
	for range 5 {
		pr.wantCall(t, "with next capped by MaxInterval")
	}
}

func TestPollerKickCutsThePauseShort(t *testing.T) {
	pr := newProbe(time.Hour, true)
	pl := StartPoller(pr.poll, PollerOptions{MinInterval: time.Hour, MaxInterval: time.Hour})
	defer pl.Close()
	pr.wantCall(t, "at start")
	pl.Kick()
	pr.wantCall(t, "after Kick during an hour-long pause")
}

func TestPollerClose(t *testing.T) {
	pr := newProbe(100*time.Microsecond, true)
	pl := StartPoller(pr.poll, PollerOptions{})
	pr.wantCall(t, "at start")
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(pl.Close)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	wantDone(t, done, "concurrent Poller.Close")
	pl.Close()
	wantDone(t, pl.Done(), "poller goroutine")
	n := pr.calls.Load()
	pl.Kick() // harmless after Close
	time.Sleep(20 * time.Millisecond)
	if m := pr.calls.Load(); m != n {
		t.Fatalf("poll called %d times after Close returned", m-n)
	}
}

func TestPollerNeverOverlaps(t *testing.T) {
	pr := newProbe(0, true)
	pr.hold = 50 * time.Microsecond
	pl := StartPoller(pr.poll, PollerOptions{MinInterval: time.Microsecond, MaxInterval: time.Microsecond})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				pl.Kick()
				if pr.calls.Load()%3 == 0 {
					pr.pending.Store(!pr.pending.Load())
				}
			}
		})
	}
	wg.Wait()
	for range 20 {
		pl.Kick()
		pr.wantCall(t, "under concurrent kicks")
	}
	pl.Close()
	if o := pr.overlaps.Load(); o != 0 {
		t.Fatalf("poll ran concurrently with itself %d times", o)
	}
	if pr.calls.Load() < 20 {
		t.Fatalf("only %d calls", pr.calls.Load())
	}
}
