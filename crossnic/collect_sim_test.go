package crossnic_test

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// Reserved wr_ids (crossnic/control.go) as the default CQ shows them.
const (
	ctrlRecvID = ^uint64(0) - 2
	probeID    = ^uint64(0) - 3
)

// probeErrCQ is a default CQ that, once armed, keeps its node's probe
// completions back until the peer's switch-back notification arrives on
// the same QP, and then returns the held probe right behind it, in the
// same poll, as a transport error, with the QP put in ERR at that
// moment: a probe that failed just after the notification came in.
type probeErrCQ struct {
	verbs.CQ
	qp    verbs.QP
	armed bool
	held  []verbs.WC
	fired bool // the error went out behind the notification, in one poll
}

func (q *probeErrCQ) Poll(wc []verbs.WC) (int, error) {
	n, err := q.CQ.Poll(wc)
	if err != nil || !q.armed || q.fired {
		return n, err
	}
	out := wc[:0]
	var notified bool
	for _, c := range wc[:n] {
		switch {
		case c.WRID == probeID && c.Status == verbs.WCSuccess:
			q.held = append(q.held, c)
			continue
		case c.WRID == ctrlRecvID && c.Opcode&verbs.WCRecv != 0 && c.Status == verbs.WCSuccess:
			notified = true
		}
		out = append(out, c)
	}
	if notified && len(q.held) > 0 && len(out) < len(wc) {
		e := q.held[0]
		e.Status = verbs.WCRetryExcErr
		out = append(out, e)
		q.held, q.fired = nil, true
		_ = q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
	}
	return len(out), nil
}

// probeErrWorld builds a world whose default CQs are probeErrCQs, cuts
// node0's cable for 5 ms and repairs it, the probeErrCQ of node arm
// (-1: none) armed from the repair on, and runs 40 ms.
func probeErrWorld(t *testing.T, p sim.Profile, arm int) (*world, [2]*probeErrCQ) {
	o := worldOpts{cfg: sim.Config{Seed: 61, Profile: p}, retry: 3}
	w, cqs := wrappedWorld(t, o, func(cq verbs.CQ) *probeErrCQ { return &probeErrCQ{CQ: cq} })
	for i, n := range w.n {
		cqs[i].qp = n.def.qp
	}
	a := w.n[0]
	w.run(300*time.Microsecond, 0, 1)
	must(t, w.f.SetLink(a.hca.Port(1), false))
	w.run(5*time.Millisecond, 0, 1)
	if arm >= 0 {
		cqs[arm].armed = true
	}
	must(t, w.f.SetLink(a.hca.Port(1), true))
	w.run(40*time.Millisecond, 0, 1)
	return w, cqs
}

// TestProbeErrorWhileReceivesMoveHome: after a cable pull and its repair,
// the follower's probe fails (RETRY_EXC_ERR, its QP in ERR) right after
// the leader's switch-back notification arrives, both in one poll of the
// default CQ. The notification moves the follower's receives home, which
// first collects what the backup completed; the probe's error resets the
// default QP, which posts the receives there again. It must wait until
// the move is done: handled in the middle of it (Conn.nestedLeg), the
// receives were posted twice (the default QP held 128 for the ring's
// 64: stale copies the next messages would land in). Everything is delivered once, in order,
// and both ends come home.
func TestProbeErrorWhileReceivesMoveHome(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		// a first run finds the follower (the same world without the
		// error: the end that held its sends), the second fails its probe
		w0, _ := probeErrWorld(t, p, -1)
		fol := 0
		if w0.n[1].conn.Stats().FollowHolds > 0 {
			fol = 1
		}
		w, cqs := probeErrWorld(t, p, fol)
		if !cqs[fol].fired {
			t.Fatalf("%s's probe never failed behind the leader's switch-back notification: the test no longer reaches the case", w.n[fol].name)
		}
		cqs[fol].armed = false
		w.run(60*time.Millisecond, 0, 1)
		if err := w.delivered(0, 1); err != nil {
			t.Fatal(err)
		}
		for _, n := range w.n {
			if sq, rq := n.conn.State(); !n.conn.Home() {
				t.Fatalf("%s not home (%v/%v): %s %+v", n.name, sq, rq, n.conn.AwayReason(), n.conn.Stats())
			}
			// the default QP holds each outstanding receive once
			_, onQP := n.def.qp.(*sim.QP).Outstanding()
			if want := len(n.conn.Outstanding().Recvs); onQP != want {
				t.Fatalf("%s's default QP holds %d receives, its Conn %d outstanding: posted twice", n.name, onQP, want)
			}
		}
	})
}
