package shim

import (
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs/sim"
)

// TestSteppedRuntimeNeedsAClock: a stepped runtime takes its time from
// its owner; without a clock there is none to take.
func TestSteppedRuntimeNeedsAClock(t *testing.T) {
	cfg, _ := FromEnv(env(nil))
	if rt, err := NewSteppedRuntime(cfg, nil, Stepped{}); err == nil || rt != nil || !strings.Contains(err.Error(), "clock") {
		t.Fatalf("NewSteppedRuntime without a clock: %v, %v", rt, err)
	}
}

// TestStepTakesTheOwnersTime: a stepped runtime's layer 1 ticks only in
// Step, at the times Step asks for on the owner's clock; a runtime with
// goroutines has nothing to step.
func TestStepTakesTheOwnersTime(t *testing.T) {
	cfg, _ := FromEnv(env(nil))
	live := NewRuntime(cfg, nil)
	defer live.Close()
	if _, ok := live.Step(); ok {
		t.Fatal("a runtime with goroutines asks to be stepped")
	}
	f := sim.New(sim.Config{})
	rt, err := NewSteppedRuntime(cfg, nil, Stepped{Clock: f, Epoch: time.Unix(1000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if rt.l1 == nil || rt.l1.poller != nil {
		t.Fatal("the stepped runtime's layer 1 runs a poller goroutine")
	}
	if !rt.l1.kicked.Load() {
		t.Fatal("layer 1's first tick is not due at once")
	}
	if _, ok := rt.Step(); rt.l1.kicked.Load() || ok {
		t.Fatalf("after a step with nothing protected: kicked %v, a next step asked %v", rt.l1.kicked.Load(), ok)
	}
	f.RunFor(3 * time.Second)
	if got := rt.now(); !got.Equal(time.Unix(1003, 0)) {
		t.Fatalf("the runtime's time of day %v, want the epoch plus the clock's 3 s", got)
	}
}
