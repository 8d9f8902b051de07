package shim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// buildHotpathCheck compiles cmd/libibpath/cbench/hotpath_check.c with
// the shim's hot path (hotpath.c) against a provider stub.
func buildHotpathCheck(tb testing.TB) string { return buildCCheck(tb, "hotpath_check") }

// buildCCheck compiles cmd/libibpath/cbench/<name>.c with the shim's C
// data path (hotpath.c, divert.c, express.c, channel.c, wrapi.c, nudge.c).
func buildCCheck(tb testing.TB, name string) string {
	tb.Helper()
	return buildCCheckSrcs(tb, name, "hotpath.c", "divert.c", "express.c", "channel.c", "wrapi.c", "nudge.c", "srq.c")
}

// buildCCheckSrcs compiles cmd/libibpath/cbench/<name>.c with the given
// files of the shim's C data path.
func buildCCheckSrcs(tb testing.TB, name string, srcs ...string) string {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		tb.Skip("gcc not found")
	}
	src := filepath.Join("..", "..", "cmd", "libibpath")
	bin := filepath.Join(tb.TempDir(), name)
	args := []string{"-O2", "-Wall", "-Werror", "-I", src, "-o", bin, filepath.Join(src, "cbench", name+".c")}
	for _, f := range srcs {
		args = append(args, filepath.Join(src, f))
	}
	out, err := exec.Command("gcc", append(args, "-lpthread")...).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "verbs.h") {
			tb.Skip("libibverbs-dev is not installed (verbs.h missing); .ci/run installs it")
		}
		tb.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// TestHotPathRings runs the C checks of the shadow rings: recording,
// retirement by signaled completions, refused WRs, receives, partial
// entries, error completions, the handshake counters, inline copies,
// interception and diversion (a divert waits for a post in progress),
// ring order with two threads posting to one QP, retirements and
// counters with two threads polling one CQ, removal and restoring the
// provider's ops; with the rings' locks and without them (the promises
// of IBPATH_SINGLE_POSTER and IBPATH_SINGLE_POLLER, under which the
// checks with two threads do not run).
func TestHotPathRings(t *testing.T) {
	bin := buildHotpathCheck(t)
	for _, single := range [][2]string{{"0", "0"}, {"1", "0"}, {"0", "1"}} {
		cmd := exec.Command(bin, "test")
		cmd.Env = append(os.Environ(), "IBPATH_SINGLE_POSTER="+single[0], "IBPATH_SINGLE_POLLER="+single[1])
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "PASS") {
			t.Fatalf("hotpath_check test (IBPATH_SINGLE_POSTER=%s IBPATH_SINGLE_POLLER=%s): %v\n%s", single[0], single[1], err, out)
		}
	}
}

// TestExpressLaneC runs the C checks of the express lane (express.c):
// keys translated on the way to the backup QP (inline SGEs and
// zero-length WRITEs excepted), the application's WRs untouched, a key
// miss handed to layer 2 for the WRs not posted yet (never twice), an
// unresolved miss failing with EIO, a provider's refusal mapped to the
// application's WR, receives; polls that drain the backup CQ with the
// default QP's numbers, drop layer 2's own WRs, hide the default QP's flushes
// and pass other QPs' completions; surfacing on a backup error or the
// peer's refusal (layer 2 told once, posts then on the default QP); off
// the lane again; key tables that grow.
func TestExpressLaneC(t *testing.T) {
	bin := buildCCheck(t, "express_check")
	out, err := exec.Command(bin, "test").CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "PASS") {
		t.Fatalf("express_check test: %v\n%s", err, out)
	}
}

// TestNudgeC runs the C checks of layer 1's nudge (nudge.c): which QPs
// get its send slot (RC, no SRQ, no sq_sig_all, a context that wants it,
// not a single poster), no nudge before a send completion went through
// the shim's polls or with nothing in flight, the nudge a zero-length
// WRITE, unsignaled, after the WRs in flight and not in the shadow ring,
// one out at a time until a signaled WR posted after it completes, its
// flush kept from the application and from layer 2's batch, its own
// error on an armed QP given to layer 2 first in the batch (the QP's
// fault), none on a QP layer 2 took over, given back, destroyed, or
// whose provider refuses it.
func TestNudgeC(t *testing.T) {
	bin := buildCCheck(t, "nudge_check")
	out, err := exec.Command(bin, "test").CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "PASS") {
		t.Fatalf("nudge_check test: %v\n%s", err, out)
	}
}

// TestForkC runs the C check of fork(2) while a thread holds the shim's
// channel lock: the child, which has only the forking thread, must not
// find it held (the lock is taken across the fork).
func TestForkC(t *testing.T) {
	bin := buildCCheckSrcs(t, "fork_check", "hotpath.c", "divert.c", "express.c", "wrapi.c", "nudge.c", "srq.c")
	out, err := exec.Command(bin, "test").CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "PASS") {
		t.Fatalf("fork_check test: %v\n%s", err, out)
	}
}

// TestUndivertC runs the C checks of giving a diverted QP back to the hot
// path (lip_undivert in divert.c) and of the posts layer 2 hands back on
// the way (LIP_HOME, hotpath.c): the rings reloaded with the WRs given
// (positions wrapping the ring, an inline payload copied from its SGEs,
// more SGEs than kept marked partial, immediates and atomic operands
// kept, the overflow count cleared, the counters set), the CQ left
// diverted and the QP armed; posts then reach the provider, recorded
// after them; completions, retired by layer 2 and then by the hot path,
// retire them in order and the counters go on from the given ones; the
// next divert finds exactly what is left. Refused (nothing changed): a QP
// not diverted, more WRs than a ring holds, a QP on the express lane. A
// post layer 2 answers LIP_HOME is posted by the hot path once, recorded,
// with the provider's bad_wr (sends and receives); a QP diverted again
// each time fails the post with EIO; WRs the express lane posted before
// a missed key stay posted, the rest goes to the default QP.
func TestUndivertC(t *testing.T) {
	bin := buildCCheck(t, "undivert_check")
	for _, single := range []string{"0", "1"} {
		cmd := exec.Command(bin, "test")
		cmd.Env = append(os.Environ(), "IBPATH_SINGLE_POSTER="+single)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "PASS") {
			t.Fatalf("undivert_check test (IBPATH_SINGLE_POSTER=%s): %v\n%s", single, err, out)
		}
	}
}

// BenchmarkHotPath reports the ns the shim's Default-state wrappers add
// to post_send and poll_cq over direct calls to the same provider
// function, measured side by side in one C program (best of 5
// alternating rounds of 4M calls; no cgo in the timed loop): with the
// rings' default locks biased to the one thread that posts and polls
// ("default"), with those locks revoked by a second thread ("revoked":
// the spin locks), and with IBPATH_SINGLE_POSTER=1 and
// IBPATH_SINGLE_POLLER=1 ("single": no lock).
func BenchmarkHotPath(b *testing.B) {
	for _, mode := range []struct{ name, single, revoked string }{{"default", "0", ""}, {"revoked", "0", "1"}, {"single", "1", ""}} {
		b.Run(mode.name, func(b *testing.B) { benchHotPath(b, mode.single, mode.revoked) })
	}
}

func benchHotPath(b *testing.B, single, revoked string) {
	bin := buildHotpathCheck(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(bin, "bench")
		cmd.Env = append(os.Environ(), "IBPATH_SINGLE_POSTER="+single, "IBPATH_SINGLE_POLLER="+single)
		if revoked != "" {
			cmd.Env = append(cmd.Env, "LIP_BENCH_REVOKED="+revoked)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("hotpath_check bench: %v\n%s", err, out)
		}
		reportCBench(b, string(out))
	}
}

// benchC runs "<name> bench" of a C check b.N times and reports its
// lines (reportCBench).
func benchC(b *testing.B, name string) {
	bin := buildCCheck(b, name)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := exec.Command(bin, "bench").CombinedOutput()
		if err != nil {
			b.Fatalf("%s bench: %v\n%s", name, err, out)
		}
		reportCBench(b, string(out))
	}
}

// reportCBench reports the lines of a C bench ("post_send direct_ns X
// shim_ns Y added_ns Z") as metrics.
func reportCBench(b *testing.B, out string) {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 7 {
			b.Fatalf("unexpected line %q", line)
		}
		for k := 1; k < 7; k += 2 {
			v, err := strconv.ParseFloat(f[k+1], 64)
			if err != nil {
				b.Fatalf("%q: %v", line, err)
			}
			b.ReportMetric(v, f[0]+"_"+f[k]+"/op")
		}
	}
}

// BenchmarkExpressLane reports the ns the express lane adds to post_send
// and poll_cq over calling the backup provider directly with the keys
// already translated, side by side in one C program (best of 5
// alternating rounds of 2M calls).
func BenchmarkExpressLane(b *testing.B) { benchC(b, "express_check") }

// TestCompletionChannelsC runs the C checks of the shim's completion
// channels (channel.c) against a stand-in event file: kernel events
// pass through and disarm their CQ; the shim's events only for an armed
// CQ, once per arming, before the kernel's, in order across CQs; a
// blocked ibv_get_cq_event wakes on either kind, a non-blocking fd gives
// EAGAIN; a blocked one waits on through a stop and continue and through
// a handler with SA_RESTART, and fails with EINTR after one without, as
// libibverbs's read of the event file does; destroying a CQ takes the shim's events out of its
// acknowledged count (libibverbs would wait forever otherwise) and its
// waiting event off the channel; EBUSY then the fds closed on destroying
// the channel; req_notify_cq swapped, the provider's refusal passed on
// except for a diverted CQ, the provider's function restored.
func TestCompletionChannelsC(t *testing.T) {
	bin := buildCCheck(t, "channel_check")
	out, err := exec.Command(bin, "test").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("channel_check test: %v\n%s", err, out)
	}
}

// BenchmarkCompletionChannel reports the ns the shim's completion
// channels add to an ibv_get_cq_event that finds its event ready (the
// usual case after poll(2) woke the program) and to ibv_req_notify_cq,
// over libibverbs's stand-in called directly, side by side in one C
// program (best of 5 alternating rounds of 200k calls; a get includes
// the write of the event record, the same in both).
func BenchmarkCompletionChannel(b *testing.B) { benchC(b, "channel_check") }

// TestWrAPIC runs the C checks of the shim's ibv_wr_* functions (wrapi.c)
// against a provider stub: which operations are followed; a batch
// reaches the provider only at wr_complete, whole, with each WR's wr_id,
// flags, operands and SGEs as described, inline bytes copied when set,
// and is recorded in the shadow ring; a refused batch is void in the
// ring, an aborted one posted nowhere; more inline bytes, SGEs or WRs
// than granted, or an SGE before any WR, fail wr_complete; two threads
// posting batches to one QP never interleave them and the ring keeps the
// provider's order; a diverted QP's batch goes to layer 2 as one chain,
// and one layer 2 hands back (LIP_HOME) is issued through the provider's
// functions once, recorded, the queue's lock released.
func TestWrAPIC(t *testing.T) {
	bin := buildCCheck(t, "wrapi_check")
	for _, single := range []string{"0", "1"} {
		cmd := exec.Command(bin, "test")
		cmd.Env = append(os.Environ(), "IBPATH_SINGLE_POSTER="+single)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Fatalf("wrapi_check test (IBPATH_SINGLE_POSTER=%s): %v\n%s", single, err, out)
		}
	}
}

// BenchmarkWrAPI reports the ns the shim's ibv_wr_* functions add to a
// one-WR batch (wr_start, an RDMA WRITE with one SGE, wr_complete) over
// the provider's functions called directly, side by side in one C
// program (best of 5 alternating rounds of 1M batches).
func BenchmarkWrAPI(b *testing.B) { benchC(b, "wrapi_check") }

// TestSRQRingsC runs cmd/libibpath/cbench/srq_check.c: the shadow ring
// of an SRQ the shim follows records its posts (refused ones void),
// retires receives by the wr_id of completions of any QP on it, out of
// order, counting each QP's, survives wrap-around, says when posts
// overran it, hands posts to layer 2 once diverted, and goes with its
// context.
func TestSRQRingsC(t *testing.T) {
	bin := buildCCheck(t, "srq_check")
	out, err := exec.Command(bin, "test").CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "PASS") {
		t.Fatalf("srq_check test: %v\n%s", err, out)
	}
}

// BenchmarkSRQHotPath reports the ns the shim adds to ibv_post_srq_recv
// of an SRQ it follows (recording the WR) and to polling a receive
// completion of a QP on it (retiring the receive by its wr_id), over
// direct calls to the same provider functions, side by side in one C
// program (srq_check bench).
func BenchmarkSRQHotPath(b *testing.B) { benchC(b, "srq_check") }
