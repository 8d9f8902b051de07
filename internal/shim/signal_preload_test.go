package shim

import (
	"errors"
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
