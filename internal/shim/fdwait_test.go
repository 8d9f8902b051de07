package shim

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// pipeCtx is a context whose async fd is the read end of a pipe: each
// byte written is one event.
type pipeCtx struct {
	verbs.Context
	fd int
}

func (c *pipeCtx) AsyncFD() int { return c.fd }

func (c *pipeCtx) GetAsyncEvent() (verbs.AsyncEvent, error) {
	var b [1]byte
	if n, err := syscall.Read(c.fd, b[:]); n != 1 {
		if err == nil || errors.Is(err, syscall.EAGAIN) {
			return verbs.AsyncEvent{}, verbs.Errorf("ibv_get_async_event", verbs.EAGAIN, "none pending")
		}
		return verbs.AsyncEvent{}, verbs.Errorf("ibv_get_async_event", verbs.EIO, "%v", err)
	}
	return verbs.AsyncEvent{Type: verbs.EventPortErr, Port: b[0]}, nil
}

func pipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(p[0]); syscall.Close(p[1]) })
	return p[0], p[1]
}

func ready(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// TestFDNotifierFires: the pump's notifier fires when an event is written
// after the pump read everything, again for the next one, and not while
// nothing is pending.
func TestFDNotifierFires(t *testing.T) {
	r, w := pipe(t)
	ctx, stop, notified := withFDNotifier(&pipeCtx{fd: r})
	if !notified {
		t.Fatal("a context with an async fd was not wrapped")
	}
	defer stop()
	n, ok := ctx.(verbs.AsyncNotifier)
	if !ok {
		t.Fatal("a context with an async fd has no notifier")
	}
	for round := byte(1); round <= 3; round++ {
		if _, err := ctx.GetAsyncEvent(); !errors.Is(err, verbs.EAGAIN) {
			t.Fatalf("round %d: read with nothing pending: %v", round, err)
		}
		if ready(n.AsyncReady(), 20*time.Millisecond) {
			t.Fatalf("round %d: ready with nothing pending", round)
		}
		if _, err := syscall.Write(w, []byte{round}); err != nil {
			t.Fatal(err)
		}
		if !ready(n.AsyncReady(), 5*time.Second) {
			t.Fatalf("round %d: an event is pending and the notifier did not fire", round)
		}
		ev, err := ctx.GetAsyncEvent()
		if err != nil || ev.Port != round {
			t.Fatalf("round %d: read %+v %v", round, ev, err)
		}
	}
}

// TestFDWait: a wait returns at once when data is pending (nothing that
// came before the wait is missed), blocks otherwise, and ends with an
// error when closed.
func TestFDWait(t *testing.T) {
	r, w := pipe(t)
	fw, err := newFDWait(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Write(w, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := fw.Wait(); err != nil {
		t.Fatalf("wait with data pending: %v", err)
	}
	var b [1]byte
	if _, err := syscall.Read(r, b[:]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("wait returned %v with nothing pending", err)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := syscall.Write(w, []byte{2}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return once data came")
	}
	if _, err := syscall.Read(r, b[:]); err != nil {
		t.Fatal(err)
	}
	go func() { done <- fw.Wait() }()
	time.Sleep(10 * time.Millisecond)
	fw.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("wait on a closed fd returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait")
	}
}
