package sim

import (
	"testing"
	"time"
)

// TestNextEvent: NextEvent reports the earliest scheduled event, and
// nothing once the queue is empty, so a driver can jump the clock to it.
func TestNextEvent(t *testing.T) {
	f := New(Config{Seed: 1})
	if at, ok := f.NextEvent(); ok {
		t.Fatalf("empty fabric: next event at %v", at)
	}
	ran := 0
	f.At(3*time.Millisecond, func() { ran++ })
	f.At(time.Millisecond, func() { ran++ })
	if at, ok := f.NextEvent(); !ok || at != time.Millisecond {
		t.Fatalf("next event %v %v, want 1ms", at, ok)
	}
	f.RunUntil(2 * time.Millisecond)
	if at, ok := f.NextEvent(); !ok || at != 3*time.Millisecond || ran != 1 {
		t.Fatalf("after 2ms: next %v %v, ran %d; want 3ms, 1", at, ok, ran)
	}
	f.RunUntil(4 * time.Millisecond)
	if _, ok := f.NextEvent(); ok || ran != 2 {
		t.Fatalf("after 4ms: an event still queued or ran %d", ran)
	}
}
