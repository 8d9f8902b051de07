package shim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPreloadCMEvents: a program reading rdma_cm events under the shim
// reaches the shim's rdma_get_cm_event (its RDMACM_1.0 reference binds
// there) and gets what librdmacm (a stand-in, testdata/fakecm.c) gives
// it: the stand-in device has no backup, so no layer protects the QP,
// and the UNREACHABLE passes, as without the shim, with the log saying
// why.
func TestPreloadCMEvents(t *testing.T) {
	if _, err := os.Stat("/usr/include/rdma/rdma_cma.h"); err != nil {
		t.Skip("librdmacm-dev is not installed (rdma/rdma_cma.h missing); .ci/run installs it")
	}
	b := buildBed(t)
	td, _ := filepath.Abs("testdata")
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("gcc", "-shared", "-fPIC", "-O2", "-o", "librdmacm.so.1", "-Wl,-soname,librdmacm.so.1",
		"-Wl,--version-script="+filepath.Join(td, "fakecm.map"), filepath.Join(td, "fakecm.c"))
	run("ln", "-s", "librdmacm.so.1", "librdmacm.so")
	cmprobe := filepath.Join(b.dir, "cmprobe")
	run("gcc", "-O2", "-o", cmprobe, filepath.Join(td, "cmprobe.c"), "-L"+b.dir, "-libverbs", "-lrdmacm", "-Wl,-rpath,"+b.dir)
	probe := b.probe
	b.probe = cmprobe
	defer func() { b.probe = probe }()

	plain, _ := b.run(t, nil)
	want := "event 9 status 0 own_qp 1\nevent 7 status -110 own_qp 1\nevent 10 status 0 own_qp 1\nno event: EAGAIN\nacks 3\n"
	if plain != want {
		t.Fatalf("without the shim the program got\n%s\nwant\n%s", plain, want)
	}
	got, stderr := b.run(t, []string{"IBPATH_LOG=info"})
	if got != plain {
		t.Fatalf("under the shim the program got\n%s\nwithout it\n%s\nshim log:\n%s", got, plain, stderr)
	}
	if !strings.Contains(stderr, "rdma_cm UNREACHABLE reaches the application: no layer protects the QP") {
		t.Fatalf("the shim did not see the event (its rdma_get_cm_event was not called):\n%s", stderr)
	}
}
