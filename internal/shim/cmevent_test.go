package shim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
)

const etimedout = -110 // the status of the kernel's UNREACHABLE

// TestCMUnreachableWhileProtected: an rdma_cm UNREACHABLE of a QP is
// kept from the application exactly while its connection is established
// and a layer protects the QP: before layer 2 armed it, and while
// librdmacm has not reported the connection established, it reaches the
// application; then, and after the failover that a cut link brings, it
// does not; after DISCONNECTED, for a QP whose failover surfaced, and
// for one the shim does not know, it does again.
func TestCMUnreachableWhileProtected(t *testing.T) {
	f := railFabric(t, 61)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{}), newL2Host(t, f, "node1", 1, c, l2opts{})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	unreachable := func(q *appQP) bool { return q.x.rt.CMUnreachable(q.x.id, q.qp.QPN(), etimedout) }

	if unreachable(qa) {
		t.Fatalf("hidden before the QP was connected and armed (status %+v)", qa.status())
	}
	if qa.x.logLine("rdma_cm UNREACHABLE reaches the application", "its connection is not established") == "" {
		t.Fatalf("no log line for the event passed on:\n%s", a.log)
	}
	if a.rt.CMUnreachable(a.id, 0xdead, etimedout) {
		t.Fatal("hidden for a QP the shim does not know")
	}
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	// Armed, but librdmacm has not reported the connection established:
	// an UNREACHABLE now is the failure of its setup.
	if unreachable(qa) {
		t.Fatal("hidden before the connection was established")
	}
	if qa.x.logLine("rdma_cm UNREACHABLE reaches the application", "its connection is not established") == "" {
		t.Fatalf("no log line for the event of a connection being set up:\n%s", a.log)
	}
	for _, q := range []*appQP{qa, qb} {
		q.x.rt.CMEstablished(q.x.id, q.qp.QPN(), true)
	}
	if !unreachable(qa) {
		t.Fatalf("passed on while layer 2 protects the QP (status %+v)", qa.status())
	}
	if qa.x.logLine("rdma_cm UNREACHABLE kept from the application", `layer=crossnic home=`) == "" {
		t.Fatalf("no log line for the hidden event:\n%s", a.log)
	}

	hosts := []*l2host{a, b}
	qa.total, qb.total = 40, 40
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 })
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A diverted on PORT_ERR", qa.diverted)
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	if s := qa.status(); s.Failovers != 1 || s.Layer != status.LayerCrossNIC {
		t.Fatalf("status after the cut %+v", s)
	}
	if !unreachable(qa) || !unreachable(qb) {
		t.Fatal("passed on after the failover, while the QPs run on their backups")
	}
	if n := a.rt.CMHidden(); n != 2 {
		t.Fatalf("A counts %d hidden events, want 2", n)
	}
	// Disconnected: the application is ending the connection.
	a.rt.CMEstablished(a.id, qa.qp.QPN(), false)
	if unreachable(qa) {
		t.Fatal("hidden after the connection's DISCONNECTED")
	}

	// A QP whose failover surfaced is protected by nothing: the event
	// reaches the application, which also gets the error completion.
	_, sa, _ := atomicRun(t, true)
	sa.x.rt.CMEstablished(sa.x.id, sa.qp.QPN(), true)
	if s := sa.status(); s.Layer != status.LayerNone {
		t.Fatalf("atomic run: status %+v, want layer none", s)
	}
	if unreachable(sa) {
		t.Fatal("hidden for a QP whose failover surfaced")
	}
	if sa.x.logLine("rdma_cm UNREACHABLE reaches the application", "no layer protects the QP") == "" {
		t.Fatalf("no log line for the event of an unprotected QP:\n%s", sa.x.log)
	}
}

// TestCMEventFilterC runs the C checks of the rdma_cm event filter
// (cm.c: a hidden event is acknowledged and the next one returned,
// every other event passes, EAGAIN when nothing is left) and checks the
// shim's copy of librdmacm's structures (cm.h) against
// <rdma/rdma_cma.h>, from librdmacm-dev (.ci/run installs it).
func TestCMEventFilterC(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	if _, err := os.Stat("/usr/include/rdma/rdma_cma.h"); err != nil {
		t.Skip("librdmacm-dev is not installed (rdma/rdma_cma.h missing); .ci/run installs it")
	}
	src := filepath.Join("..", "..", "cmd", "libibpath")
	bin := filepath.Join(t.TempDir(), "cm_check")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-I", src, "-o", bin,
		filepath.Join(src, "cbench", "cm_check.c"), filepath.Join(src, "cm.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "test").CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "PASS") {
		t.Fatalf("cm_check test: %v\n%s", err, out)
	}
}
