package demo

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

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

	faultAt  time.Duration // the fault the pause is measured from (0: none yet)
	resumed  time.Duration // first good completion through the backup after it
	replayed int           // WRs replayed by the handshake's rewind
}

// ctrlTap is the backup leg's CQ as the demo hands it to the Conn. It
// passes every completion through unchanged and, like a packet capture,
// notes the handshake's control messages: the zero-length
// WRITE_WITH_IMM whose immediate carries the kind in its top two bits
// (1 notification, 2 acknowledgement) and the sender's receive counter
// below them (crossnic/control.go). It tells them from the application's
// own completions by wr_id: the application never posted that receive.
type ctrlTap struct {
	verbs.CQ
	clock  verbs.Clock
	e      *endpoint
	msgs   []ControlMsg // received since the timeline last looked
	appWCs int          // the application's completions that came through the backup
}

// ControlMsg is one handshake message a side received on its backup QP.
type ControlMsg struct {
	At      time.Duration
	Ack     bool   // acknowledgement (else notification)
	Counter uint64 // the sender's receive counter (mod 2^30)
}

func (m ControlMsg) kind() string {
	if m.Ack {
		return "ack"
	}
	return "notification"
}

func (t *ctrlTap) Poll(wc []verbs.WC) (int, error) {
	n, err := t.CQ.Poll(wc)
	for _, c := range wc[:n] {
		recv := c.Opcode == verbs.WCRecv || c.Opcode == verbs.WCRecvRDMAWithImm
		switch {
		case c.Status != verbs.WCSuccess:
		case recv && (c.WRID < recvBase || c.WRID >= recvBase+t.e.t.nextRecv):
			k := c.ImmData >> 30
			t.msgs = append(t.msgs, ControlMsg{At: t.clock.Now(), Ack: k == 2, Counter: uint64(c.ImmData & (1<<30 - 1))})
		case recv || c.WRID < 2*uint64(t.e.t.nextSeq):
			t.appWCs++
		}
	}
	return n, err
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
		p := &protection{bak: d, tap: &ctrlTap{CQ: cq, clock: s.f, e: e}}
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
		keys := &crossnic.KeyMap{LKeys: map[uint32]uint32{e.mr.LKey(): p.mr.LKey()},
			RKey: func(rk uint32) (uint32, bool) {
				return dir.LookupMR(crossnic.MRRef{LID: peer.LID, GID: peer.GID, RKey: rk})
			}}
		if p.conn, err = crossnic.NewConn(crossnic.Leg{Ctx: e.dev.ctx, QP: e.qp, CQ: e.dev.cq},
			crossnic.Leg{Ctx: p.bak.ctx, QP: p.qp, CQ: p.tap}, keys, false); err != nil {
			return fmt.Errorf("crossnic.NewConn on %v: %w", e, err)
		}
		p.sq, p.rq = p.conn.State()
	}
	return nil
}

// l2Check compares e's Conn with what the timeline last showed, after the
// demo called it for cause; a change of state, or a control message
// received, is recorded and printed.
func (s *scenario) l2Check(e *endpoint, cause string) {
	p := e.l2
	if p == nil {
		return
	}
	sq, rq := p.conn.State()
	st := p.conn.Stats()
	msgs := p.tap.msgs
	p.tap.msgs = nil
	if sq == p.sq && rq == p.rq && len(msgs) == 0 {
		p.stats = st
		return
	}
	c := Layer2Change{At: s.f.Now(), Host: e.dev.host.name, Device: e.dev.name, QP: e.qpName, Cause: cause,
		SQBefore: p.sq, RQBefore: p.rq, SQ: sq, RQ: rq, Before: p.stats, After: st, Msgs: msgs}
	if sq == fsm.SQFallback && p.sq != fsm.SQFallback {
		p.replayed = st.Replayed - p.stats.Replayed
	}
	p.sq, p.rq, p.stats = sq, rq, st
	s.res.Layer2 = append(s.res.Layer2, c)
	s.p.at(c.At, "%v layer 2: %s", e, s.describeL2(e, c))
}

// describeL2 says what a Conn did, from its state and counters.
func (s *scenario) describeL2(e *endpoint, c Layer2Change) string {
	d := func(f func(crossnic.ConnStats) int) int { return f(c.After) - f(c.Before) }
	hidden := d(func(x crossnic.ConnStats) int { return x.HiddenFlushs })
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
	case c.SQBefore == fsm.SQDefault && c.SQ == fsm.SQFallback && msg != nil && !msg.Ack:
		return fmt.Sprintf("%s's notification on %s (its receive counter %d) -> %v: default QP flushed (%d completions hidden), "+
			"%d receives moved, ack sent; %d WRs proven delivered (%d completions synthesized), %d replayed",
			peer, bak, msg.Counter, c.SQ, hidden, moved, delivered, synth, replayed)
	case c.SQBefore == fsm.SQAwaitAck && c.SQ == fsm.SQFallback && msg != nil:
		return fmt.Sprintf("%s's %s (its receive counter %d) -> %v: %d WRs proven delivered (%d completions synthesized), %d replayed on %s",
			peer, msg.kind(), msg.Counter, c.SQ, delivered, synth, replayed, bak)
	case c.SQ == fsm.SQSurfaced:
		return fmt.Sprintf("surfaced (%s): %s; the error reaches the application", c.Cause, e.l2.conn.Reason())
	}
	out := fmt.Sprintf("%s: send queue %v -> %v, receive queue %v -> %v", c.Cause, c.SQBefore, c.SQ, c.RQBefore, c.RQ)
	for _, m := range c.Msgs {
		out += fmt.Sprintf("; %s from %s (receive counter %d)", m.kind(), peer, m.Counter)
	}
	return out
}

// l2Resumed notes the first good completion that came through e's backup
// leg after the fault; once both sides of the QP have one, it prints the
// pause each saw.
func (s *scenario) l2Resumed(e *endpoint) {
	p := e.l2
	if p == nil || p.faultAt == 0 || p.resumed != 0 || p.tap.appWCs == 0 {
		return
	}
	p.resumed = s.f.Now()
	var pauses, legs string
	for _, x := range s.eps {
		if x.qpName != e.qpName || x.l2 == nil {
			continue
		}
		if x.l2.resumed == 0 {
			return
		}
		if pauses != "" {
			pauses, legs = pauses+", ", legs+" <-> "
		}
		pauses += fmt.Sprintf("%s %s", x.dev.host.name, ms(x.l2.resumed-x.l2.faultAt))
		legs += x.l2.bak.String()
	}
	s.p.at(s.f.Now(), "QP %s: completing again on both sides, through %s; pause since the fault: %s; no error reached the application",
		e.qpName, legs, pauses)
}

// l2Summary prints each protected QP side's layer-2 state and counters.
func (s *scenario) l2Summary() {
	p := s.p
	var bak []string
	p.plain("%-2s %-13s %-9s %-9s %-13s %6s %9s %11s %8s %11s %14s  %s", "QP", "layer 2", "sq", "rq", "backup",
		"faults", "delivered", "synthesized", "replayed", "recvs moved", "flushes hidden", "pause")
	for _, r := range s.res.Endpoints {
		if !r.Protected {
			continue
		}
		pause := "-"
		if r.Resumed > 0 {
			pause = ms(r.Pause)
		}
		st := r.L2Stats
		p.plain("%-2s %-13s %-9v %-9v %-13s %6d %9d %11d %8d %11d %14d  %s", r.QP, r.Host+"/"+r.Device, r.L2SQ, r.L2RQ,
			r.Host+"/"+r.Backup, st.Faults, st.Delivered, st.Synthesized, r.Replayed, st.RecvsMoved, st.HiddenFlushs, pause)
		bak = append(bak, r.Backup)
	}
	if len(bak) > 0 {
		p.plain("layer 2: no switching back to the default %s: this demo does not enable it (crossnic.Conn.EnableRecovery), and %v is dead for good: QP B stays on %s",
			s.nicWord(), s.devs[2], bak[0])
	}
}
