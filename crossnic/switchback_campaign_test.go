package crossnic_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

var (
	switchRuns  = flag.Int("crossnic.switchruns", 300, "flap schedules in TestSwitchBackCampaign")
	switchSeed  = flag.Uint64("crossnic.switchseed", 0, "run only this flap schedule")
	switchFlaps = flag.Int("crossnic.switchflaps", 5, "most flaps in a TestSwitchBackCampaign schedule")
	mailboxes   = flag.String("crossnic.mailbox", "mixed", "mailboxes in the cross-NIC campaign's schedules: mixed (one schedule in four without, and without switch back), on, or off")
)

// portUp is the PathUp of a node: its default port is ACTIVE (the shim
// asks its device the same way).
func portUp(n *node) func() bool {
	return func() bool {
		pa, err := n.def.ctx.QueryPort(1)
		return err == nil && pa.State == verbs.PortActive
	}
}

// campaignCounts are what the switch-back campaign counts across its
// schedules.
type campaignCounts struct {
	stale, mailbox *atomic.Int64
	paired         *atomic.Int64 // nil: not counted
	flaps          *atomic.Int64 // nil: not counted
}

// flapSchedule runs one seeded schedule of link flaps with recovery on
// both nodes and checks that the connection ends home on both sides
// with every round delivered once, in order, and no error surfaced: a
// flap never needs to reach the application, however the two ends'
// switch-back steps interleave with it and with each other.
//
// The schedules vary what the lab varies: which end's cable is pulled
// (or both), for how long, up to flaps-1 more flaps during the switch
// back (a port that flaps again and again), one end
// polling lazily, the workload (one-sided or two-sided, one or both
// directions), and the provider's retransmission: the IB spec's retry
// count, or soft-RoCE's, which retransmits without end at retry_cnt 7;
// what the cross-NIC campaign varies in the traffic (drawTraffic); and a
// request held in the fabric past a flap (drawHold): no stale request
// may have an effect (noStaleEffect).
// The seeds take the simulator's profiles in turn (campaignProfile).
// Both ends have mailboxes (a switch back needs them). It counts into n.
// flaps is at most 2 for the pinned schedules, whose draws stay what they
// were when they were found.
func flapSchedule(t testing.TB, seed uint64, flaps int, n *campaignCounts) (string, error) {
	stale := n.stale
	rng := rand.New(rand.NewPCG(seed, 11))
	endless := rng.IntN(2) == 0
	retry := uint8(3)
	if endless {
		retry = 7
	}
	dir := crossnic.NewMemDirectory()
	profile := campaignProfile(seed)
	w := newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: seed, EndlessRetry7: endless, Profile: profile}, retry: retry})
	defer func() {
		for _, nd := range w.n {
			if n.mailbox != nil {
				n.mailbox.Add(int64(nd.conn.Stats().MailboxHandshakes))
			}
			if n.paired != nil {
				n.paired.Add(int64(nd.conn.Stats().ResetsPaired))
			}
		}
	}()
	probeTO := 60 * time.Millisecond
	if rng.IntN(3) == 0 {
		// a probe timeout as short as the peer's switch-back steps: the
		// two ends' resets and probes cross (the lab's 1 s against TCG's
		// slow steps)
		probeTO = time.Duration(1+rng.IntN(8)) * time.Millisecond
	}
	for _, n := range w.n {
		// The lab's timeouts, scaled to the simulator's 4 ms local ACK
		// timeout (the lab: 67 ms, probe 1 s, notification 5 s).
		must(t, n.conn.EnableRecovery(crossnic.Recovery{Clock: w.f, ProbeInterval: 2 * time.Millisecond,
			ProbeTimeout: probeTO, HandshakeTimeout: 300 * time.Millisecond, PathUp: portUp(n)}))
	}
	dirs := [][]int{{0}, {1}, {0, 1}}[rng.IntN(3)]
	w.sendRx = [2]bool{rng.IntN(2) == 0, rng.IntN(2) == 0}
	if rng.IntN(3) == 0 {
		w.lazy[rng.IntN(2)] = 2 + rng.IntN(30)
	}
	desc := fmt.Sprintf("profile %s endless %v probe timeout %v dirs %v sendRx %v lazy %v", profile, endless, probeTO, dirs, w.sendRx, w.lazy)
	twice := rng.IntN(2) == 0 // a second flap follows
	desc += drawTraffic(t, rand.New(rand.NewPCG(seed, 12)), w)
	ports := func(k int) []*sim.Port {
		switch k {
		case 0, 1:
			return []*sim.Port{w.n[k].hca.Port(1)}
		}
		return []*sim.Port{w.n[0].hca.Port(1), w.n[1].hca.Port(1)}
	}
	flap := func(k int, down time.Duration) {
		for _, p := range ports(k) {
			must(t, w.f.SetLink(p, false))
		}
		w.run(down, dirs...)
		for _, p := range ports(k) {
			must(t, w.f.SetLink(p, true))
		}
	}
	w.run(time.Duration(50+rng.IntN(400))*time.Microsecond, dirs...)
	k, down := rng.IntN(3), time.Duration(1+rng.IntN(20))*time.Millisecond
	desc += fmt.Sprintf(" flap %d for %v", k, down)
	t.Logf("schedule %d: %s", seed, desc) // printed if the checker fails the test on the way
	flap(k, down)
	holds := rand.New(rand.NewPCG(seed, 13))
	desc += drawHold(t, holds, w)
	more := 0
	if twice {
		more = 1
		if flaps > 2 {
			more += rand.New(rand.NewPCG(seed, 14)).IntN(flaps - 1)
		}
	}
	again := rng // the second flap's draws are the pinned schedules' ones
	for i := 0; i < more; i++ {
		// Another flap while the ends switch back: after the port is
		// ACTIVE again (2 ms), during probes, fences and notifications.
		after := time.Duration(again.IntN(15000)) * time.Microsecond
		k2, down2 := again.IntN(3), time.Duration(50+again.IntN(10000))*time.Microsecond
		desc += fmt.Sprintf(", then after %v flap %d for %v", after, k2, down2)
		t.Logf("schedule %d: %s", seed, desc)
		w.run(after, dirs...)
		flap(k2, down2)
		desc += drawHold(t, holds, w)
		again = rand.New(rand.NewPCG(seed, 15+uint64(i)))
	}
	if n.flaps != nil {
		n.flaps.Add(int64(1 + more))
	}
	w.run(20*time.Millisecond, dirs...)
	// No new rounds: the ends must come home within a few handshake
	// timeouts whatever happened.
	home := func() bool {
		for _, n := range w.n {
			if !n.conn.Home() {
				return false
			}
		}
		return true
	}
	for i := 0; i < 150 && (!home() || w.delivered(dirs...) != nil); i++ {
		w.run(10 * time.Millisecond)
	}
	nStale, err := noStaleEffect(w)
	if err != nil {
		return desc, err
	}
	stale.Add(int64(nStale))
	surfaced, readRefused := false, false
	for _, n := range w.n {
		// A READ executed at the peer before a notification it consumed,
		// its response lost in the flap, is not replayed
		// (ErrReadUnanswered): that side's error surfaces, and its
		// peer's with it, after one flap too.
		readRefused = readRefused || strings.Contains(n.conn.Reason(), crossnic.ErrReadUnanswered.Error())
	}
	for _, n := range w.n {
		if sq, _ := n.conn.State(); sq == fsm.SQSurfaced {
			surfaced = true
			if !readRefused {
				return desc, fmt.Errorf("%s surfaced after %d flaps, its path healthy: %s (%s)", n.name, 1+more, n.conn.Reason(), w.states())
			}
		}
	}
	if surfaced {
		// A READ whose response was lost: the error reaches the
		// application as plain verbs would report it, and nothing is
		// lost, duplicated or corrupted on the way.
		check := w.check
		if endless {
			// rdma_rxe at retry_cnt 7: the peer of a side whose QPs went
			// to ERR may retransmit for ever without an error, as it would
			// without ibpath.
			check = w.checkSafe
		}
		if err := check(dirs...); err != nil {
			return desc, fmt.Errorf("%w (%s)", err, w.states())
		}
		for _, i := range dirs {
			if sq, _ := w.n[i].conn.State(); sq != fsm.SQSurfaced {
				continue
			}
			if err := w.exactlyOnce(i); err != nil {
				return desc, fmt.Errorf("%w (%s)", err, w.states())
			}
		}
		return desc + " (surfaced: a READ unanswered)", errReadSurfaced
	}
	if err := w.delivered(dirs...); err != nil {
		return desc, err
	}
	for _, n := range w.n {
		if !n.conn.Home() {
			sq, rq := n.conn.State()
			return desc, fmt.Errorf("%s not home 1.5 s after the traffic: %v/%v: %s (probe: %v, reset: %v) %+v",
				n.name, sq, rq, n.conn.AwayReason(), n.conn.ProbeErr(), n.conn.ResetErr(), n.conn.Stats())
		}
	}
	return desc, nil
}

// drawTraffic draws, beside a flap schedule's own draws (from their own
// stream, so that the flaps of a seed stay what they were), what the
// cross-NIC campaign varies in the traffic: each direction's workload
// (SENDs or WRITEs; multi-SGE, inline, with READs), packet loss on a
// default link, delay and reordering on every link, and a receiver that
// reposts its receives late (RNR). It returns their description.
func drawTraffic(t testing.TB, rng *rand.Rand, w *world) string {
	w.load = [2]workload{workload(rng.IntN(8)), workload(rng.IntN(8))}
	desc := fmt.Sprintf(" load %v", w.load)
	if rng.IntN(2) == 0 {
		loss := rng.Float64() * 0.02
		must(t, w.f.SetLoss(w.n[rng.IntN(2)].hca.Port(1), loss, loss))
		desc += fmt.Sprintf(" loss %.3f", loss)
	}
	if rng.IntN(4) == 0 {
		desc += drawDelay(t, rng, w)
	}
	if rng.IntN(4) == 0 {
		k := rng.IntN(2)
		w.holdRecvs[k] = time.Duration(200+rng.IntN(2000)) * time.Microsecond
		desc += fmt.Sprintf(" rnr at %d (reposts every %v)", k, w.holdRecvs[k])
	}
	return desc
}

// drawDelay gives every link of w's default and backup HCAs one drawn
// delay (1 to 30 us; packets reorder behind a delayed one) and returns its
// description.
func drawDelay(t testing.TB, rng *rand.Rand, w *world) string {
	d := time.Duration(1+rng.IntN(30)) * time.Microsecond
	for _, n := range w.n {
		must(t, w.f.SetDelay(n.hca.Port(1), d))
		must(t, w.f.SetDelay(n.bak.ctx.(*sim.Context).HCA().Port(1), d))
	}
	return fmt.Sprintf(" delay %v", d)
}

// states describes both Conns for a failure message.
func (w *world) states() string {
	var b strings.Builder
	for _, n := range w.n {
		sq, rq := n.conn.State()
		fmt.Fprintf(&b, "%s %v/%v %q %+v; ", n.name, sq, rq, n.conn.Reason(), n.conn.Stats())
	}
	return b.String()
}

// errReadSurfaced: a schedule ended with the error surfaced, cleanly,
// because a READ the peer executed lost its response in a flap.
var errReadSurfaced = errors.New("surfaced: a READ the peer executed got no response")

// TestSwitchBackCampaign runs seeded flap schedules (flapSchedule), each
// as a subtest of its own, with up to -crossnic.switchflaps flaps. Every
// schedule must come home with nothing surfaced, however often its port
// flapped during the switch backs, unless a READ lost its response.
func TestSwitchBackCampaign(t *testing.T) {
	checkProfileFlag(t)
	runs := *switchRuns
	if testing.Short() {
		runs = 40
	}
	if *switchFlaps < 1 {
		t.Fatalf("-crossnic.switchflaps %d: at least 1", *switchFlaps)
	}
	var failed, twice, reads, stale, mailbox, paired, flaps atomic.Int64
	counts := &campaignCounts{stale: &stale, mailbox: &mailbox, paired: &paired, flaps: &flaps}
	seedWorkers(t, runs, *switchSeed, func(t *testing.T, s uint64) {
		if failed.Load() >= 5 {
			t.SkipNow()
		}
		ok := t.Run(fmt.Sprint(s), func(t *testing.T) {
			desc, err := flapSchedule(t, s, *switchFlaps, counts)
			if strings.Contains(desc, "then after") {
				twice.Add(1)
			}
			switch {
			case errors.Is(err, errReadSurfaced):
				reads.Add(1)
			case err != nil:
				t.Fatalf("%s: %v\nreproduce: go test ./crossnic -run TestSwitchBackCampaign -crossnic.switchseed %d -v", desc, err, s)
			}
		})
		if !ok {
			failed.Add(1)
		}
	})
	if *switchSeed != 0 {
		runs = 1
	}
	t.Logf("%d schedules, %d flaps, %d schedules with more than one (a flap during the switch back), none surfaced; %d surfaced for a READ whose response a flap lost; %d resets paired through the mailbox (both ends counted); %d stale requests executed, none with effect; %d handshakes through the mailbox",
		runs, flaps.Load(), twice.Load(), reads.Load(), paired.Load(), stale.Load(), mailbox.Load())
	if runs >= 1000 && *switchSeed == 0 && paired.Load() == 0 {
		t.Error("no reset without a handshake was paired through the mailbox: the schedules no longer reach askReset")
	}
}

// TestAnnouncementAfterPeerPurge runs switch-back schedule 22436 (of
// 30,000, beyond the 10,000 the suite runs): node1 faults again right
// after purging its backup while node0, polling lazily, has not purged
// its own yet. Through the control receives, with the announcement
// posted right behind the notification, node0's old incarnation took its
// PSN for a duplicate, the new one got the notification, and node0
// waited in INIT for an announcement that never came (the announcement
// now waits for the answer: Conn.announceOwed). With mailboxes, as a
// switch back needs, that handshake goes through the mailbox; both ends
// must still come home.
func TestAnnouncementAfterPeerPurge(t *testing.T) {
	var stale atomic.Int64
	if desc, err := flapSchedule(t, 22436, 2, &campaignCounts{stale: &stale}); err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
}

// TestResetRequestAfterUnreadAck pins switch-back schedule 1830 (with
// mailboxes): an end writes a request for a paired reset while a record
// of its handshake through the mailbox waits in the peer's inbox unread.
// With one inbox slot the request overwrote it: the peer never read it,
// the handshake waited out its bound and the error surfaced (schedule
// 4104 showed it first, before probe timeouts reset the QP). Each kind
// has its slot, and the reader takes the two oldest first: both ends
// come home.
func TestResetRequestAfterUnreadAck(t *testing.T) {
	pinnedSchedule(t, 1830, 1, 3)
}

// TestLateConnectPaired pins switch-back schedule 6177 (with mailboxes,
// probe timeout 4 ms): node1's cable is out when the handshake's
// announcement comes, so its default QP is connected late, once the
// port is back. Node0's QP ran the announced PSNs meanwhile, and its
// probe timed out the moment node1's port came back: node0 reset its QP
// and asked for a paired reset, while the HCA's last retransmission of
// the probe was on the wire. Connected then with the announced PSNs,
// node1's new QP took that probe, of node0's incarnation that had ended
// (a request of an earlier connection at both ends). A late connect is
// now paired too, and nothing stale executes.
func TestLateConnectPaired(t *testing.T) {
	pinnedSchedule(t, 6177, 0, 1)
}

// TestProbeAnsweredAfterErr pins switch-back schedule 950 (with
// mailboxes, both cables pulled): an end moves its default QP to ERR for
// a paired reset, and the drain before the reset finds its probe
// answered just before. Taken as answered, it switched back on the QP in
// ERR: the switch-back notification flushed, the end asked its peer
// through the mailbox what became of it, that handshake went unanswered,
// and node0 surfaced after a single flap. A probe polled after the QP
// went to ERR now counts as failed, and both come home.
func TestProbeAnsweredAfterErr(t *testing.T) {
	pinnedSchedule(t, 950, 0, 1)
}

// TestRecordOvertakenByLaterWrite pins switch-back schedule 9785 (five
// flaps, with mailboxes): node1 answers node0's fallback notification
// with an ack in slot 0, then announces a reset in slot 1. A WRITE of
// slot 1 posted earlier, still queued behind the application's WRs on
// node1's slow backup path (reordering delays), carried the new
// announcement when its HCA read the outbox, so node0 read it before the
// ack landed, took the ack for old when it came, and surfaced after its
// handshake timeout. A record whose predecessor went to the other slot
// now waits for it (mboxPrevOther).
func TestRecordOvertakenByLaterWrite(t *testing.T) {
	var s, m, p atomic.Int64
	desc, err := flapSchedule(t, 9785, 5, &campaignCounts{stale: &s, mailbox: &m, paired: &p})
	if err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	if m.Load() < 3 {
		t.Fatalf("%s: %d handshakes through the mailbox (want 3): the schedule no longer reaches the case", desc, m.Load())
	}
}

// pinnedSchedule runs switch-back schedule seed with mailboxes, which
// must end without an error, and checks that it still reaches its case:
// at least mailbox handshakes through the mailbox and paired resets.
func pinnedSchedule(t *testing.T, seed uint64, mailbox, paired int64) {
	t.Helper()
	var s, m, p atomic.Int64
	desc, err := flapSchedule(t, seed, 2, &campaignCounts{stale: &s, mailbox: &m, paired: &p})
	if err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	if m.Load() < mailbox || p.Load() < paired {
		t.Fatalf("%s: %d handshakes through the mailbox, %d paired resets (want %d and %d): the schedule no longer reaches the case",
			desc, m.Load(), p.Load(), mailbox, paired)
	}
}
