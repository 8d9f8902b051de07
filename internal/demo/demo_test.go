package demo

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

func runDemo(t *testing.T, seed uint64) (Result, string) {
	t.Helper()
	var buf bytes.Buffer
	res, err := run(&buf, Options{Seed: seed})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, buf.String())
	}
	return res, buf.String()
}

func mustEndpoint(t *testing.T, r Result, qp, host string) EndpointResult {
	t.Helper()
	e, ok := r.Endpoint(qp, host)
	if !ok {
		t.Fatalf("no result for QP %s on %s", qp, host)
	}
	return e
}

func TestScenario(t *testing.T) {
	res, out := runDemo(t, 7)
	to := verbs.TimeoutDuration(rcTimeout)

	// Setup: every QP armed by the managers, through the application's
	// own modifies, on the other port.
	for _, h := range []string{"node0", "node1"} {
		st := res.Managers[h]
		if st.Registered != 2 || st.ModifyFallbacks != 0 {
			t.Errorf("%s manager stats %+v: want 2 QPs armed through ModifyQP", h, st)
		}
		for _, qp := range []string{"A", "B"} {
			cs := res.Layer1Of(qp, h)
			if len(cs) < 2 || !cs[0].New || cs[0].Cause != "connect" || cs[1].After.State != fsm.APMArmed ||
				cs[1].After.Alternate != (fsm.PathRef{Port: 2}) || cs[1].At > pullAt {
				t.Errorf("QP %s on %s: want registered at connect, then armed on port 2:\n%s", qp, h, formatL1(cs))
			}
		}
	}

	// QP A, cable pull: node0 migrates at PORT_ERR (proactive), node1
	// follows with PATH_MIG, both re-arm on the LMC path of port 2.
	if !res.HasEvent("node0", verbs.EventPortErr, "") || !res.HasEvent("node0", verbs.EventPortActive, "") {
		t.Errorf("node0: want PORT_ERR and PORT_ACTIVE; events: %v", res.Events["node0"])
	}
	a0, a1 := res.Layer1Of("A", "node0"), res.Layer1Of("A", "node1")
	mig0 := firstMigration(a0, pullAt)
	if mig0 == nil || mig0.Cause != "PORT_ERR" || mig0.At-pullAt > step || mig0.After.Primary.Port != 2 {
		t.Errorf("node0 QP A: want a proactive migration to port 2 at PORT_ERR (within %v of %v):\n%s", step, pullAt, formatL1(a0))
	}
	mig1 := firstMigration(a1, pullAt)
	if mig1 == nil || mig1.Cause != "PATH_MIG" || mig1.After.Primary.Port != 2 || mig1.At > pullAt+time.Millisecond {
		t.Errorf("node1 QP A: want it to follow with PATH_MIG to port 2 at once:\n%s", formatL1(a1))
	}
	lmc := fsm.PathRef{Port: 2, Bits: 1}
	for h, cs := range map[string][]Layer1Change{"node0": a0, "node1": a1} {
		if !hasL1(cs, pullAt, plugAt, func(st QPStatus) bool {
			return st.State == fsm.APMArmed && st.Primary == fsm.PathRef{Port: 2} && st.Alternate == lmc
		}) {
			t.Errorf("QP A on %s: not re-armed on the LMC path of port 2 after the pull:\n%s", h, formatL1(cs))
		}
	}
	// Traffic went on at once: the next WRs on the new path made the peer
	// follow and the responder's sequence NAKs resent what the cable took;
	// no RC timeout was needed, let alone the hardware's (1+retry_cnt).
	if res.PullRecovery <= 0 || res.PullRecovery > to || !strings.Contains(out, "HCA alone would wait") {
		t.Errorf("QP A recovered after %v across the pull, want at most one local ACK timeout (%v)", res.PullRecovery, to)
	}
	for _, p := range res.PausesOf("A", 0, plugAt) {
		t.Errorf("QP A paused %v..%v on %s before the plug", p.From, p.To, p.Host)
	}

	// Plug: the home path comes back as the alternate on both sides, and
	// node0 fails back after the hold-down.
	home := fsm.PathRef{Port: 1}
	for h, cs := range map[string][]Layer1Change{"node0": a0, "node1": a1} {
		if !hasL1(cs, plugAt, plugAt+l1Config.FailbackHold, func(st QPStatus) bool {
			return st.State == fsm.APMArmed && st.Primary.Port == 2 && st.Alternate == home
		}) {
			t.Errorf("QP A on %s: home path not armed as the alternate after the plug:\n%s", h, formatL1(cs))
		}
	}
	fb := firstMigration(a0, plugAt)
	if fb == nil || fb.Cause != "tick" || fb.After.Primary != home || fb.At < plugAt+l1Config.FailbackHold {
		t.Errorf("node0 QP A: want a failback to port 1 after the hold-down:\n%s", formatL1(a0))
	}
	if res.Managers["node0"].Failbacks < 1 {
		t.Errorf("node0 manager %+v: no failback", res.Managers["node0"])
	}

	// QP A never saw an error, nor bad data, and both sides end armed.
	for _, host := range []string{"node0", "node1"} {
		if res.HasEvent(host, verbs.EventPathMigErr, "A") {
			t.Errorf("%s: unexpected PATH_MIG_ERR on QP A", host)
		}
		a := mustEndpoint(t, res, "A", host)
		if a.SendErr != 0 || a.RecvErr != 0 || len(a.Errors) != 0 {
			t.Errorf("QP A on %s: error completions %d send / %d recv (%v), want none", host, a.SendErr, a.RecvErr, a.Errors)
		}
		if a.DataErrors != 0 || a.Verified == 0 || a.Verified != a.RecvOK {
			t.Errorf("QP A on %s: %d data errors, %d of %d notifications verified", host, a.DataErrors, a.Verified, a.RecvOK)
		}
		if a.State != verbs.QPSRTS || !a.L1Known || a.L1.State != fsm.APMArmed {
			t.Errorf("QP A on %s ended %v, layer 1 %+v; want RTS and armed", host, a.State, a.L1)
		}
	}

	// QP B, HCA death: node0 hands it over at DEVICE_FATAL; the error then
	// surfaces as plain verbs report it.
	b0, b1 := mustEndpoint(t, res, "B", "node0"), mustEndpoint(t, res, "B", "node1")
	if !res.HasEvent("node0", verbs.EventDeviceFatal, "") || res.HasEvent("node1", verbs.EventDeviceFatal, "") {
		t.Errorf("want DEVICE_FATAL on node0 only; events: %v / %v", res.Events["node0"], res.Events["node1"])
	}
	ho0 := handover(res, "node0", "B")
	if ho0 == nil || ho0.At != killAt || !strings.Contains(ho0.Reason, "DEVICE_FATAL") ||
		b0.L1.State != fsm.APMHandedOver || !strings.Contains(b0.L1.Reason, "DEVICE_FATAL") {
		t.Errorf("QP B on node0: handover %+v, layer 1 %+v; want handed over at %v for DEVICE_FATAL", ho0, b0.L1, killAt)
	}
	if !slices.Equal(b0.Errors, []verbs.WCStatus{verbs.WCWRFlushErr}) || b0.SendErr == 0 || b0.RecvErr == 0 {
		t.Errorf("QP B on node0: errors %v (%d send, %d recv), want only WR_FLUSH_ERR on both queues", b0.Errors, b0.SendErr, b0.RecvErr)
	}
	// The peer's QP B is armed, so its HCA migrates into the dead HCA after
	// (1+retry_cnt) timeouts, without PATH_MIG (the peer never answers);
	// the migrated path exhausts its retries too: PATH_MIG_ERR, then
	// RETRY_EXC_ERR, and layer 1 hands it over on PATH_MIG_ERR.
	if res.HasEvent("node1", verbs.EventPathMig, "B") {
		t.Errorf("node1: unexpected PATH_MIG on QP B; events: %v", res.Events["node1"])
	}
	var pme *EventRecord
	for _, ev := range res.Events["node1"] {
		if ev.Type == verbs.EventPathMigErr && ev.QP == "B" {
			pme = &ev
			break
		}
	}
	if want := killAt + 2*hwGiveUp(); pme == nil || pme.At < want || pme.At > want+time.Millisecond {
		t.Errorf("node1 QP B: PATH_MIG_ERR %+v, want one at about %v (two rounds of (1+retry_cnt) timeouts)", pme, want)
	}
	ho1 := handover(res, "node1", "B")
	if ho1 == nil || pme == nil || ho1.At != pme.At || !strings.Contains(ho1.Reason, "PATH_MIG_ERR") {
		t.Errorf("QP B on node1: handover %+v, want at PATH_MIG_ERR", ho1)
	}
	if !slices.Equal(b1.Errors, []verbs.WCStatus{verbs.WCRetryExcErr, verbs.WCWRFlushErr}) {
		t.Errorf("QP B on node1: errors %v, want RETRY_EXC_ERR then WR_FLUSH_ERR", b1.Errors)
	}
	if b0.State != verbs.QPSErr || b1.State != verbs.QPSErr || !b0.DeviceDead {
		t.Errorf("QP B ended %v (device dead %v) / %v, want ERR on both", b0.State, b0.DeviceDead, b1.State)
	}
	for _, b := range []EndpointResult{b0, b1} {
		if b.DataErrors != 0 {
			t.Errorf("QP B on %s: %d data errors", b.Host, b.DataErrors)
		}
		if b.Posted != b.SendOK+b.SendErr {
			t.Errorf("QP B on %s: %d posted, %d ok + %d err", b.Host, b.Posted, b.SendOK, b.SendErr)
		}
	}
	if len(res.Handovers) != 2 {
		t.Errorf("handovers %+v, want QP B on each node", res.Handovers)
	}

	for _, s := range []string{"PORT_ERR", "PORT_ACTIVE", "PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "RETRY_EXC_ERR",
		"WR_FLUSH_ERR", "layer 1: armed", "proactive", "failback", "handed to layer 2"} {
		if !strings.Contains(out, s) {
			t.Errorf("output does not mention %s", s)
		}
	}
	if n := strings.Count(out, "\n"); n > 70 {
		t.Errorf("timeline has %d lines, want it short:\n%s", n, out)
	}
}

// TestFailbackBringsABackHome: after the failback QP A runs on port 1 on
// both sides again, armed, and its traffic drains.
func TestFailbackBringsABackHome(t *testing.T) {
	res, _ := runDemo(t, 7)
	for _, b := range res.Bounced {
		if b.QP == "A" {
			// Layer 1 must wait for the peer to follow its own migration
			// before re-arming; re-arming at once made the sides swap
			// paths forever.
			t.Fatalf("QP A bounces between ports since %v on %s; layer 1: %d changes not printed",
				b.At, b.Host, res.Muted["A"])
		}
	}
	for _, host := range []string{"node0", "node1"} {
		a := mustEndpoint(t, res, "A", host)
		if a.Port != 1 || a.L1.Primary != a.L1.Home || a.L1.State != fsm.APMArmed {
			t.Errorf("QP A on %s ended on port %d, layer 1 %+v; want home (port 1) and armed", host, a.Port, a.L1)
		}
		if a.Posted != a.SendOK {
			t.Errorf("QP A on %s: %d posted, %d completed", host, a.Posted, a.SendOK)
		}
	}
	for _, p := range res.PausesOf("A", plugAt, endAt) {
		t.Errorf("QP A paused %v..%v on %s after the plug", p.From, p.To, p.Host)
	}
}

// QPStatus is the layer-1 status type, for predicates.
type QPStatus = apm.QPStatus

// firstMigration returns the first change at or after from that counts a
// migration.
func firstMigration(cs []Layer1Change, from time.Duration) *Layer1Change {
	for i, c := range cs {
		if c.At >= from && !c.New && c.After.Migrations > c.Before.Migrations {
			return &cs[i]
		}
	}
	return nil
}

// hasL1 reports whether a change in [from, to) left a status matching ok.
func hasL1(cs []Layer1Change, from, to time.Duration, ok func(QPStatus) bool) bool {
	for _, c := range cs {
		if c.At >= from && c.At < to && ok(c.After) {
			return true
		}
	}
	return false
}

func handover(r Result, host, qp string) *HandoverRecord {
	for i, h := range r.Handovers {
		if h.Host == host && h.QP == qp {
			return &r.Handovers[i]
		}
	}
	return nil
}

func TestDeterministic(t *testing.T) {
	_, a := runDemo(t, 42)
	_, b := runDemo(t, 42)
	if a != b {
		t.Fatalf("same seed, different output:\n%s\n---\n%s", a, b)
	}
}

func TestVerboseTraces(t *testing.T) {
	var quiet, loud bytes.Buffer
	if err := Run(&quiet, Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := Run(&loud, Options{Seed: 1, Verbose: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(loud.String(), " trace ") || strings.Contains(quiet.String(), " trace ") {
		t.Errorf("trace records: verbose %v, quiet %v", strings.Contains(loud.String(), " trace "), strings.Contains(quiet.String(), " trace "))
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteErrorReturned(t *testing.T) {
	if err := Run(failWriter{}, Options{Seed: 1}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Run to a failing writer: %v", err)
	}
}

func runRoCE(t *testing.T, seed uint64) (Result, string) {
	t.Helper()
	var buf bytes.Buffer
	res, err := run(&buf, Options{Seed: seed, LinkLayer: verbs.LinkLayerEthernet})
	if err != nil {
		t.Fatalf("run (RoCE): %v\n%s", err, buf.String())
	}
	return res, buf.String()
}

// TestRoCE: on RoCE layer 1 can do nothing. Every QP is unsupported, with
// the reason; the application's modifies went through as written; the
// cable pull reaches the application as plain verbs report it.
func TestRoCE(t *testing.T) {
	res, out := runRoCE(t, 7)
	to := verbs.TimeoutDuration(rcTimeout)

	for _, r := range res.Endpoints {
		if !strings.HasPrefix(r.Device, "rxe") {
			t.Errorf("QP %s on %s/%s: want a RoCE device rxe*", r.QP, r.Host, r.Device)
		}
		if !r.L1Known || r.L1.State != fsm.APMUnsupported || !strings.Contains(r.L1.Reason, "Ethernet") ||
			!strings.Contains(r.L1.Reason, "InfiniBand") {
			t.Errorf("QP %s on %s: layer 1 %+v (known %v), want unsupported because Ethernet is not InfiniBand",
				r.QP, r.Host, r.L1, r.L1Known)
		}
		// ModifyQP added neither an alternate path nor REARM: the QP is as
		// a fresh one after the application's own three modifies.
		if r.ConnectMig != verbs.MigMigrated || r.ConnectAltPort != 0 {
			t.Errorf("QP %s on %s after connect: path_mig_state %v, alternate port %d; want MIGRATED and none",
				r.QP, r.Host, r.ConnectMig, r.ConnectAltPort)
		}
		if r.DataErrors != 0 || r.Verified != r.RecvOK {
			t.Errorf("QP %s on %s: %d data errors, %d of %d notifications verified", r.QP, r.Host, r.DataErrors, r.Verified, r.RecvOK)
		}
		if r.Posted != r.SendOK+r.SendErr {
			t.Errorf("QP %s on %s: %d posted, %d ok + %d err", r.QP, r.Host, r.Posted, r.SendOK, r.SendErr)
		}
	}
	for _, h := range []string{"node0", "node1"} {
		st := res.Managers[h]
		if st.Registered != 2 || st.Loads != 0 || st.ModifyFallbacks != 0 || st.Armed != 0 || st.Migrations != 0 ||
			st.HWMigrations != 0 || st.Handovers != 0 {
			t.Errorf("%s manager stats %+v: want 2 QPs registered and nothing done", h, st)
		}
		for _, qp := range []string{"A", "B"} {
			for _, c := range res.Layer1Of(qp, h) {
				if c.After.State != fsm.APMUnsupported {
					t.Errorf("QP %s on %s: layer-1 change to %v at %v; want unsupported throughout", qp, h, c.After.State, c.At)
				}
			}
		}
		for _, ev := range []verbs.EventType{verbs.EventPathMig, verbs.EventPathMigErr} {
			if res.HasEvent(h, ev, "") {
				t.Errorf("%s: unexpected %v on RoCE; events %v", h, ev, res.Events[h])
			}
		}
	}
	if len(res.Handovers) != 0 || res.Stats.Migrations != 0 {
		t.Errorf("handovers %+v, %d path migrations; want none on RoCE", res.Handovers, res.Stats.Migrations)
	}
	// Printed once per QP, both sides on one line.
	for _, qp := range []string{"A", "B"} {
		if n := strings.Count(out, " QP "+qp+" layer 1: unsupported: "); n != 1 {
			t.Errorf("QP %s: %d unsupported lines, want 1:\n%s", qp, n, out)
		}
	}
	if n := strings.Count(out, "layer 2 (cross-NIC) is not built yet"); n != 1 {
		t.Errorf("%d lines say layer 2 is not built, want 1:\n%s", n, out)
	}

	// The pull: PORT_ERR on node0 and nothing layer 1 can do. Both sides of
	// QP A stall and retry on the local ACK timer (SIMULATOR.md: traffic on
	// a down port is lost; the requester resends everything unacknowledged
	// up to retry_cnt times). The cable is ACTIVE again at plugAt + 2 ms,
	// before the last retry at pullAt + ~(1+retry_cnt-1) timeouts, so that
	// retry gets through: a long stall, but no error completion, and the
	// same QP carries on. Had the cable stayed out, RETRY_EXC_ERR would come
	// after (1+retry_cnt) timeouts, as it does for QP B below.
	if !res.HasEvent("node0", verbs.EventPortErr, "") || !res.HasEvent("node0", verbs.EventPortActive, "") {
		t.Errorf("node0: want PORT_ERR and PORT_ACTIVE; events %v", res.Events["node0"])
	}
	lastRetry := pullAt + rcRetryCnt*to
	if plugAt+2*time.Millisecond > lastRetry {
		t.Fatalf("script: the plug (%v) comes after the last retry (%v); update this test", plugAt, lastRetry)
	}
	if res.PullRecovery < lastRetry-pullAt || res.PullRecovery > lastRetry-pullAt+2*time.Millisecond {
		t.Errorf("QP A stalled %v across the pull, want about %v (until its last retry)", res.PullRecovery, lastRetry-pullAt)
	}
	for _, host := range []string{"node0", "node1"} {
		a := mustEndpoint(t, res, "A", host)
		if a.SendErr != 0 || a.RecvErr != 0 || len(a.Errors) != 0 || a.State != verbs.QPSRTS || a.Posted != a.SendOK {
			t.Errorf("QP A on %s: %d/%d error completions %v, state %v, %d posted, %d ok; want no error, RTS, all done",
				host, a.SendErr, a.RecvErr, a.Errors, a.State, a.Posted, a.SendOK)
		}
	}
	if ps := res.PausesOf("A", pullAt-time.Millisecond, plugAt); len(ps) != 2 {
		t.Errorf("QP A: pauses %+v after the pull, want one per side", ps)
	}
	for i := 1; i <= rcRetryCnt; i++ {
		if n := strings.Count(out, fmt.Sprintf("/rxe0 (sim retry) qp 0x100 local ACK timeout, retry %d/%d", i, rcRetryCnt)); n != 2 {
			t.Errorf("QP A: retry %d/%d printed %d times, want once per side", i, rcRetryCnt, n)
		}
	}

	// The NIC death: DEVICE_FATAL and flushes on node0; the peer sees
	// silence, retries and fails the oldest WR with RETRY_EXC_ERR after
	// (1+retry_cnt) timeouts, the rest flushed. Nothing migrates.
	b0, b1 := mustEndpoint(t, res, "B", "node0"), mustEndpoint(t, res, "B", "node1")
	if !res.HasEvent("node0", verbs.EventDeviceFatal, "") {
		t.Errorf("node0: no DEVICE_FATAL; events %v", res.Events["node0"])
	}
	if !slices.Equal(b0.Errors, []verbs.WCStatus{verbs.WCWRFlushErr}) || !b0.DeviceDead || b0.State != verbs.QPSErr {
		t.Errorf("QP B on node0: errors %v, dead %v, state %v; want WR_FLUSH_ERR on a dead device", b0.Errors, b0.DeviceDead, b0.State)
	}
	if !slices.Equal(b1.Errors, []verbs.WCStatus{verbs.WCRetryExcErr, verbs.WCWRFlushErr}) || b1.State != verbs.QPSErr {
		t.Errorf("QP B on node1: errors %v, state %v; want RETRY_EXC_ERR then WR_FLUSH_ERR, ERR", b1.Errors, b1.State)
	}
	if ps := res.PausesOf("B", killAt-time.Millisecond, endAt); len(ps) != 0 {
		t.Errorf("QP B: pauses %+v after the kill, want none (no completion ends them)", ps)
	}
	// The timeline shows it when the application polls, within a step.
	var at float64
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "completed with RETRY_EXC_ERR") {
			if _, err := fmt.Sscanf(line, "%f ms  node1/rxe1 QP B:", &at); err != nil {
				t.Errorf("RETRY_EXC_ERR line %q: %v", line, err)
			}
		}
	}
	if from := killAt + hwGiveUp(); at < ms64(from) || at > ms64(from+step) {
		t.Errorf("node1 QP B: RETRY_EXC_ERR shown at %.3f ms, want within a step after %v + (1+retry_cnt) x timeout (%v)", at, killAt, from)
	}

	for _, s := range []string{"PORT_ERR", "PORT_ACTIVE", "DEVICE_FATAL", "RETRY_EXC_ERR", "WR_FLUSH_ERR", "unsupported"} {
		if !strings.Contains(out, s) {
			t.Errorf("output does not mention %s", s)
		}
	}
	for _, s := range []string{"mlx5", "PATH_MIG", "armed", "port 2", "handed to layer 2"} {
		if strings.Contains(out, s) {
			t.Errorf("RoCE output mentions %q:\n%s", s, out)
		}
	}
	if n := strings.Count(out, "\n"); n > 70 {
		t.Errorf("timeline has %d lines, want it short:\n%s", n, out)
	}
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func TestRoCEDeterministic(t *testing.T) {
	_, a := runRoCE(t, 42)
	_, b := runRoCE(t, 42)
	if a != b {
		t.Fatalf("same seed, different output:\n%s\n---\n%s", a, b)
	}
}

// TestInfiniBandIsTheDefault: asking for InfiniBand changes nothing.
func TestInfiniBandIsTheDefault(t *testing.T) {
	_, def := runDemo(t, 5)
	var ib bytes.Buffer
	if err := Run(&ib, Options{Seed: 5, LinkLayer: verbs.LinkLayerInfiniBand}); err != nil {
		t.Fatal(err)
	}
	if ib.String() != def {
		t.Fatalf("LinkLayerInfiniBand and the default differ:\n%s\n---\n%s", ib.String(), def)
	}
}

func TestParseLinkLayer(t *testing.T) {
	for name, want := range map[string]verbs.LinkLayer{"ib": verbs.LinkLayerInfiniBand, "roce": verbs.LinkLayerEthernet} {
		if got, err := ParseLinkLayer(name); err != nil || got != want {
			t.Errorf("ParseLinkLayer(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	for _, name := range []string{"", "IB", "eth", "iwarp", "roce2"} {
		_, err := ParseLinkLayer(name)
		if err == nil || !strings.Contains(err.Error(), "ib") || !strings.Contains(err.Error(), "roce") {
			t.Errorf("ParseLinkLayer(%q): %v; want an error naming ib and roce", name, err)
		}
	}
	if err := Run(&bytes.Buffer{}, Options{Seed: 1, LinkLayer: 9}); err == nil {
		t.Error("Run accepted link layer 9")
	}
}
