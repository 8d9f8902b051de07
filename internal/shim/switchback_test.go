package shim

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// homeAgain drives the traffic (more messages as needed) until both QPs
// are back in their hot paths. The runtimes are also ticked right after
// the posts, before the fabric carries them, so that a QP is given back
// with WRs outstanding on its default QP.
// switchCounted checks the receive counters of switch back n (from 1)
// of qa and of qb, its peer, in their "switched back" lines: each side
// collected the backup's data completions up to the count the peer's
// notification carried, and that count is what the peer says it
// notified: no message lost or taken twice as the receives came home.
func switchCounted(t *testing.T, n int, qa, qb *appQP) {
	t.Helper()
	line := func(q *appQP) string {
		ls := q.x.logLines("layer 2 switched back", qpnAttr(q)+" ")
		if len(ls) < n {
			t.Fatalf("%s: %d switch-back lines, want %d:\n%s", q.x.name, len(ls), n, q.x.log)
		}
		return ls[n-1]
	}
	la, lb := line(qa), line(qb)
	for _, c := range [][2]string{{la, lb}, {lb, la}} {
		own, peer := c[0], c[1]
		got, sent := logAttr(own, "collected_to"), logAttr(own, "peer_sent")
		if got == "" || got != sent || logAttr(peer, "notified") != sent {
			t.Fatalf("switch back %d: collected to %q, the peer's notification said %q, the peer notified %q:\n%s\n%s",
				n, got, sent, logAttr(peer, "notified"), own, peer)
		}
	}
}

func homeAgain(t *testing.T, f *sim.Fabric, hosts []*l2host, qs ...*appQP) {
	t.Helper()
	homeAgainChecked(t, f, hosts, func() {}, qs...)
}

// homeAgainChecked is homeAgain calling check after every step.
func homeAgainChecked(t *testing.T, f *sim.Fabric, hosts []*l2host, check func(), qs ...*appQP) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	away := func() bool {
		for _, q := range qs {
			if q.diverted() {
				return true
			}
		}
		return false
	}
	for i := 0; away(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("not switched back at virtual %v: %s\n%s log:\n%s", f.Now(), progress(hosts), qs[0].x.name, qs[0].x.log)
		}
		switchStep(t, f, hosts, qs...)
		check()
		if i%4 == 0 {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

// switchStep is one step of traffic with the switch back ticking: qs get
// more messages to send as needed, the runtimes are ticked right after
// the posts, then the fabric carries them for 50 us.
func switchStep(t *testing.T, f *sim.Fabric, hosts []*l2host, qs ...*appQP) {
	t.Helper()
	for _, q := range qs {
		q.total = max(q.total, q.sent+l2Window)
	}
	postStep(t, hosts)
	for _, x := range hosts {
		x.rt.switchTickOnce()
	}
	f.RunFor(50 * time.Microsecond)
	for _, x := range hosts {
		x.poll(t)
	}
}

// failedOverBoth drives the traffic until both QPs run on their backups.
func failedOverBoth(t *testing.T, f *sim.Fabric, hosts []*l2host, qa, qb *appQP, failovers int) {
	t.Helper()
	drive(t, f, hosts, 5*time.Microsecond, func() bool {
		for _, q := range []*appQP{qa, qb} {
			q.total = max(q.total, q.sent+l2Window)
			if s := q.status(); s.Failovers < failovers || s.CrossNIC != "fallback" {
				return false
			}
		}
		return true
	})
}

// switchedBackWorld is expressWorld's pair after one failover and one
// switch back: A's cable was pulled and put back, both QPs are home.
func switchedBackWorld(t *testing.T, seed uint64) (*sim.Fabric, []*l2host, *appQP, *appQP) {
	t.Helper()
	f, hosts, qa, qb := expressWorld(t, seed, l2opts{})
	failedOverBoth(t, f, hosts, qa, qb, 1)
	if err := f.SetLink(hosts[0].port, true); err != nil {
		t.Fatal(err)
	}
	homeAgain(t, f, hosts, qa, qb)
	return f, hosts, qa, qb
}

// sendMoreClean sends more messages each way and checks the exchange:
// no error, every signaled WR completed once.
func sendMoreClean(t *testing.T, f *sim.Fabric, hosts []*l2host, qa, qb *appQP, more int) {
	t.Helper()
	for _, q := range []*appQP{qa, qb} {
		q.total = q.sent + more
	}
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	settled(t, f, hosts...)
	for _, q := range []*appQP{qa, qb} {
		if len(q.errs) != 0 {
			t.Fatalf("%s: errors %+v", q.x.name, q.errs)
		}
		eachSignaledOnce(t, q)
	}
}

// TestSwitchBackAfterRepair: A's cable is pulled under traffic, both
// sides fail over to their backups, the cable is put back, and the
// probes bring the traffic home: both QPs are given back to the hot
// path (their rings loaded with what the default QPs hold), their CQs
// too, and the runtime no longer polls. Every message arrives once, in
// order, across both moves. A second pull fails over again from the
// hot path's rings, over the backup purged at the switch back, and a
// second repair switches back again.
func TestSwitchBackAfterRepair(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 71, l2opts{})
	a, b := hosts[0], hosts[1]
	for round := 1; round <= 2; round++ {
		failedOverBoth(t, f, hosts, qa, qb, round)
		for _, q := range []*appQP{qa, qb} {
			q.l2(func(l *l2qp) {
				if !l.recovery || l.express {
					t.Fatalf("round %d, %s: on the backup with recovery %v, express %v", round, q.x.name, l.recovery, l.express)
				}
			})
		}
		if err := f.SetLink(a.port, true); err != nil {
			t.Fatal(err)
		}
		homeAgain(t, f, hosts, qa, qb)
		for _, q := range []*appQP{qa, qb} {
			s := q.status()
			if s.Switchbacks != round || s.Home.String() != "port 1" || s.CrossNIC != "default" || s.Layer != status.LayerCrossNIC || s.Reason != "" {
				t.Fatalf("round %d, %s: status %+v\nlog:\n%s", round, q.x.name, s, q.x.log)
			}
			if q.x.logLine("layer 2 switched back", qpnAttr(q), "hot_path=true") == "" {
				t.Fatalf("round %d, %s: no switch-back line in the log:\n%s", round, q.x.name, q.x.log)
			}
			switchCounted(t, round, q, q.peer)
			// A backup event read late (announcing completions the Conn
			// drained) diverts a QP for an instant: the runtime gives it
			// back at once, so undiverts may exceed the switch backs.
			waitFor(t, q.x.name+" in its hot path, armed", func() bool {
				armed, diverted, _, _ := q.x.hp.State(q.fq)
				return armed && !diverted
			})
			if q.x.hp.Undiverts() < round {
				t.Fatalf("round %d, %s: %d undiverts", round, q.x.name, q.x.hp.Undiverts())
			}
		}
		// Once the application polled what the runtime held, the CQs go
		// back to the hot path and the runtime polls no more.
		drive(t, f, hosts, 5*time.Microsecond, func() bool {
			_, _, ra := a.hp.Counts()
			_, _, rb := b.hp.Counts()
			return len(ra) >= round && len(rb) >= 2*round
		})
		goA, _, _ := a.hp.Counts()
		goB, _, _ := b.hp.Counts()
		for _, q := range []*appQP{qa, qb} {
			q.total = q.sent + 100
		}
		drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
		// A backup event read late (announcing a completion the purge
		// drained) may divert a QP for an instant: a few polls (4 seen
		// under ./test.sh's load), against the hundreds of 100 more
		// messages if the CQs had stayed with the runtime.
		if g, _, _ := a.hp.Counts(); g > goA+8 {
			t.Fatalf("round %d: A's runtime polled %d times after the switch back", round, g-goA)
		}
		if g, _, _ := b.hp.Counts(); g > goB+8 {
			t.Fatalf("round %d: B's runtime polled %d times after the switch back", round, g-goB)
		}
		if round == 1 {
			if err := f.SetLink(a.port, false); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "A diverted again on PORT_ERR", qa.diverted)
		}
	}
	settled(t, f, a, b)
	outstanding := 0
	for _, q := range []*appQP{qa, qb} {
		if len(q.errs) != 0 {
			t.Fatalf("%s: errors %+v", q.x.name, q.errs)
		}
		eachSignaledOnce(t, q)
		if s := q.status(); s.Failovers != 2 || s.Switchbacks != 2 {
			t.Fatalf("%s: status %+v", q.x.name, s)
		}
		for _, l := range strings.Split(q.x.log.String(), "\n") {
			if strings.Contains(l, "layer 2 switched back") && !strings.Contains(l, " sends=0 ") {
				outstanding++
			}
		}
	}
	if outstanding == 0 {
		t.Fatal("every QP was given back with no send outstanding: the rings' loading went untested")
	}
}

// TestSwitchBackThenMailbox: after a failover and a switch back both
// QPs are in their hot paths again, with no Conn. From then on only A
// sends. A's cable is pulled again: A's failover notifies B through the
// mailbox (a handshake was had with B), which raises no completion at
// B, whose QP sends nothing and so sees no fault of its own. B's runtime
// reads the inbox of the QP it gave back, diverts it, and its Conn
// answers. Both fail over through the mailbox, come home once the cable
// is back, and every message arrives once, in order.
func TestSwitchBackThenMailbox(t *testing.T) {
	f, hosts, qa, qb := switchedBackWorld(t, 73)
	a, b := hosts[0], hosts[1]
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("A log:\n%s\nB log:\n%s", a.log, b.log)
		}
	})
	qb.total = qb.sent
	drive(t, f, hosts, 5*time.Microsecond, finished(qb))
	// A backup event read late diverts a QP for an instant (see
	// TestSwitchBackAfterRepair): past it, only the mailbox can tell B.
	settled(t, f, hosts...)
	waitFor(t, "B in its hot path", func() bool { return !qb.diverted() })
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 5*time.Microsecond, func() bool {
		qa.total = max(qa.total, qa.sent+l2Window)
		return qa.status().Failovers == 2 && qb.status().Failovers == 2 && qa.status().CrossNIC == "fallback"
	})
	if l := b.logLine("layer 2 failover", qpnAttr(qb), "the peer's fallback notification in the mailbox", "via_mailbox=true"); l == "" {
		t.Fatalf("B's second failover was not started by the mailbox:\n%s", b.log)
	}
	n := 0
	for _, l := range strings.Split(a.log.String(), "\n") {
		if strings.Contains(l, "layer 2 failover") && strings.Contains(l, qpnAttr(qa)) && strings.Contains(l, "via_mailbox=true") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("A: %d failovers through the mailbox, want 1 (the second; the first went through the control receives):\n%s", n, a.log)
	}
	if err := f.SetLink(a.port, true); err != nil {
		t.Fatal(err)
	}
	homeAgain(t, f, hosts, qa, qb)
	sendMoreClean(t, f, hosts, qa, qb, 100)
	for _, q := range []*appQP{qa, qb} {
		if s := q.status(); s.Failovers != 2 || s.Switchbacks != 2 {
			t.Fatalf("%s: status %+v", q.x.name, s)
		}
	}
}

// TestSwitchBackHotPathRefuses: the hot path cannot take the QP back
// (Undivert fails). The traffic is home on the default QP all the same,
// carried by the runtime, and the status says so.
func TestSwitchBackHotPathRefuses(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 72, l2opts{})
	qa.x.hp.FailUndivert(errors.New("injected: no room in the rings"))
	failedOverBoth(t, f, hosts, qa, qb, 1)
	if err := f.SetLink(hosts[0].port, true); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 20*time.Microsecond, func() bool {
		for _, q := range []*appQP{qa, qb} {
			q.total = max(q.total, q.sent+l2Window)
		}
		return qa.status().Switchbacks == 1 && !qb.diverted()
	})
	s := qa.status()
	if !qa.diverted() || s.Home.String() != "port 1" || !strings.Contains(s.Reason, "hot path cannot take it back") {
		t.Fatalf("A: diverted %v, status %+v", qa.diverted(), s)
	}
	// the status changes before the lines are logged
	waitFor(t, "A's log says the hot path could not take the QP back", func() bool {
		return qa.x.logLine("the hot path cannot take the QP back", "injected") != "" && qa.x.logLine("layer 2 switched back", "hot_path=false") != ""
	})
	sendMoreClean(t, f, hosts, qa, qb, 100)
}

// TestSwitchBackStaleBackupEvent: completion events of the backup CQ
// reach the runtime after a switch back. One read before the backup was
// purged is ignored. One read after it, with nothing on the backup,
// diverts the QP as the peer's notification would; its Conn finds nothing
// and the runtime gives the QP back at once, without a failover or a
// switch back counted, and the traffic goes on. The switch back's own
// completions may have left a real event behind, which the notifier reads
// up to notifyMax later and which detours the QP the same way: the test
// lets it come and go first, so that the give-backs it counts are the
// injected event's.
func TestSwitchBackStaleBackupEvent(t *testing.T) {
	f, hosts, qa, qb := switchedBackWorld(t, 73)
	r := qb.x.rt
	r.l2mu.Lock()
	set := r.shadows[qb.x.id]
	r.l2mu.Unlock()
	backupQuiet(t, f, hosts, r, set)
	r.onBackupEvent(set, qb.qp, time.Now().Add(-time.Hour))
	if qb.diverted() || qb.x.logLine("ignores a backup event older than the switch back") == "" {
		t.Fatalf("an event read before the last drain: diverted %v, log:\n%s", qb.diverted(), qb.x.log)
	}
	undiverts := qb.x.hp.Undiverts()
	r.onBackupEvent(set, qb.qp, time.Now())
	again := qb.x.hp.Undiverts() - undiverts
	if qb.diverted() || again != 1 || qb.x.logLine("gave back a QP that never left its default") == "" {
		t.Fatalf("a fresh backup event with nothing on the backup: diverted %v, given back %d times, log:\n%s", qb.diverted(), again, qb.x.log)
	}
	sendMoreClean(t, f, hosts, qa, qb, 50)
	if s := qb.status(); s.Failovers != 1 || s.Switchbacks != 1 || s.Home.String() != "port 1" {
		t.Fatalf("B: status %+v", s)
	}
}

// TestSwitchBackPostAfterGiveBack: a post that reaches the runtime after
// the QP was given back is refused with ErrHome (nothing posted), for
// the hot path to post it; one to a QP the runtime does not know is an
// error.
func TestSwitchBackPostAfterGiveBack(t *testing.T) {
	_, hosts, qa, _ := switchedBackWorld(t, 74)
	a := hosts[0]
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled}
	if n, err := a.rt.PostSend(a.id, qa.qp.QPN(), []verbs.SendWR{wr}); n != 0 || !errors.Is(err, ErrHome) {
		t.Fatalf("PostSend after the give-back: %d %v, want ErrHome", n, err)
	}
	if n, err := a.rt.PostRecv(a.id, qa.qp.QPN(), []verbs.RecvWR{{WRID: 2}}); n != 0 || !errors.Is(err, ErrHome) {
		t.Fatalf("PostRecv after the give-back: %d %v, want ErrHome", n, err)
	}
	if _, err := a.rt.PostSend(a.id, 0xdead, []verbs.SendWR{wr}); err == nil || errors.Is(err, ErrHome) || verbs.ErrnoOf(err) != verbs.EINVAL {
		t.Fatalf("PostSend to an unknown QP: %v, want EINVAL", err)
	}
}

// TestSwitchBackOff: with IBPATH_SWITCHBACK=off a failed-over QP stays on
// its backup after the repair (no recovery, and no ticking once the
// failover's handshake is done).
func TestSwitchBackOff(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 75, l2opts{env: map[string]string{EnvSwitch: "off"}})
	failedOverBoth(t, f, hosts, qa, qb, 1)
	if err := f.SetLink(hosts[0].port, true); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*appQP{qa, qb} {
		q.total = q.sent + 200
	}
	drive(t, f, hosts, 20*time.Microsecond, finished(qa, qb))
	for _, q := range []*appQP{qa, qb} {
		q.l2(func(l *l2qp) {
			if l.recovery || !l.diverted {
				t.Fatalf("%s: recovery %v, diverted %v", q.x.name, l.recovery, l.diverted)
			}
		})
		if s := q.status(); s.Switchbacks != 0 || s.CrossNIC != "fallback" || s.Home.Device != "mlx5_0" {
			t.Fatalf("%s: status %+v", q.x.name, s)
		}
	}
	// The loop ticked the failover's handshake (its bound); with nothing
	// waiting for the peer and nothing to switch back, it stops.
	for _, x := range hosts {
		r := x.rt
		waitFor(t, x.name+"'s tick loop stopped", func() bool { r.fo.mu.Lock(); defer r.fo.mu.Unlock(); return !r.fo.ticking })
	}
}

// TestSwitchBackSharesCQHeadroom: A's two QPs share one CQ whose headroom
// (IBPATH_CQ_HEADROOM=4) is one QP's share of it. Both fail over when A's
// cable is pulled; after the repair they switch back one after the
// other: never do both hold a share at once (the CQ could overrun), the
// second waits on the backup and says why, and both come home with every
// message once. The shares are all given back.
func TestSwitchBackSharesCQHeadroom(t *testing.T) {
	f := railFabric(t, 81)
	hosts, shared, qs := sharedCQWorld(t, f, l2opts{env: map[string]string{EnvHeadroom: "4"}})
	a := hosts[0]
	qa1, qa2, qb1, qb2 := qs[0], qs[1], qs[2], qs[3]
	for _, q := range qs {
		q.total = 40
	}
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa1.sendDone) >= 10 && len(qa2.sendDone) >= 10 })
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	drive(t, f, hosts, 5*time.Microsecond, func() bool {
		for _, q := range qs {
			q.total = max(q.total, q.sent+l2Window)
			if q.status().CrossNIC != "fallback" {
				return false
			}
		}
		return true
	})
	if err := f.SetLink(a.port, true); err != nil {
		t.Fatal(err)
	}
	most := 0
	homeAgainChecked(t, f, hosts, func() {
		held, headroom := a.rt.cqHeld(shared)
		if headroom != 4 || held > 4 {
			t.Fatalf("A's shared CQ: %d of its %d entries of headroom held", held, headroom)
		}
		most = max(most, held)
	}, qs...)
	if most != 4 {
		t.Fatalf("at most %d entries of the shared CQ's headroom held during the switch backs, want 4", most)
	}
	if held, _ := a.rt.cqHeld(shared); held != 0 {
		t.Fatalf("%d entries of the shared CQ's headroom still held with both QPs home", held)
	}
	if a.logLine("cannot reset the default QP yet", "no room in the application's CQs") == "" {
		t.Fatalf("no line says why a QP waited:\n%s", a.log)
	}
	for _, q := range qs {
		if s := q.status(); s.Switchbacks != 1 {
			t.Fatalf("%s QP %d: status %+v, want one switch back", q.x.name, q.idx, s)
		}
	}
	sendMoreClean(t, f, hosts, qa1, qb1, 20)
	sendMoreClean(t, f, hosts, qa2, qb2, 20)
}

// TestSwitchBackNoHeadroom: a QP whose CQ has no headroom (the device
// refused the larger size) does not switch back: it says so when it
// fails over, and stays on the backup after the repair, still working.
func TestSwitchBackNoHeadroom(t *testing.T) {
	f := railFabric(t, 82)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{}), newL2Host(t, f, "node1", 1, c, l2opts{})
	bare, err := a.ctx.CreateCQ(256, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.rt.CQCreated(bare, 0)
	staysOnBackup(t, f, a, b, qpOpts{cq: bare}, "no switch back for a QP whose CQs have no headroom")
}

// TestSwitchBackPeerWithoutMailbox: A switches back, B (switch back
// off) publishes no mailbox with its backups, as a peer of an older
// version does. A's QP does not switch back: it says so when it fails
// over, and stays on the backup after the repair, still working (a
// switch back needs mailboxes at both ends: crossnic.ErrNoMailbox).
func TestSwitchBackPeerWithoutMailbox(t *testing.T) {
	f := railFabric(t, 83)
	c := shimtest.NewCluster()
	a := newL2Host(t, f, "node0", 0, c, l2opts{})
	b := newL2Host(t, f, "node1", 1, c, l2opts{env: map[string]string{EnvSwitch: "off"}})
	qa := staysOnBackup(t, f, a, b, qpOpts{}, "no switch back for a QP whose peer published no mailbox")
	qa.l2(func(l *l2qp) {
		if l.recovery {
			t.Fatal("A's QP took recovery without the peer's mailbox")
		}
	})
}

// staysOnBackup connects a QP of a (made with qo) to one of b, cuts A's
// cable under traffic, and checks that A's log says why its QP does not
// switch back (a line with why) and that after the repair the QP stays
// on the backup, still working. It returns A's QP.
func staysOnBackup(t *testing.T, f *sim.Fabric, a, b *l2host, qo qpOpts, why string) *appQP {
	t.Helper()
	qa, qb := a.addQP(t, qo), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "the QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total, qb.total = 40, 40
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 })
	if err := f.SetLink(a.port, false); err != nil {
		t.Fatal(err)
	}
	failedOverBoth(t, f, hosts, qa, qb, 1)
	if a.logLine(why, qpnAttr(qa)) == "" {
		t.Fatalf("no line says why the QP does not switch back (%q):\n%s", why, a.log)
	}
	if err := f.SetLink(a.port, true); err != nil {
		t.Fatal(err)
	}
	sendMoreClean(t, f, hosts, qa, qb, 60)
	if s := qa.status(); s.CrossNIC != "fallback" || s.Switchbacks != 0 {
		t.Fatalf("A's QP after the repair: status %+v, want it on the backup", s)
	}
	return qa
}

// backupQuiet waits until no backup completion event of r's set is pending or
// being handled: the notifier has had time to read and handle what the
// switch back left (settled lasts twice notifyMax), and whatever it has
// not read by then is read and dropped here.
func backupQuiet(t *testing.T, f *sim.Fabric, hosts []*l2host, r *Runtime, set *shadowSet) {
	t.Helper()
	for quiet := 0; quiet < 2; {
		settled(t, f, hosts...)
		r.l2mu.Lock()
		n := 0
		for {
			cq, err := set.ch.GetCQEvent()
			if err != nil {
				break
			}
			set.ch.AckCQEvents(cq, 1)
			if err := cq.ReqNotify(false); err != nil {
				t.Errorf("arm a backup CQ: %v", err)
			}
			n++
		}
		r.l2mu.Unlock()
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
}
