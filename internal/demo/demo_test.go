package demo

import (
	"bytes"
	"errors"
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
