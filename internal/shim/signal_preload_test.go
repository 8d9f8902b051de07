package shim

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
)

// TestPreloadSignalsAsWithout: a c-shared Go library installs handlers
// for SIGSEGV, SIGBUS, SIGFPE and SIGPIPE when it is loaded (os/signal,
// "Non-Go programs that call Go code"), with IBPATH_DISABLE=1 too. A
// program without handlers of its own must still end by the signal, as
// without the shim: a NULL dereference kills it with SIGSEGV (and a core
// where cores are on), not with a Go crash report and exit status 2.
func TestPreloadSignalsAsWithout(t *testing.T) {
	sb := buildBed(t).program(t, "sigprobe")
	for _, c := range []struct {
		how string
		sig syscall.Signal
	}{{"segv", syscall.SIGSEGV}, {"fpe", syscall.SIGFPE}, {"bus", syscall.SIGBUS}, {"pipe", syscall.SIGPIPE}} {
		for _, env := range [][]string{nil, {"IBPATH_DISABLE=1"}, {"IBPATH_SOCKET=off"}} {
			for _, args := range [][]string{{c.how}, {c.how, "verbs"}} {
				cmd := sb.cmd(env, args...)
				cmd.Env = append(cmd.Env, "GOTRACEBACK=none")
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatalf("%v %v: %v\n%s", env, args, err, out)
				}
				ws, ok := ee.Sys().(syscall.WaitStatus)
				if !ok || !ws.Signaled() || ws.Signal() != c.sig {
					t.Errorf("%v %v: ended with %v, want killed by %v\n%s", env, args, ee, c.sig, out)
				}
			}
		}
	}
}

// TestPreloadHandlersOffGoStacks: a signal handler the program installs
// after the shim loaded (perftest's duration alarm: signal(SIGALRM, ...)
// with no SA_ONSTACK) must never run on a Go stack: a program thread
// inside a verb the core runs in Go is on a goroutine stack of a few
// KiB, and the kernel's signal frame and the handler's own frames would
// overrun it into the Go heap. The front adds SA_ONSTACK, so the handler
// runs on the thread's alternate signal stack, which the front gave the
// main thread before the core loaded (256 KiB; Go's own would be 32 KiB
// of Go memory); sigaction still reports the flags the program gave. Without the shim, and with IBPATH_DISABLE=1 (no Go),
// nothing changes: every alarm lands on the main thread's own stack.
func TestPreloadHandlersOffGoStacks(t *testing.T) {
	sb := buildBed(t).program(t, "sigprobe")
	type where struct{ reported, alarms, main, alt, elsewhere, altstack int }
	run := func(env []string, how string) where {
		t.Helper()
		out, errs := sb.run(t, env, "alarm", how, "0.5")
		var w where
		var cqs int
		if _, err := fmt.Sscanf(out, "onstack_reported %d cqs_ok %d\nalarms %d main_stack %d alt_stack %d elsewhere %d\naltstack %d",
			&w.reported, &cqs, &w.alarms, &w.main, &w.alt, &w.elsewhere, &w.altstack); err != nil || cqs != 1 {
			t.Fatalf("%v %s: %v\nstdout:\n%s\nstderr:\n%s", env, how, err, out, errs)
		}
		if w.alarms < 100 {
			t.Fatalf("%v %s: only %d alarms in 0.5 s at 100 us", env, how, w.alarms)
		}
		return w
	}
	for _, how := range []string{"signal", "sigaction", "onstack"} {
		want := 0
		if how == "onstack" {
			want = 1
		}
		for _, env := range [][]string{nil, {"IBPATH_DISABLE=1"}} {
			w := run(env, how)
			if w.reported != want || w.alt != 0 || w.elsewhere != 0 || w.altstack != 0 {
				t.Errorf("%v %s: %+v, want every alarm on the main stack, SA_ONSTACK reported %d", env, how, w, want)
			}
		}
		w := run([]string{"IBPATH_SOCKET=off"}, how)
		t.Logf("shim, %s: %+v", how, w)
		if w.reported != want {
			t.Errorf("shim, %s: SA_ONSTACK reported %d, want %d as the program set it", how, w.reported, want)
		}
		if w.elsewhere != 0 {
			t.Errorf("shim, %s: %d of %d alarms ran on neither the thread's stack nor an alternate signal stack (a Go stack): %+v",
				how, w.elsewhere, w.alarms, w)
		}
		if w.alt == 0 {
			t.Errorf("shim, %s: no alarm came while the program ran Go code (%+v): the test did not reach the case", how, w)
		}
		// the alternate stack is the front's (256 KiB, a guard page
		// below), not Go's 32 KiB of Go memory: a handler that needs
		// more than Go's faults at the guard instead of overrunning
		if w.altstack < 256<<10 {
			t.Errorf("shim, %s: the main thread's alternate signal stack is %d bytes, want the front's 256 KiB", how, w.altstack)
		}
	}
}
