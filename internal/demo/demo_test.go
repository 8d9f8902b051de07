package demo

import (
	"bytes"
	"errors"
	"fmt"
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
	// own modifies, on the other port. QP B is registered a second time
	// after layer 2 switched it back (see below).
	for _, h := range []string{"node0", "node1"} {
		st := res.Managers[h]
		if st.Registered != 3 || st.ModifyFallbacks != 0 {
			t.Errorf("%s manager stats %+v: want 2 QPs armed through ModifyQP, and QP B registered again", h, st)
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
	// On a device that takes no new alternate while ARMED (the default,
	// strict profile) the QP first hops to its armed LMC alternate, so
	// that home can be loaded with REARM; the failback is the migration
	// that lands home.
	var fb *Layer1Change
	for from := plugAt; fb == nil; {
		m := firstMigration(a0, from)
		if m == nil {
			break
		}
		if m.After.Primary == home {
			fb = m
		}
		from = m.At + 1
	}
	if fb == nil || fb.Cause != "tick" || fb.At < plugAt+l1Config.FailbackHold {
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

	// QP B, both cables of its default HCA pulled: layer 1 migrates at the
	// first PORT_ERR, then has no path left at the second and hands the
	// QP over; layer 2 acts on that hand-over, never on PORT_ERR itself
	// (docs/CROSSNIC.md, "With layer 1").
	b0, b1 := mustEndpoint(t, res, "B", "node0"), mustEndpoint(t, res, "B", "node1")
	ho := handover(res, "node0", "B", cutAt)
	if ho == nil || !strings.Contains(ho.Reason, "primary port down and no alternate") {
		t.Errorf("QP B on node0: handover %+v; want one at %v, primary port down and no alternate (handovers %+v)\n%s",
			ho, cutAt, res.Handovers, formatL1(res.Layer1Of("B", "node0")))
	}
	for _, c := range res.Layer2 {
		if c.Cause == verbs.EventPortErr.String() {
			t.Errorf("%s QP %s: layer 2 acted on PORT_ERR at %v although layer 1 protects the QP", c.Host, c.QP, c.At)
		}
	}
	// After the switch back layer 2 has reset the QP on both sides (the
	// alternate path is gone): layer 1 protects it anew, armed on port 2
	// before the HCA death.
	for _, host := range []string{"node0", "node1"} {
		b := mustEndpoint(t, res, "B", host)
		cs := res.Layer1Of("B", host)
		var re *Layer1Change
		for i, c := range cs {
			if c.Cause == "re-register" {
				re = &cs[i]
			}
		}
		if re == nil || re.At != b.HomeAt || re.After.State != fsm.APMRearming {
			t.Errorf("QP B on %s: want layer 1 to register it again when layer 2 came home (%v), rearming:\n%s",
				host, b.HomeAt, formatL1(cs))
			continue
		}
		if !hasL1(cs, re.At, killAt, func(st QPStatus) bool {
			return st.State == fsm.APMArmed && st.Primary == fsm.PathRef{Port: 1} && st.Alternate == fsm.PathRef{Port: 2}
		}) {
			t.Errorf("QP B on %s: not armed again (port 1, alternate port 2) after the switch back:\n%s", host, formatL1(cs))
		}
	}

	// QP B, HCA death: node0 hands it over to layer 2 at DEVICE_FATAL,
	// which moves it to the backup QPs on mlx5_0 with node1 once more; the
	// application sees nothing of it.
	if !res.HasEvent("node0", verbs.EventDeviceFatal, "") || res.HasEvent("node1", verbs.EventDeviceFatal, "") {
		t.Errorf("want DEVICE_FATAL on node0 only; events: %v / %v", res.Events["node0"], res.Events["node1"])
	}
	ho0 := handover(res, "node0", "B", killAt)
	if ho0 == nil || !strings.Contains(ho0.Reason, "DEVICE_FATAL") ||
		b0.L1.State != fsm.APMHandedOver || !strings.Contains(b0.L1.Reason, "DEVICE_FATAL") {
		t.Errorf("QP B on node0: handover %+v, layer 1 %+v; want handed over at %v for DEVICE_FATAL", ho0, b0.L1, killAt)
	}
	if len(res.Handovers) != 2 {
		t.Errorf("handovers %+v, want QP B on node0 twice (node1's side falls back on node0's notification)", res.Handovers)
	}
	// node1's side never reaches the HCA's retries: no PATH_MIG, no
	// PATH_MIG_ERR, no event at all on its QP B.
	for _, ev := range res.Events["node1"] {
		if ev.QP == "B" {
			t.Errorf("node1: unexpected %v on QP B at %v", ev.Type, ev.At)
		}
	}
	// node0's default QP died with its HCA; node1's was reset by layer 2,
	// which probes it (in vain: its peer is dead).
	if b0.State != verbs.QPSErr || !b0.DeviceDead || b1.State != verbs.QPSRTS || b1.L2Stats.Probes < 2 {
		t.Errorf("QP B default QPs ended %v (device dead %v) / %v after %d probes; want ERR (dead), and RTS reset and probed by layer 2",
			b0.State, b0.DeviceDead, b1.State, b1.L2Stats.Probes)
	}
	checkLayer2(t, res, out, "mlx5_0", "layer 1 handed over: primary port down and no alternate", "layer 1 handed over: DEVICE_FATAL")

	for _, s := range []string{"PORT_ERR", "PORT_ACTIVE", "PATH_MIG", "DEVICE_FATAL", "layer 1: armed", "proactive",
		"failback", "handed to layer 2 (cross-NIC)", "QP B layer 1: registered again"} {
		if !strings.Contains(out, s) {
			t.Errorf("output does not mention %s", s)
		}
	}
	if n := strings.Count(out, "\n"); n > maxLines {
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

// handover returns the hand-over of qp on host at instant at, if any.
func handover(r Result, host, qp string, at time.Duration) *HandoverRecord {
	for i, h := range r.Handovers {
		if h.Host == host && h.QP == qp && h.At == at {
			return &r.Handovers[i]
		}
	}
	return nil
}

// maxLines bounds the length of the whole output.
const maxLines = 95

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
// cable pull reaches the application of QP A (which layer 2 does not
// protect) as plain verbs report it; layer 2 hides the NIC death from
// QP B's.
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
	if n := strings.Count(out, "layer 2 does not protect QP A in this script: plain verbs from here"); n != 1 {
		t.Errorf("%d lines say QP A is left to plain verbs, want 1:\n%s", n, out)
	}

	// The pull: PORT_ERR on node0 and nothing layer 1 can do. Both sides of
	// QP A stall and retry on the local ACK timer (SIMULATOR.md: traffic on
	// a down port is lost; the requester resends everything unacknowledged
	// up to retry_cnt times). The cable is ACTIVE again at plugAt + 2 ms,
	// before the last retry at pullAt + ~(1+retry_cnt-1) timeouts, so that
	// retry gets through: a long stall, but no error completion, and the
	// same QP carries on. Had the cable stayed out, RETRY_EXC_ERR would come
	// after (1+retry_cnt) timeouts, as the timeline says.
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

	// The NIC death: DEVICE_FATAL on node0, nothing layer 1 can do; layer
	// 2, QP B's only protection, moves it to the backup QPs on rxe0 and
	// the application sees nothing of it.
	b0, b1 := mustEndpoint(t, res, "B", "node0"), mustEndpoint(t, res, "B", "node1")
	if !res.HasEvent("node0", verbs.EventDeviceFatal, "") {
		t.Errorf("node0: no DEVICE_FATAL; events %v", res.Events["node0"])
	}
	if !b0.DeviceDead || b0.State != verbs.QPSErr || b1.State != verbs.QPSRTS || b1.L2Stats.Probes < 2 {
		t.Errorf("QP B default QPs: dead %v, states %v / %v after %d probes; want a dead device and ERR, and RTS reset and probed by layer 2",
			b0.DeviceDead, b0.State, b1.State, b1.L2Stats.Probes)
	}
	// The cable of QP B's default NIC: layer 1 is unsupported, so PORT_ERR
	// goes straight to layer 2.
	checkLayer2(t, res, out, "rxe0", "PORT_ERR", "DEVICE_FATAL")

	for _, s := range []string{"PORT_ERR", "PORT_ACTIVE", "DEVICE_FATAL", "unsupported"} {
		if !strings.Contains(out, s) {
			t.Errorf("output does not mention %s", s)
		}
	}
	for _, s := range []string{"mlx5", "PATH_MIG", "armed", "port 2", "handed to layer 2"} {
		if strings.Contains(out, s) {
			t.Errorf("RoCE output mentions %q:\n%s", s, out)
		}
	}
	if n := strings.Count(out, "\n"); n > maxLines {
		t.Errorf("timeline has %d lines, want it short:\n%s", n, out)
	}
}

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

// checkLayer2 asserts what layer 2 must do with QP B across the script,
// on both hosts. The cables of its default HCA (NIC) on node0 are pulled
// at cutAt: node0 detects it (why: cutCause), both sides fall back after
// one handshake. They are plugged back at recableAt: each side's probe is
// answered, it fences, switches its sends back, moves its receives home
// on the peer's switch-back notification and purges its backup; traffic
// then runs on the default HCAs again until the HCA death at killAt,
// which node0 detects (why: killCause) and both sides fall back again.
// Throughout, the application on both sides sees no error, no bad data,
// every WR completed exactly once in order, every notification verified,
// and no pause over a millisecond.
func checkLayer2(t *testing.T, res Result, out, bak, cutCause, killCause string) {
	t.Helper()
	rounds := int(quiesceAt/step) - 1 // one round per step while posting
	for _, host := range []string{"node0", "node1"} {
		b, peer := mustEndpoint(t, res, "B", host), mustEndpoint(t, res, "B", map[string]string{"node0": "node1", "node1": "node0"}[host])
		if !b.Protected || b.Backup != bak {
			t.Fatalf("QP B on %s: protected %v, backup %q; want protected with a backup on %s", host, b.Protected, b.Backup, bak)
		}
		if b.SendErr != 0 || b.RecvErr != 0 || len(b.Errors) != 0 {
			t.Fatalf("QP B on %s: an error reached the application: %d send / %d recv error completions %v", host, b.SendErr, b.RecvErr, b.Errors)
		}
		if b.DataErrors != 0 {
			t.Fatalf("QP B on %s: %d data errors", host, b.DataErrors)
		}
		if b.WrongQPN != 0 {
			t.Fatalf("QP B on %s: %d completions named another QP than %#x", host, b.WrongQPN, b.QPN)
		}
		if b.SendOrderErrors != 0 || b.Posted != b.SendOK {
			t.Fatalf("QP B on %s: %d posted, %d completed, %d out of turn; want every WR completed exactly once, in order",
				host, b.Posted, b.SendOK, b.SendOrderErrors)
		}
		if b.Posted != 2*rounds {
			t.Errorf("QP B on %s: %d WRs posted, want %d (a round every step: the application never waited)", host, b.Posted, 2*rounds)
		}
		if b.Verified != peer.Posted/2 || b.RecvOK != b.Verified {
			t.Fatalf("QP B on %s: %d notifications verified, %d received, %d rounds posted by %s",
				host, b.Verified, b.RecvOK, peer.Posted/2, peer.Host)
		}
		if b.L2SQ != fsm.SQFallback || b.L2RQ != fsm.RQFallback || b.L2Reason != "" {
			t.Errorf("QP B on %s: layer 2 ended %v/%v (%q), want fallback/fallback", host, b.L2SQ, b.L2RQ, b.L2Reason)
		}
		if st := b.L2Stats; st.RecvsMoved == 0 || st.HiddenFlushes == 0 || b.Replayed == 0 {
			t.Errorf("QP B on %s: layer-2 stats %+v, replayed %d; want receives moved, flushes hidden, WRs replayed", host, st, b.Replayed)
		}
		// Every completion the application got came from one leg's CQ, or
		// was synthesized for a WR the peer's counter proved delivered.
		if b.DefaultWCs+b.BackupWCs+b.L2Stats.Synthesized != b.SendOK+b.RecvOK {
			t.Errorf("QP B on %s: %d completions through the default leg, %d through the backup, %d synthesized; the application got %d",
				host, b.DefaultWCs, b.BackupWCs, b.L2Stats.Synthesized, b.SendOK+b.RecvOK)
		}
		// Switched back once, after the cables came back, and purged the
		// backup so that the second failover's handshake finds it clean.
		if st := b.L2Stats; st.Probes < 1 || st.SwitchBacks != 1 || st.BackupResets != 1 || st.SwitchPause <= 0 ||
			st.SwitchPause >= time.Millisecond {
			t.Errorf("QP B on %s: layer-2 stats %+v; want a probe, one switch back holding WRs under 1 ms, one backup purge", host, st)
		}
		// Between the switch back and the HCA death the traffic ran on the
		// default HCA, none through the backup.
		if b.HomeAt <= recableAt || b.HomeAt >= killAt || b.HomeDefaultWCs < 1000 || b.HomeBackupWCs != 0 {
			t.Errorf("QP B on %s: home at %v, then %d completions through the default leg and %d through the backup before the death; "+
				"want home in (%v, %v), traffic on the default leg only", host, b.HomeAt, b.HomeDefaultWCs, b.HomeBackupWCs, recableAt, killAt)
		}
		if len(b.Failovers) != 2 || b.Failovers[0].Fault != cutAt || b.Failovers[1].Fault != killAt {
			t.Fatalf("QP B on %s: failovers %+v, want one at %v and one at %v", host, b.Failovers, cutAt, killAt)
		}
		for _, f := range b.Failovers {
			t.Logf("QP B on %s: pause %v after the fault at %v (first good completion through %s at %v), %d replayed",
				host, f.Resumed-f.Fault, f.Fault, bak, f.Resumed, f.Replayed)
			if f.Resumed <= f.Fault || f.Resumed-f.Fault >= time.Millisecond || f.Replayed == 0 {
				t.Errorf("QP B on %s: resumed at %v after the fault at %v, %d replayed; want under 1 ms, WRs replayed", host, f.Resumed, f.Fault, f.Replayed)
			}
		}
		if b.Resumed != b.Failovers[1].Resumed || b.Pause != b.Resumed-killAt {
			t.Errorf("QP B on %s: resumed %v, pause %v; want the HCA death's", host, b.Resumed, b.Pause)
		}
	}
	if ps := res.PausesOf("B", 0, endAt); len(ps) != 0 {
		t.Errorf("QP B: pauses %+v, want none", ps)
	}
	c0, c1 := res.Layer2Of("B", "node0"), res.Layer2Of("B", "node1")
	for _, c := range append(append([]Layer2Change(nil), c0...), c1...) {
		if c.SQ == fsm.SQSurfaced {
			t.Fatalf("%s QP B layer 2 surfaced at %v:\n%s", c.Host, c.At, formatL2([]Layer2Change{c}))
		}
	}

	// Each fault: node0 faults (Default -> AwaitAck), then gets node1's
	// ack; node1 gets node0's notification and falls back at once. One
	// control message each way, no more.
	for _, f := range []struct {
		at    time.Duration
		cause string
	}{{cutAt, cutCause}, {killAt, killCause}} {
		f0, f1 := changesFrom(c0, f.at), changesFrom(c1, f.at)
		if len(f0) < 2 || f0[0].At != f.at || f0[0].SQBefore != fsm.SQDefault || f0[0].SQ != fsm.SQAwaitAck ||
			f0[0].RQ != fsm.RQFallback || !strings.HasPrefix(f0[0].Cause, f.cause) || len(f0[0].Msgs) != 0 ||
			f0[0].After.Faults != f0[0].Before.Faults+1 ||
			f0[1].SQBefore != fsm.SQAwaitAck || f0[1].SQ != fsm.SQFallback || len(f0[1].Msgs) != 1 || !f0[1].Msgs[0].Ack {
			t.Fatalf("node0 QP B layer 2: want a fault for %q at %v, then an ack and fallback:\n%s", f.cause, f.at, formatL2(c0))
		}
		if len(f1) < 1 || f1[0].SQBefore != fsm.SQDefault || f1[0].SQ != fsm.SQFallback || f1[0].RQ != fsm.RQFallback ||
			len(f1[0].Msgs) != 1 || f1[0].Msgs[0].Ack || f1[0].Msgs[0].Switch || f1[0].After.Faults != 0 {
			t.Fatalf("node1 QP B layer 2: want a fallback on node0's notification after %v:\n%s", f.at, formatL2(c1))
		}
		if f1[0].At < f.at || f1[0].At-f.at > 2*step || f0[1].At < f1[0].At || f0[1].At-f1[0].At > 2*step {
			t.Errorf("handshake after %v: notification handled at %v, ack at %v; want each within two steps", f.at, f1[0].At, f0[1].At)
		}
		// The receive counters: each side had received every notification
		// the other posted before the fault, at most.
		for _, c := range []Layer2Change{f0[1], f1[0]} {
			if m := c.Msgs[0]; m.Counter == 0 || m.Counter > uint64(f.at/step) {
				t.Errorf("%s: %s with receive counter %d, want 1..%d", c.Host, m.kind(), m.Counter, f.at/step)
			}
		}
	}
	// The switch back, on each side: the probe answered (fallback to a
	// switch-back step: wait-signaled, or further within one poll when
	// nothing is outstanding on the backup, as for the follower, which
	// switches when the leader's notification arrives), then home with the
	// peer's switch-back notification on the default QP, all between the
	// plug and the HCA death.
	for _, cs := range [][]Layer2Change{c0, c1} {
		probe, home, notified := false, false, false
		for _, c := range changesFrom(cs, recableAt) {
			if c.At >= killAt {
				break
			}
			probe = probe || c.SQBefore == fsm.SQFallback && (c.SQ == fsm.SQWaitSignaled || c.SQ == fsm.SQWaitDrained ||
				c.SQ == fsm.SQWaitNotify || c.SQ == fsm.SQDefault)
			home = home || c.SQ == fsm.SQDefault && c.RQ == fsm.RQDefault
			for _, m := range c.Msgs {
				notified = notified || m.Switch
			}
		}
		if !probe || !home || !notified {
			t.Errorf("QP B layer 2: probe ok %v, home %v, peer's switch-back notification %v; want all between %v and %v:\n%s",
				probe, home, notified, recableAt, killAt, formatL2(cs))
		}
	}
	for _, s := range []string{"layer 2: fault (" + cutCause, "layer 2: fault (" + killCause, "'s notification on", "'s ack (its receive counter",
		"completing again on both sides, through", "probe 1 (posted at", "fence: next signaled WR to", "receives moved home",
		"backup QP purged -> default/default", "QP B: back home on both sides", "layer 2: switching back enabled"} {
		if !strings.Contains(out, s) {
			t.Errorf("output does not mention %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, " completed with ") || strings.Contains(out, "WR_FLUSH_ERR") {
		t.Errorf("an error completion is in the timeline:\n%s", out)
	}
}

// changesFrom returns the changes at or after at.
func changesFrom(cs []Layer2Change, at time.Duration) []Layer2Change {
	for i, c := range cs {
		if c.At >= at {
			return cs[i:]
		}
	}
	return nil
}

// formatL2 renders layer-2 changes for error messages.
func formatL2(cs []Layer2Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s %s/%s QP %s [%s]: %v/%v -> %v/%v, %+v -> %+v, messages %+v\n", ms(c.At), c.Host, c.Device, c.QP,
			c.Cause, c.SQBefore, c.RQBefore, c.SQ, c.RQ, c.Before, c.After, c.Msgs)
	}
	return b.String()
}
