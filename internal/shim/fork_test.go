package shim

import (
	"strings"
	"testing"
)

// TestPreloadForkedChild: a program forks without exec while it runs a
// QP under the shim. The child has one thread and none of the shim's Go
// runtime, so the shim passes everything straight through there and
// never enters its Go side: the child opens the device again and runs a
// QP of its own to the end, posts a batch through the ibv_wr_* API on
// an inherited QP and polls that QP's extended CQ with ibv_start_poll
// for the first time, then polls the other CQ it inherited and destroys
// the QPs and CQs it inherited, as plain verbs (the second run with
// switching back on, so that the CQs' headroom is the shim's business in
// the parent). The
// parent runs on under the shim. The output is the same without the
// shim. The shim is the ibpath_faultinject build, which ends a forked
// child that enters its Go side or its hot path's bookkeeping (exit 97):
// an entry that happens not to hang (it mostly does not) is seen all the
// same.
func TestPreloadForkedChild(t *testing.T) {
	fb := buildBed(t, "ibpath_faultinject").program(t, "forkprobe")
	plain, _ := fb.run(t, nil, "200")
	want := "child: completions 250 close 0; the inherited wr-API QP's batch 8, the inherited CQ polled 0, " +
		"QPs destroyed 0 0, CQs destroyed 0 0\n" +
		"parent: completions 250 then 250, wr-API batches 8 then 8, close 0 0; child exited 0\n"
	if plain != want {
		t.Fatalf("the program itself misbehaves:\n%s", plain)
	}
	for _, env := range [][]string{
		{"IBPATH_SOCKET=off", "IBPATH_LOG=info"},
		{"IBPATH_SOCKET=off", "IBPATH_LOG=info", "IBPATH_SWITCHBACK=on"},
	} {
		out, errs := fb.run(t, env, "200")
		if out != plain {
			t.Errorf("%v: the forked program saw\n%s\nwithout the shim\n%s\nstderr:\n%s", env, out, plain, errs)
		}
		// The parent's device is seen once; the child's open of it is not
		// the shim's business.
		if n := strings.Count(errs, "libibpath: device opened"); n != 1 {
			t.Errorf("%v: the shim saw %d opens of the device, want the parent's alone:\n%s", env, n, errs)
		}
	}
}
