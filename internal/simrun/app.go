package simrun

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/verbs"
)

// QP is one side of a connection: the application's RC QP, which it
// posts to and polls through the shim's data path, and what it saw.
// Its send and receive queues complete into CQs of their own, so that an
// error completion (whose opcode verbs leave undefined) is known for a
// send or a receive by its CQ.
type QP struct {
	Proc *Proc
	Conn string // the connection's name
	Side int    // its host's index
	Peer *QP

	qp       verbs.QP
	hq       *shimtest.HotQP
	scq, rcq verbs.CQ

	Sent     int // messages posted
	SendDone int // messages whose SEND completed successfully
	Recvd    int // messages received, each checked
	Errors   int // error completions, and posts or polls refused, the application saw

	MaxPause time.Duration // the longest time without a successful completion while traffic flowed

	lastOK     time.Duration // the last successful completion (0: none yet)
	sigDone    int           // SENDs completed, successfully or not
	lastSend   uint64        // wr_id of the last send completion, +1 (0: none yet)
	recvPosted int           // receives posted
	lastRecv   uint64        // wr_id of the last receive completion, +1 (0: none yet)
	stopped    bool          // an error reached the application: it posts no more
	surfaced   string        // the first error the application saw
	violations []string
	maySurface string // why an error may reach the application (AllowSurface)
}

// Name names the QP by its process: "node0 A".
func (q *QP) Name() string { return q.Proc.Name }

// QPN is the QP's number.
func (q *QP) QPN() uint32 { return q.qp.QPN() }

// Surfaced is the first error the application saw on the QP ("" when
// none).
func (q *QP) Surfaced() string { return q.surfaced }

// Violations are what the application saw that must not be, in order.
func (q *QP) Violations() []string { return append([]string(nil), q.violations...) }

// violate records a violation.
func (q *QP) violate(format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	q.violations = append(q.violations, text)
	if len(q.violations) <= maxViolated {
		q.Proc.w.record(Record{Kind: KindViolation, Proc: q.Proc, QP: q, Text: text})
	}
}

// surface records an error that reached the application; it stops
// posting to the QP.
func (q *QP) surface(text string) {
	q.Errors++
	if q.stopped {
		return
	}
	q.stopped, q.surfaced = true, text
	q.Proc.w.record(Record{Kind: KindSurfaced, Proc: q.Proc, QP: q, Text: text})
}

// slot is message k's slot in region r of the QP's buffer.
func (q *QP) slot(r, k int) (uint64, []byte) {
	o := shimtest.SlotOffset(0, r, k)
	return q.Proc.mr.Addr() + uint64(o), q.Proc.buf[o : o+shimtest.MsgSize]
}

// poll drains both CQs through the data path, as the application's
// ibv_poll_cq, checking every completion.
func (q *QP) poll() {
	var wcs [16]verbs.WC
	for _, cq := range []verbs.CQ{q.scq, q.rcq} {
		for {
			n, err := q.Proc.HP.PollCQ(cq, wcs[:])
			if err != nil {
				q.surface(fmt.Sprintf("ibv_poll_cq failed: %v", err))
				break
			}
			if n == 0 {
				break
			}
			got := wcs[:n]
			if t := q.Proc.w.cfg.Tamper; t != nil {
				got = t(q, got)
			}
			for _, wc := range got {
				q.onWC(cq == q.rcq, wc)
			}
		}
	}
}

// onWC checks one completion: of this QP; a send's in posting order, each
// signaled WR once; a receive's the next message, with its data.
func (q *QP) onWC(recv bool, wc verbs.WC) {
	if wc.QPNum != q.qp.QPN() {
		q.violate("a completion names QP %#x, not the application's %#x: %+v", wc.QPNum, q.qp.QPN(), wc)
		return
	}
	if recv {
		q.onRecv(wc)
		return
	}
	if q.lastSend != 0 && wc.WRID < q.lastSend {
		q.violate("send completion wr_id %d after wr_id %d: each WR once, in posting order", wc.WRID, q.lastSend-1)
		return
	}
	q.lastSend = wc.WRID + 1
	if wc.Status != verbs.WCSuccess {
		if wc.WRID%2 == 1 {
			if wc.WRID != uint64(2*q.sigDone+1) {
				q.violate("send completion wr_id %d (%v), want wr_id %d: each signaled WR once, in order", wc.WRID, wc.Status, 2*q.sigDone+1)
				return
			}
			q.sigDone++
		}
		q.surface(fmt.Sprintf("send WR %d completed with %v", wc.WRID, wc.Status))
		return
	}
	if err := shimtest.CheckSend(q.sigDone, wc); err != nil {
		q.violate("%v", err)
		return
	}
	q.sigDone++
	q.SendDone++
	q.noteOK()
}

// noteOK notes a successful completion, and the pause it ends.
func (q *QP) noteOK() {
	now := q.Proc.w.Now()
	if q.lastOK > 0 {
		gap := now - q.lastOK
		q.MaxPause = max(q.MaxPause, gap)
		if gap >= q.Proc.w.cfg.PauseMin {
			q.Proc.w.record(Record{Kind: KindPause, Proc: q.Proc, QP: q, Pause: gap})
		}
	}
	q.lastOK = now
}

func (q *QP) onRecv(wc verbs.WC) {
	if q.lastRecv != 0 && wc.WRID < q.lastRecv {
		q.violate("receive completion wr_id %d after wr_id %d: each receive once, in posting order", wc.WRID, q.lastRecv-1)
		return
	}
	q.lastRecv = wc.WRID + 1
	if wc.Status != verbs.WCSuccess {
		q.surface(fmt.Sprintf("receive WR %d completed with %v", wc.WRID, wc.Status))
		return
	}
	k := q.Recvd
	_, got := q.slot(shimtest.RegionRecv, k)
	_, wrote := q.slot(shimtest.RegionWrite, k)
	if err := shimtest.CheckRecv(k, wc, got, wrote, shimtest.Pattern(q.Peer.Side, 0, k)); err != nil {
		q.violate("%v", err)
		return
	}
	q.Recvd++
	q.noteOK()
}

// post keeps the QP's receives posted and, while the world posts and
// the window allows, sends its next message.
func (q *QP) post() {
	if q.stopped {
		return
	}
	for q.recvPosted-q.Recvd < recvDepth {
		addr, _ := q.slot(shimtest.RegionRecv, q.recvPosted)
		if _, err := q.Proc.HP.PostRecv(q.hq, []verbs.RecvWR{shimtest.RecvWR(q.recvPosted, addr, q.Proc.mr.LKey())}); err != nil {
			q.surface(fmt.Sprintf("ibv_post_recv refused: %v", err))
			return
		}
		q.recvPosted++
	}
	if !q.Proc.w.posting || q.Sent-q.sigDone >= q.Proc.w.cfg.Window {
		return
	}
	k := q.Sent
	addr, b := q.slot(shimtest.RegionOut, k)
	copy(b, shimtest.Pattern(q.Side, 0, k))
	peer := q.Peer.Proc
	paddr := peer.mr.Addr() + uint64(shimtest.SlotOffset(0, shimtest.RegionWrite, k))
	wrs := shimtest.Round(k, addr, q.Proc.mr.LKey(), paddr, peer.mr.RKey(), false)
	n, err := q.Proc.HP.PostSend(q.hq, wrs)
	if n == len(wrs) {
		q.Sent++
	}
	if err != nil {
		q.surface(fmt.Sprintf("ibv_post_send refused message %d: %v", k, err))
	}
}

// settled: nothing of the QP is outstanding for the application any
// more: every SEND posted completed and every message its peer sent
// arrived, or an error reached it.
func (q *QP) settled() bool {
	return q.stopped || q.sigDone == q.Sent && (q.Peer.stopped || q.Recvd >= q.Peer.Sent)
}
