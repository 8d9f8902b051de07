package demo

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// probeInterval is how often layer 2 probes a reset default QP
// (crossnic.Recovery.ProbeInterval).
const probeInterval = 5 * time.Millisecond

// protection is layer 2 of one side of a protected QP: a crossnic.Conn
// over the endpoint's QP (the default leg) and a backup QP on another HCA
// of the same host, connected to the peer's backup QP. The application's
// traffic goes through the Conn instead of the QP and CQ.
type protection struct {
	conn *crossnic.Conn
	bak  *device  // the backup HCA
	qp   verbs.QP // the backup QP
	mr   verbs.MR // the endpoint's buffer registered on the backup HCA
	tap  *ctrlTap // the backup QP's CQ, as the Conn sees it

	// What the timeline last showed.
	sq    fsm.SQState
	rq    fsm.RQState
	stats crossnic.ConnStats

	msgs []ControlMsg // control messages received on either leg since the timeline last looked
	wcs  [2]int       // the application's completions that came through the default (0) and backup (1) leg

	fails    []Failover // one per fault the script injected
	replayed int        // WRs replayed by the last handshake's rewind

	homeAt    time.Duration // both queues first came home after a failover (0: not yet)
	homeBase  [2]int        // wcs then
	homeWCs   [2]int        // completions per leg from homeAt to the next fault
	homeDone  bool          // homeWCs is final
	homeShown bool          // the timeline said both sides are home
	probeAt   time.Duration // the last probe was posted
	pending   []string      // switch-back steps not printed yet
}

// ctrlTap is a leg's CQ as the demo hands it to the Conn. It passes every
// completion through unchanged and, like a packet capture, notes the
// control messages received: zero-length WRITE_WITH_IMM whose immediate
// carries the kind in its top two bits (1 notification, 2 acknowledgement
// on the backup QP; 3 switch-back notification on the default QP) and the
// sender's receive counter below them (crossnic/control.go). It tells them
// from the application's own completions by wr_id: the application never
// posted that receive. It also counts the application's completions per
// leg.
type ctrlTap struct {
	verbs.CQ
	clock verbs.Clock
	e     *endpoint
	leg   int // 0: default, 1: backup
}

// ControlMsg is one control message a side received.
type ControlMsg struct {
	At      time.Duration
	Ack     bool   // acknowledgement (else notification)
	Switch  bool   // switch-back notification, on the default QP
	Counter uint64 // the sender's receive counter (mod 2^30)
}

func (m ControlMsg) kind() string {
	switch {
	case m.Switch:
		return "switch-back notification"
	case m.Ack:
		return "ack"
	}
	return "notification"
}

func (t *ctrlTap) Poll(wc []verbs.WC) (int, error) {
	n, err := t.CQ.Poll(wc)
	p := t.e.l2
	for _, c := range wc[:n] {
		recv := c.Opcode == verbs.WCRecv || c.Opcode == verbs.WCRecvRDMAWithImm
		switch {
		case c.Status != verbs.WCSuccess:
		case recv && (c.WRID < recvBase || c.WRID >= recvBase+t.e.t.nextRecv):
			// The PSN announcement behind each notification and ack is
			// the reset PSNs' business (docs/CROSSNIC.md): not shown.
			if k, v := crossnic.ControlMessage(c.ImmData); k != "announce" {
				p.msgs = append(p.msgs, ControlMsg{At: t.clock.Now(), Ack: k == "ack", Switch: k == "switch", Counter: uint64(v)})
			}
		case recv || c.WRID < 2*uint64(t.e.t.nextSeq):
			p.wcs[t.leg]++
		}
	}
	return n, err
}

// Failover is one failover of a protected QP side: the fault the script
// injected, the first good completion through the backup after it, and
// the WRs the handshake replayed.
type Failover struct {
	Fault, Resumed time.Duration
	Replayed       int
	bakBase        int // backup-leg completions at the fault
}

// protect makes QP B (a, b: its two sides) a protected connection on both
// hosts, by hand as crossnic.Shadow would but with the demo's own RC
// settings and PSNs (rc.go): on each host a backup QP on the
// HCA bakA / bakB, with a CQ of its own (a Conn drains a leg's CQ whole),
// the endpoint's buffer registered there too, and the default-to-backup
// mappings (QP and rkey) published in a Directory in advance. Each backup
// QP is connected to the one its peer published, with plain verbs (it has
// no alternate path: layer 1 does not know it).
func (s *scenario) protect(a, b *endpoint, bakA, bakB *device) error {
	dir := crossnic.NewMemDirectory() // the replicated store's in-process stand-in
	for _, x := range []struct {
		e   *endpoint
		bak *device
	}{{a, bakA}, {b, bakB}} {
		e, d := x.e, x.bak
		if len(e.dev.eps) != 1 {
			return fmt.Errorf("demo: protect %v: its CQ is shared with another QP", e)
		}
		cq, err := d.ctx.CreateCQ(256, nil, 0)
		if err != nil {
			return fmt.Errorf("ibv_create_cq on %s (backup of %v): %w", d, e, err)
		}
		p := &protection{bak: d, tap: &ctrlTap{CQ: cq, clock: s.f, e: e, leg: 1}}
		if p.qp, err = d.pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return fmt.Errorf("ibv_create_qp on %s (backup of %v): %w", d, e, err)
		}
		if p.mr, err = d.pd.RegMR(e.buf, rcAccess); err != nil {
			return fmt.Errorf("ibv_reg_mr on %s (backup of %v): %w", d, e, err)
		}
		e.l2 = p
		lid, gid, err := portAddr(e.dev, e.port)
		if err != nil {
			return err
		}
		blid, bgid, err := portAddr(d, 1)
		if err != nil {
			return err
		}
		def := crossnic.Endpoint{LID: lid, GID: gid, QPN: e.qp.QPN()}
		if err := dir.PublishQP(def, crossnic.Backup{Device: d.name, Port: 1, LID: blid, GID: bgid, QPN: p.qp.QPN()}); err != nil {
			return err
		}
		if err := dir.PublishMR(crossnic.MRRef{LID: lid, GID: gid, RKey: e.mr.RKey()}, p.mr.RKey()); err != nil {
			return err
		}
	}
	for _, e := range []*endpoint{a, b} {
		// The peer as the default QP knows it: its address and QP number.
		attr, _, err := e.qp.Query(verbs.QPAttrAV | verbs.QPAttrDestQPN)
		if err != nil {
			return fmt.Errorf("ibv_query_qp on %v: %w", e, err)
		}
		peer := crossnic.Endpoint{LID: attr.AHAttr.DLID, QPN: attr.DestQPN}
		if attr.AHAttr.IsGlobal {
			peer.GID = attr.AHAttr.GRH.DGID
		}
		bk, ok := dir.LookupQP(peer)
		if !ok {
			return fmt.Errorf("demo: no backup published for %v's peer (%v)", e, peer)
		}
		p := e.l2
		if err := toRTS(p.qp.Modify, fmt.Sprintf("%s (backup of %v)", p.bak, e), ahTo(bk.LID, bk.GID, 1), bk.QPN, 1); err != nil {
			return err
		}
		// The peer's notification may arrive before this side faults: the
		// control receive is posted as soon as the backup is connected.
		if err := crossnic.PostControlRecv(p.qp); err != nil {
			return fmt.Errorf("demo: %v: %w", e, err)
		}
		keys := &crossnic.KeyMap{LKeys: map[uint32]uint32{e.mr.LKey(): p.mr.LKey()},
			RKey: func(rk uint32) (uint32, bool) {
				return dir.LookupMR(crossnic.MRRef{LID: peer.LID, GID: peer.GID, RKey: rk})
			}}
		if p.conn, err = crossnic.NewConn(crossnic.Leg{Ctx: e.dev.ctx, QP: e.qp, CQ: &ctrlTap{CQ: e.dev.cq, clock: s.f, e: e}},
			crossnic.Leg{Ctx: p.bak.ctx, QP: p.qp, CQ: p.tap}, keys, false); err != nil {
			return fmt.Errorf("crossnic.NewConn on %v: %w", e, err)
		}
		// The PSNs its resets start from, drawn from the seed: the same
		// seed gives the same run.
		h := fnv.New64a()
		h.Write([]byte(e.String()))
		p.conn.SetPSNSource(rand.New(rand.NewPCG(s.opts.Seed, h.Sum64())).Uint32)
		// Switching back: once the default path works again, layer 2
		// resets, probes and fences its way home.
		if err := p.conn.EnableRecovery(crossnic.Recovery{Clock: s.f, ProbeInterval: probeInterval}); err != nil {
			return fmt.Errorf("crossnic.Conn.EnableRecovery on %v: %w", e, err)
		}
		p.sq, p.rq = p.conn.State()
	}
	return nil
}

// l2Check compares e's Conn with what the timeline last showed, after the
// demo called it for cause; a change of state, a control message
// received, or a backup purge is recorded and printed.
func (s *scenario) l2Check(e *endpoint, cause string) {
	p := e.l2
	if p == nil {
		return
	}
	sq, rq := p.conn.State()
	st := p.conn.Stats()
	msgs := p.msgs
	p.msgs = nil
	if st.Probes > p.stats.Probes {
		p.probeAt = s.f.Now()
	}
	if sq == p.sq && rq == p.rq && len(msgs) == 0 && st.BackupResets == p.stats.BackupResets {
		p.stats = st
		return
	}
	c := Layer2Change{At: s.f.Now(), Host: e.dev.host.name, Device: e.dev.name, QP: e.qpName, Cause: cause,
		SQBefore: p.sq, RQBefore: p.rq, SQ: sq, RQ: rq, Before: p.stats, After: st, Msgs: msgs}
	if sq == fsm.SQFallback && (p.sq == fsm.SQDefault || p.sq == fsm.SQAwaitAck) {
		p.replayed = st.Replayed - p.stats.Replayed
		if n := len(p.fails); n > 0 {
			p.fails[n-1].Replayed = p.replayed
		}
	}
	home := sq == fsm.SQDefault && rq == fsm.RQDefault
	if home && (p.sq != fsm.SQDefault || p.rq != fsm.RQDefault) {
		s.cameHome(e)
	}
	p.sq, p.rq, p.stats = sq, rq, st
	s.res.Layer2 = append(s.res.Layer2, c)
	// A switch back is told in two lines per side: the probe's answer,
	// then every later step once both queues are home.
	if steps := s.switchSteps(e, c); len(steps) > 0 && !home && switchRank(c.SQBefore) > 0 && switchRank(sq) > 0 {
		p.pending = append(p.pending, steps...)
		return
	}
	text := s.describeL2(e, c)
	if len(p.pending) > 0 {
		text = strings.Join(p.pending, "; ") + "; " + text
		p.pending = nil
	}
	s.p.at(c.At, "%v layer 2: %s", e, text)
	if home && !p.homeShown {
		s.l2Home(e)
	}
}

// l2Fault notes that the script injects a fault under the protected QPs
// at t: the pause to the first good completion on the backups is measured
// from it, and the traffic since the last switch back is closed.
func (s *scenario) l2Fault(t time.Duration) {
	for _, e := range s.eps {
		p := e.l2
		if p == nil {
			continue
		}
		p.fails = append(p.fails, Failover{Fault: t, bakBase: p.wcs[1]})
		if p.homeAt > 0 && !p.homeDone {
			p.homeWCs = [2]int{p.wcs[0] - p.homeBase[0], p.wcs[1] - p.homeBase[1]}
			p.homeDone = true
		}
	}
}

// cameHome: both of e's queues are back on the default QP. Its port is
// the default one again (layer 2 reset the QP), and layer 1 must protect
// it anew: the reset dropped the alternate path it had loaded.
func (s *scenario) cameHome(e *endpoint) {
	p := e.l2
	if p.homeAt == 0 {
		p.homeAt, p.homeBase = s.f.Now(), p.wcs
	}
	if attr, err := queryPath(e); err == nil {
		e.port = attr.PortNum
	}
	s.rearm = append(s.rearm, e)
}

// reregister gives layer 1 back the QPs layer 2 brought home: on
// InfiniBand their entries are handed over (or stale: the peer's side was
// reset by layer 2 behind layer 1's back), so each is unregistered and
// registered again, which arms it on an alternate path. On RoCE layer 1
// has nothing to offer.
func (s *scenario) reregister() error {
	q := s.rearm
	s.rearm = nil
	if s.roce() {
		return nil
	}
	var batch []l1Change
	for _, e := range q {
		h := e.dev.host
		before := h.mgr.Status()
		h.mgr.Unregister(e.qp)
		if err := h.mgr.Register(e.dev.ctx, e.qp); err != nil {
			return fmt.Errorf("apm.Manager.Register(%v) after the switch back: %w", e, err)
		}
		batch = append(batch, s.diffL1(h, before, "re-register")...)
	}
	s.printL1(batch)
	return nil
}

// describeL2 says what a Conn did, from its state and counters.
func (s *scenario) describeL2(e *endpoint, c Layer2Change) string {
	d := func(f func(crossnic.ConnStats) int) int { return f(c.After) - f(c.Before) }
	hidden := d(func(x crossnic.ConnStats) int { return x.HiddenFlushes })
	moved := d(func(x crossnic.ConnStats) int { return x.RecvsMoved })
	delivered := d(func(x crossnic.ConnStats) int { return x.Delivered })
	synth := d(func(x crossnic.ConnStats) int { return x.Synthesized })
	replayed := d(func(x crossnic.ConnStats) int { return x.Replayed })
	var msg *ControlMsg
	if len(c.Msgs) == 1 {
		msg = &c.Msgs[0]
	}
	bak, peer := e.l2.bak, e.peer.dev.host.name
	switch {
	case c.SQBefore == fsm.SQDefault && c.SQ == fsm.SQAwaitAck && len(c.Msgs) == 0:
		why := map[string]string{"poll": "an error completion on the default QP",
			"ibv_post_send": "ibv_post_send refused by the default HCA"}[c.Cause]
		if why == "" {
			why = c.Cause
		}
		return fmt.Sprintf("fault (%s) -> %v: default QP flushed (%d completions hidden), %d receives moved to %s, notification sent",
			why, c.SQ, hidden, moved, bak)
	case c.SQBefore == fsm.SQDefault && c.SQ == fsm.SQFallback && msg != nil && !msg.Ack && !msg.Switch:
		return fmt.Sprintf("%s's notification on %s (its receive counter %d) -> %v: default QP flushed (%d completions hidden), "+
			"%d receives moved, ack sent; %d WRs proven delivered (%d completions synthesized), %d replayed",
			peer, bak, msg.Counter, c.SQ, hidden, moved, delivered, synth, replayed)
	case c.SQBefore == fsm.SQAwaitAck && c.SQ == fsm.SQFallback && msg != nil && !msg.Switch:
		return fmt.Sprintf("%s's %s (its receive counter %d) -> %v: %d WRs proven delivered (%d completions synthesized), %d replayed on %s",
			peer, msg.kind(), msg.Counter, c.SQ, delivered, synth, replayed, bak)
	case c.SQ == fsm.SQSurfaced:
		return fmt.Sprintf("surfaced (%s): %s; the error reaches the application", c.Cause, e.l2.conn.Reason())
	}
	if steps := s.switchSteps(e, c); len(steps) > 0 {
		return fmt.Sprintf("%s -> %v/%v", strings.Join(steps, "; "), c.SQ, c.RQ)
	}
	out := fmt.Sprintf("%s: send queue %v -> %v, receive queue %v -> %v", c.Cause, c.SQBefore, c.SQ, c.RQBefore, c.RQ)
	for _, m := range c.Msgs {
		out += fmt.Sprintf("; %s from %s (receive counter %d)", m.kind(), peer, m.Counter)
	}
	return out
}

// switchRank orders the send-queue states of a switch back (-1: none).
func switchRank(q fsm.SQState) int {
	switch q {
	case fsm.SQFallback:
		return 0
	case fsm.SQWaitSignaled:
		return 1
	case fsm.SQWaitDrained:
		return 2
	case fsm.SQWaitNotify:
		return 3
	case fsm.SQDefault:
		return 4
	}
	return -1
}

// switchSteps lists the steps of a switch back a change went through, in
// order (none when it is not one).
func (s *scenario) switchSteps(e *endpoint, c Layer2Change) []string {
	var steps []string
	from, to := switchRank(c.SQBefore), switchRank(c.SQ)
	if from >= 0 && from < 4 && to > from {
		if from < 1 {
			probe := fmt.Sprintf("probe %d (posted at %s) answered on the default QP", c.After.Probes, ms(e.l2.probeAt))
			if c.At-e.l2.probeAt > verbs.TimeoutDuration(rcTimeout) {
				probe += ": the cable took it, the HCA's retry got through"
			}
			steps = append(steps, probe)
		}
		if from < 2 && to >= 2 {
			steps = append(steps, fmt.Sprintf("fence: next signaled WR to %s, later ones held", e.l2.bak.name))
		}
		if from < 3 && to >= 3 {
			steps = append(steps, "fence completed, switch-back notification sent")
		}
		if to == 4 {
			steps = append(steps, fmt.Sprintf("held WRs released on %v", e.dev))
		}
	}
	if c.RQBefore == fsm.RQFallback && c.RQ == fsm.RQDefault {
		steps = append(steps, fmt.Sprintf("%s's switch-back notification: receives moved home", e.peer.dev.host.name))
	}
	if c.After.BackupResets > c.Before.BackupResets {
		steps = append(steps, "backup QP purged")
	}
	return steps
}

// l2Resumed notes the first good completion that came through e's backup
// leg after the last fault; once both sides of the QP have one, it prints
// the pause each saw.
func (s *scenario) l2Resumed(e *endpoint) {
	p := e.l2
	if p == nil || len(p.fails) == 0 {
		return
	}
	f := &p.fails[len(p.fails)-1]
	if f.Resumed != 0 || p.wcs[1] == f.bakBase {
		return
	}
	f.Resumed = s.f.Now()
	var pauses, legs string
	for _, x := range s.eps {
		if x.qpName != e.qpName || x.l2 == nil {
			continue
		}
		xf := x.l2.fails[len(x.l2.fails)-1]
		if xf.Resumed == 0 {
			return
		}
		if pauses != "" {
			pauses, legs = pauses+", ", legs+" <-> "
		}
		pauses += fmt.Sprintf("%s %s", x.dev.host.name, ms(xf.Resumed-xf.Fault))
		legs += x.l2.bak.String()
	}
	s.p.at(s.f.Now(), "QP %s: completing again on both sides, through %s; pause since the fault: %s; no error reached the application",
		e.qpName, legs, pauses)
}

// l2Home prints, once both sides of e's QP are back on their default QPs
// after a switch back, where the traffic runs and how long each side held
// its WRs during the switch.
func (s *scenario) l2Home(e *endpoint) {
	var holds, legs string
	for _, x := range s.eps {
		if x.qpName != e.qpName || x.l2 == nil {
			continue
		}
		if x.l2.homeAt == 0 || x.l2.homeShown {
			return
		}
		if holds != "" {
			holds, legs = holds+", ", legs+" <-> "
		}
		holds += fmt.Sprintf("%s %s", x.dev.host.name, ms(x.l2.conn.Stats().SwitchPause))
		legs += x.dev.String()
	}
	for _, x := range s.eps {
		if x.qpName == e.qpName && x.l2 != nil {
			x.l2.homeShown = true
		}
	}
	s.p.at(s.f.Now(), "QP %s: back home on both sides, completing through %s; WRs held during the switch: %s; no error reached the application",
		e.qpName, legs, holds)
}

// l2Summary prints each protected QP side's layer-2 state and counters.
func (s *scenario) l2Summary() {
	p := s.p
	var bak []string
	p.plain("%-2s %-13s %-9s %-9s %-13s %6s %9s %11s %8s %11s %14s %6s %6s %6s  %s", "QP", "layer 2", "sq", "rq", "backup",
		"faults", "delivered", "synthesized", "replayed", "recvs moved", "flushes hidden", "probes", "back", "purged", "pause")
	for _, r := range s.res.Endpoints {
		if !r.Protected {
			continue
		}
		var pauses []string
		replayed := 0
		for _, f := range r.Failovers {
			replayed += f.Replayed
			if f.Resumed > 0 {
				pauses = append(pauses, ms(f.Resumed-f.Fault))
			}
		}
		if len(pauses) == 0 {
			pauses = []string{"-"}
		}
		st := r.L2Stats
		p.plain("%-2s %-13s %-9v %-9v %-13s %6d %9d %11d %8d %11d %14d %6d %6d %6d  %s", r.QP, r.Host+"/"+r.Device, r.L2SQ, r.L2RQ,
			r.Host+"/"+r.Backup, st.Faults, st.Delivered, st.Synthesized, replayed, st.RecvsMoved, st.HiddenFlushes,
			st.Probes, st.SwitchBacks, st.BackupResets, strings.Join(pauses, ", "))
		bak = append(bak, r.Backup)
	}
	if len(bak) > 0 {
		p.plain("layer 2: switching back enabled (crossnic.Conn.EnableRecovery, a probe every %v); after the %s death its QP cannot be reset: QP B stays on %s",
			probeInterval, s.nicWord(), bak[0])
	}
}
