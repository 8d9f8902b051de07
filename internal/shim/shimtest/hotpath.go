package shimtest

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/internal/shim/datapath"
	"github.com/ibpath/ibpath/verbs"
)

// Hotpath is a Go stand-in for the shim's C hot path (hotpath.c and
// divert.c in cmd/libibpath) over any verbs objects, with the same
// semantics as seen from the runtime (datapath.Runtime):
//
//   - posts to an undiverted QP are recorded in its rings (WRs copied, up
//     to 4 SGEs, inline payloads copied at post time; more SGEs marks the
//     entry partial) and go to the provider; WRs it refuses are dropped;
//   - polls of an undiverted CQ go to the provider; each successful send
//     completion retires the QP's entries up to and including the next
//     signaled one (counting those that consume a peer receive), each
//     successful receive completion the oldest receive; errors retire
//     nothing;
//   - an error completion of an ARMED QP is handed with the rest of its
//     batch to the runtime's Intercept (outside the section Divert waits
//     for) and the poll returns what came before it, unless the QP is
//     not diverted when Intercept returns: then the batch goes to the
//     application whole. A QP diverted while the poll was in flight (C's
//     lip_divert sets the flag, then waits for the polls inside; injected
//     here with DuringPoll) is armed too: its error is layer 2's;
//   - posts to a diverted QP and polls of a diverted CQ go to the runtime,
//     or to the express lane (express.go) when the caller gave it one
//     (WithExpress) and the QP or CQ is on it;
//   - Divert waits for the posts and polls inside the hot path (mu, and
//     a poll in DuringPoll's window).
type Hotpath struct {
	mu sync.Mutex // held for each post or poll inside the hot path
	// inside counts polls in DuringPoll's window, which Divert waits for
	// (left) once it has set its flags.
	inside     int
	left       sync.Cond
	duringPoll func()
	rt         datapath.Runtime
	ctx        uintptr
	mem        func(addr uint64, n uint32) []byte // reads inline payloads

	qps        map[uint32]*HotQP
	destroying map[uint32]*HotQP // out of qps for a destroy not answered yet (lip_qp_destroying)
	srqs       map[verbs.SRQ]*HotSRQ
	dcq        map[verbs.CQ]bool // diverted CQs

	divertErr   error                 // injected: Divert fails with it
	undivertErr error                 // injected: Undivert fails with it
	undiverts   int                   // successful Undivert calls
	corrupt     func(*datapath.Rings) // injected: edits what Divert returns
	released    []verbs.CQ
	retired     map[uint32]int // Retire calls per QP
	goPolls     int            // polls sent to Runtime.PollCQ
	intercept   int            // Intercept calls
	x           *expressLane   // the express lane; nil unless WithExpress
	noProgress  bool           // injected: Progress knows no QP
	nudges      int            // nudges posted (Nudger)
	nudgeWCs    int            // nudge completions dropped from polls

	wakeMu sync.Mutex
	wakes  map[verbs.CQ]int // Wake calls per CQ (Waker)
	given  []GivenBack      // GiveBack calls, in order (EventGiver)
}

// MaxSGE is how many SGEs a ring entry keeps (LIP_MAX_SGE): a WR with
// more is recorded partial, and its QP cannot be replayed.
const MaxSGE = 4

// HotQP is a QP the hot path records (struct lip_qp): its rings and
// flags.
type HotQP struct {
	qp       verbs.QP
	app      datapath.AppQP
	sigAll   bool
	sends    []hotSend
	recvs    []verbs.RecvWR
	notifs   uint64
	recvDone uint64
	posted   uint64 // sends posted in the hot path (Progress)
	retired  uint64 // of those, retired by successful completions
	armed    bool
	diverted bool
	// layer 1's nudge, as nudge.c keeps it: the send slot (RC without
	// sq_sig_all), a send completion seen in the hot path's polls, and
	// 1 + posted when a nudge is out
	nudgeSlot   bool
	sendsPolled bool
	nudgeMark   uint64
	srq         *HotSRQ // receives through it (nil: its own queue)
}

// HotSRQ is an SRQ the hot path follows: its receives, oldest first,
// until a completion of one of its QPs retires one by its wr_id.
type HotSRQ struct {
	srq      verbs.SRQ
	recvs    []verbs.RecvWR
	diverted bool
}

type hotSend struct {
	wr      verbs.SendWR
	inline  []byte
	partial bool
}

// NewHotpath is the hot path of the application context ctx (its id in
// the runtime), calling back into rt; mem reads the process's memory for
// the inline payloads it copies.
func NewHotpath(rt datapath.Runtime, ctx uintptr, mem func(uint64, uint32) []byte) *Hotpath {
	h := &Hotpath{rt: rt, ctx: ctx, mem: mem, qps: map[uint32]*HotQP{}, destroying: map[uint32]*HotQP{}, srqs: map[verbs.SRQ]*HotSRQ{}, dcq: map[verbs.CQ]bool{}, retired: map[uint32]int{},
		wakes: map[verbs.CQ]int{}}
	h.left.L = &h.mu
	return h
}

// Add records a QP the application created (lip_qp_add).
func (h *Hotpath) Add(qp verbs.QP, sendCQ, recvCQ verbs.CQ, sigAll bool) *HotQP {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := &HotQP{qp: qp, sigAll: sigAll, nudgeSlot: !sigAll, app: datapath.AppQP{Ctx: h.ctx, QPN: qp.QPN(), SendCQ: sendCQ, RecvCQ: recvCQ}}
	h.qps[qp.QPN()] = q
	return q
}

// AddSRQ records an SRQ the application created and layer 2 follows
// (lip_srq_add).
func (h *Hotpath) AddSRQ(srq verbs.SRQ) *HotSRQ {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &HotSRQ{srq: srq}
	h.srqs[srq] = s
	return s
}

// PostSRQRecv is the hot path's post_srq_recv: recorded, then to the
// provider; to the runtime once the SRQ is diverted.
func (h *Hotpath) PostSRQRecv(s *HotSRQ, wrs []verbs.RecvWR) (int, error) {
	h.mu.Lock()
	if s.diverted {
		h.mu.Unlock()
		return h.rt.PostSRQRecv(s.srq, wrs)
	}
	defer h.mu.Unlock()
	start := len(s.recvs)
	for _, w := range wrs {
		w.SGList = append([]verbs.SGE(nil), w.SGList...)
		s.recvs = append(s.recvs, w)
	}
	n, err := s.srq.PostRecv(wrs)
	if err != nil {
		s.recvs = s.recvs[:start+n]
	}
	return n, err
}

// DivertSRQ implements datapath.SRQHotpath (lip_srq_divert).
func (h *Hotpath) DivertSRQ(ctx uintptr, srq verbs.SRQ) ([]verbs.RecvWR, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.srqs[srq]
	if s == nil || s.diverted || ctx != h.ctx {
		return nil, errors.New("divert SRQ: unknown or already diverted")
	}
	s.diverted = true
	return append([]verbs.RecvWR(nil), s.recvs...), nil
}

// Remove forgets a QP the application destroys (lip_qp_remove). Until
// the provider answers (Restore, Destroyed) a success of it polled
// meanwhile is still retired in its rings (lip_qp_destroying).
func (h *Hotpath) Remove(q *HotQP) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.qps, q.app.QPN)
	h.destroying[q.app.QPN] = q
}

// Restore takes back a QP whose destroy failed (lip_qp_restore).
func (h *Hotpath) Restore(q *HotQP) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.destroying, q.app.QPN)
	h.qps[q.app.QPN] = q
}

// Destroyed forgets a QP the provider destroyed.
func (h *Hotpath) Destroyed(q *HotQP) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.destroying, q.app.QPN)
}

// PostSend is the interposed ibv_post_send: recorded in the QP's rings,
// then to the provider; to the runtime (or the lane) once the QP is
// diverted.
func (h *Hotpath) PostSend(q *HotQP, wrs []verbs.SendWR) (int, error) {
	h.mu.Lock()
	if q.diverted {
		h.mu.Unlock()
		return h.divertedPostSend(q, wrs)
	}
	defer h.mu.Unlock()
	return h.recordSends(q, wrs, q.qp.PostSend)
}

// recordSends records wrs in q's send ring (post_recorded), then posts
// them with post; the WRs it refuses are dropped again. h.mu held.
func (h *Hotpath) recordSends(q *HotQP, wrs []verbs.SendWR, post func([]verbs.SendWR) (int, error)) (int, error) {
	start := len(q.sends)
	for _, w := range wrs {
		e := hotSend{wr: w}
		e.wr.SGList = append([]verbs.SGE(nil), w.SGList...)
		if len(w.SGList) > MaxSGE {
			e.partial = true
		}
		if w.SendFlags&verbs.SendInline != 0 {
			for _, s := range w.SGList {
				e.inline = append(e.inline, h.mem(s.Addr, s.Length)...)
			}
		}
		q.sends = append(q.sends, e)
	}
	n, err := post(wrs)
	q.sends = q.sends[:start+n] // refused (or not posted): void
	q.posted += uint64(n)
	return n, err
}

// PostRecv is the interposed ibv_post_recv, recorded as PostSend.
func (h *Hotpath) PostRecv(q *HotQP, wrs []verbs.RecvWR) (int, error) {
	h.mu.Lock()
	if q.diverted {
		h.mu.Unlock()
		return h.divertedPostRecv(q, wrs)
	}
	defer h.mu.Unlock()
	return recordRecvs(q, wrs, q.qp.PostRecv)
}

// recordRecvs is recordSends for receives (recv_recorded).
func recordRecvs(q *HotQP, wrs []verbs.RecvWR, post func([]verbs.RecvWR) (int, error)) (int, error) {
	start := len(q.recvs)
	for _, w := range wrs {
		w.SGList = append([]verbs.SGE(nil), w.SGList...)
		q.recvs = append(q.recvs, w)
	}
	n, err := post(wrs)
	q.recvs = q.recvs[:start+n]
	return n, err
}

// PollCQ is the interposed ibv_poll_cq: the provider's completions,
// retired in the rings, an armed QP's error handed to the runtime; the
// runtime's (or the lane's) once the CQ is diverted.
func (h *Hotpath) PollCQ(cq verbs.CQ, wc []verbs.WC) (int, error) {
	h.mu.Lock()
	if h.dcq[cq] {
		h.mu.Unlock()
		return h.divertedPollCQ(cq, wc)
	}
	n, err := cq.Poll(wc)
	in := false
	if h.duringPoll != nil && hasError(wc[:n]) {
		f := h.duringPoll
		h.duringPoll = nil
		h.inside, in = h.inside+1, true
		h.mu.Unlock()
		f()
		h.mu.Lock()
	}
	leave := func() {
		if in {
			h.inside, in = h.inside-1, false
			h.left.Broadcast()
		}
	}
	for i := 0; i < n; i++ {
		q := h.qps[wc[i].QPNum]
		if q == nil {
			if d := h.destroying[wc[i].QPNum]; d != nil && wc[i].Status == verbs.WCSuccess {
				h.retireLocked(d, wc[i]) // its destroy may be refused: the rings stay true
			}
			continue
		}
		if h.nudgeWC(q, wc[i]) && !nudgeFault(q, wc[i]) {
			copy(wc[i:], wc[i+1:n])
			n--
			i--
			continue
		}
		if wc[i].Status != verbs.WCSuccess {
			if q.armed {
				h.intercept++
				n = i + 1 + h.dropNudges(wc[i+1:n])
				leave()
				h.mu.Unlock() // lip_leave, then the hook
				h.rt.Intercept(h.ctx, cq, wc[i:n])
				h.mu.Lock()
				if q.diverted {
					h.mu.Unlock()
					return i, nil
				}
			}
			continue // errors retire nothing
		}
		h.retireLocked(q, wc[i])
	}
	leave()
	h.mu.Unlock()
	return n, err
}

// retireLocked retires what a successful completion of q accounts for in
// its rings. h.mu held.
func (h *Hotpath) retireLocked(q *HotQP, wc verbs.WC) {
	if wc.Opcode&verbs.WCRecv != 0 && q.srq != nil {
		for i, w := range q.srq.recvs {
			if w.WRID == wc.WRID {
				q.srq.recvs = append(q.srq.recvs[:i], q.srq.recvs[i+1:]...)
				q.recvDone++
				break
			}
		}
		return
	}
	if wc.Opcode&verbs.WCRecv != 0 {
		if len(q.recvs) > 0 {
			q.recvs = q.recvs[1:]
			q.recvDone++
		}
		return
	}
	q.sendsPolled = true
	for len(q.sends) > 0 {
		e := q.sends[0]
		q.sends = q.sends[1:]
		q.retired++
		if e.wr.Opcode.ConsumesRecv() {
			q.notifs++
		}
		if q.sigAll || e.wr.SendFlags&verbs.SendSignaled != 0 {
			break
		}
	}
	if q.nudgeMark != 0 && q.retired >= q.nudgeMark {
		q.nudgeMark = 0 // a WR posted after the nudge completed: its slot is free
	}
}

// Nudge implements datapath.Nudger (lip_nudge): a zero-length WRITE, unsignaled,
// after the WRs in flight, not recorded in the rings.
func (h *Hotpath) Nudge(q datapath.AppQP) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	fq := h.qps[q.QPN]
	switch {
	case fq == nil:
		return fmt.Errorf("nudge QP %#x: %w", q.QPN, syscall.ENOENT)
	case !fq.nudgeSlot:
		return fmt.Errorf("nudge QP %#x: %w", q.QPN, syscall.ENOSPC)
	case !fq.sendsPolled:
		return fmt.Errorf("nudge QP %#x: %w", q.QPN, syscall.ENOTSUP)
	case fq.diverted:
		return fmt.Errorf("nudge QP %#x: %w", q.QPN, syscall.EBUSY)
	case fq.nudgeMark != 0 && fq.retired < fq.nudgeMark:
		return fmt.Errorf("nudge QP %#x: %w", q.QPN, syscall.EALREADY)
	case fq.posted == fq.retired:
		return fmt.Errorf("nudge QP %#x: %w", q.QPN, syscall.ENODATA)
	}
	fq.nudgeMark = fq.posted + 1
	if _, err := fq.qp.PostSend([]verbs.SendWR{{WRID: crossnic.NudgeWRID, Opcode: verbs.WRRDMAWrite}}); err != nil {
		fq.nudgeMark = 0
		return fmt.Errorf("nudge QP %#x: %w", q.QPN, err)
	}
	h.nudges++
	return nil
}

// nudgeWC says whether wc, of q, is a nudge's completion, which no one
// sees (lip_nudge_wc). h.mu held.
func (h *Hotpath) nudgeWC(q *HotQP, wc verbs.WC) bool {
	if q.nudgeMark == 0 || wc.WRID != crossnic.NudgeWRID {
		return false
	}
	q.nudgeMark = 0
	h.nudgeWCs++
	return true
}

// nudgeFault says whether a nudge's error completion is the fault of an
// armed QP that layer 2 has not taken (lip_nudge_fault): an error other
// than a flush goes to layer 2 as the QP's first error.
func nudgeFault(q *HotQP, wc verbs.WC) bool {
	return wc.Status != verbs.WCWRFlushErr && q.armed && !q.diverted
}

// dropNudges removes the nudges' completions from wcs in place and
// returns how many are left (lip_nudge_drop), but for a nudge's fault
// (nudgeFault). h.mu held.
func (h *Hotpath) dropNudges(wcs []verbs.WC) int {
	kept := 0
	for _, wc := range wcs {
		if q := h.qps[wc.QPNum]; q != nil && h.nudgeWC(q, wc) && !nudgeFault(q, wc) {
			continue
		}
		wcs[kept] = wc
		kept++
	}
	return kept
}

// NudgeCounts reads the nudges posted and their completions dropped.
func (h *Hotpath) NudgeCounts() (posted, dropped int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nudges, h.nudgeWCs
}

// Progress implements datapath.Progresser (lip_qp_progress);
// SetNoProgress turns it off (a hot path without it).
func (h *Hotpath) Progress(q datapath.AppQP) (posted, retired uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fq := h.qps[q.QPN]
	if fq == nil || h.noProgress {
		return 0, 0, false
	}
	return fq.posted, fq.retired, true
}

// DuringPoll injects C's window between a poll's check of its CQ and its
// handling of the completions: f runs once, in the next poll of an
// undiverted CQ that returns an error completion, right after the
// provider's poll, outside the hot path's lock but inside the section
// Divert waits for. A Divert that f sets off (a PORT_ERR on another
// thread) sets its QP's flag and waits for this poll to leave, as
// lip_divert does: the poll goes on with the QP diverted.
func (h *Hotpath) DuringPoll(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.duringPoll = f
}

// hasError reports whether wcs hold an error completion.
func hasError(wcs []verbs.WC) bool {
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess {
			return true
		}
	}
	return false
}

// Arm implements datapath.Hotpath (lip_arm).
func (h *Hotpath) Arm(q datapath.AppQP, armed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fq := h.qps[q.QPN]; fq != nil {
		fq.armed = armed
	}
}

// Divert implements datapath.Hotpath (lip_divert).
func (h *Hotpath) Divert(q datapath.AppQP) (datapath.Rings, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.divertErr != nil {
		return datapath.Rings{}, h.divertErr
	}
	fq := h.qps[q.QPN]
	if fq == nil || fq.diverted {
		return datapath.Rings{}, errors.New("divert: QP unknown or already diverted")
	}
	fq.diverted = true
	h.dcq[q.SendCQ], h.dcq[q.RecvCQ] = true, true
	for h.inside > 0 { // lip_quiesce
		h.left.Wait()
	}
	r := ringsOf(fq)
	if h.corrupt != nil {
		h.corrupt(&r)
	}
	return r, nil
}

// ringsOf is what fq's rings hold (readRings). h.mu held.
func ringsOf(fq *HotQP) datapath.Rings {
	var r datapath.Rings
	inline := false
	for _, e := range fq.sends {
		r.Sends = append(r.Sends, e.wr)
		r.Inline = append(r.Inline, e.inline)
		inline = inline || e.inline != nil
		if e.partial {
			r.Unreplayable = "a WR with more than 4 SGEs"
		}
	}
	if !inline {
		r.Inline = nil
	}
	r.Recvs = append(r.Recvs, fq.recvs...)
	r.NotifsDone, r.RecvsDone = fq.notifs, fq.recvDone
	return r
}

// Undivert loads the QP's rings with st and gives its posts back to the
// hot path (lip_undivert).
func (h *Hotpath) Undivert(q datapath.AppQP, st datapath.Rings) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.undivertErr != nil {
		return h.undivertErr
	}
	fq := h.qps[q.QPN]
	if fq == nil || !fq.diverted {
		return errors.New("undivert: QP unknown or not diverted")
	}
	if l := h.laneOf(q.QPN); l != nil {
		return errors.New("undivert: QP on the express lane")
	}
	loadRings(fq, st)
	fq.nudgeMark = 0 // the QP was reset: no nudge is out
	fq.diverted = false
	h.undiverts++
	return nil
}

// loadRings empties fq's rings and records st's WRs and counters in them
// (lip_rings_load and the counters). h.mu held.
func loadRings(fq *HotQP, st datapath.Rings) {
	fq.sends, fq.recvs = nil, append([]verbs.RecvWR(nil), st.Recvs...)
	for i, w := range st.Sends {
		e := hotSend{wr: w, partial: len(w.SGList) > MaxSGE}
		if i < len(st.Inline) {
			e.inline = st.Inline[i]
		}
		fq.sends = append(fq.sends, e)
	}
	fq.notifs, fq.recvDone = st.NotifsDone, st.RecvsDone
	// positions as lip_rings_load leaves them: the rings restart empty at
	// their heads, holding the given WRs
	fq.retired = fq.posted
	fq.posted += uint64(len(fq.sends))
}

// Retire implements datapath.Hotpath (lip_retire).
func (h *Hotpath) Retire(ctx uintptr, wc verbs.WC) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.qps[wc.QPNum]
	if q == nil || ctx != h.ctx {
		return
	}
	h.retired[wc.QPNum]++
	if wc.Status == verbs.WCSuccess {
		h.retireLocked(q, wc)
	}
}

// Release implements datapath.Hotpath (lip_release).
func (h *Hotpath) Release(cq verbs.CQ) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.dcq, cq)
	h.released = append(h.released, cq)
}

// FailDivert makes every later Divert fail with err.
func (h *Hotpath) FailDivert(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.divertErr = err
}

// CorruptRings makes Divert hand over rings edited by fn.
func (h *Hotpath) CorruptRings(fn func(*datapath.Rings)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.corrupt = fn
}

// State reads a QP's flags and ring sizes.
func (h *Hotpath) State(q *HotQP) (armed, diverted bool, sends, recvs int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return q.armed, q.diverted, len(q.sends), len(q.recvs)
}

// Counts reads the polls sent to the runtime, the error completions
// handed to its Intercept, and the CQs it released.
func (h *Hotpath) Counts() (goPolls, intercepts int, released []verbs.CQ) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.goPolls, h.intercept, append([]verbs.CQ(nil), h.released...)
}

// Undiverts counts the successful Undivert calls.
func (h *Hotpath) Undiverts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.undiverts
}

// RetiredOf counts the runtime's Retire calls for QP qpn.
func (h *Hotpath) RetiredOf(qpn uint32) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.retired[qpn]
}

// FailUndivert makes every later Undivert fail with err.
func (h *Hotpath) FailUndivert(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.undivertErr = err
}

// SetNoProgress turns Progress off (on: it knows no QP).
func (h *Hotpath) SetNoProgress(off bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noProgress = off
}

// Positions reads the send positions of QP qpn's rings: the sends posted
// in the hot path and those retired; ok is false for a QP it does not
// record.
func (h *Hotpath) Positions(qpn uint32) (posted, retired uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.qps[qpn]
	if q == nil {
		return 0, 0, false
	}
	return q.posted, q.retired, true
}

// DivertedCQ reports whether the polls of cq go to the runtime.
func (h *Hotpath) DivertedCQ(cq verbs.CQ) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dcq[cq]
}

// App is the QP as the runtime names it.
func (q *HotQP) App() datapath.AppQP { return q.app }

// UseSRQ records that q receives through s (before its first receive).
func (h *Hotpath) UseSRQ(q *HotQP, s *HotSRQ) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q.srq = s
}
