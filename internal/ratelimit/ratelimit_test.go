package ratelimit

import (
	"testing"
	"time"
)

// TestLines: Max events a second pass; the first to pass after the
// second is over says how many were held back.
func TestLines(t *testing.T) {
	l := Lines{Max: 3}
	t0 := time.Unix(1000, 0)
	passed := 0
	for i := range 10 {
		if _, ok := l.Allow(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			passed++
		}
	}
	if passed != 3 {
		t.Fatalf("%d of 10 passed within a second, want 3", passed)
	}
	held, ok := l.Allow(t0.Add(1500 * time.Millisecond))
	if !ok || held != 7 {
		t.Fatalf("after the second: ok %v, held %d; want true, 7", ok, held)
	}
}
