package shimtest

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/internal/shim/datapath"
	"github.com/ibpath/ibpath/verbs"
)

// The Go stand-in of the express lane (express.c in cmd/libibpath) for
// Hotpath, with the same semantics as seen from the runtime:
//
//   - a post to a QP on the lane goes to its backup QP with the lkeys of
//     non-inline SGEs and the rkeys of RDMA (not zero-length WRITEs) and
//     atomic WRs translated; at the first key it misses, the WRs before it
//     are posted and the rest goes to the Runtime, whose datapath.ErrExpress makes
//     the post dispatch again (at most maxTries times, as DIVERTED_POST);
//     once the QP surfaced, posts go where the older WRs are, the backup
//     QP (flushing them behind those), or the default QP for a WR the
//     backup refuses or whose key misses, and the rest;
//   - a poll of a CQ on the lane drains, alternating which goes first, the
//     backup CQs of its lane QPs (qp_num rewritten, src_qp of receives set
//     to the peer's QPN, control WRs dropped, an error completion or the
//     peer's refusal surfacing the QP: reported to
//     Runtime.ExpressSurfaced once, after the poll left the hot path) and
//     the CQ itself (flush errors of lane QPs hidden until they surfaced,
//     completions of undiverted QPs retired in their rings);
//   - a poll of a diverted CQ off the lane goes to the Runtime, and its
//     datapath.ErrExpress makes the poll dispatch again;
//   - a QP put on the lane with ExpressLane.Record keeps its rings there:
//     loaded with the Record, each WR the lane posts recorded (one the
//     backup refuses dropped), each successful completion the lane hands
//     over retired; ExpressBack takes it off the lane with them.
//
// A caller opts in by handing h.WithExpress() to the runtime's SetHotpath;
// without it diverted QPs and CQs always go to the runtime.

const (
	ctrlSendWRID = ^uint64(0) - 1 // LIP_CTRL_SEND_WRID
	ctrlRecvWRID = ^uint64(0) - 2 // LIP_CTRL_RECV_WRID
	maxTries     = 8              // dispatches of one diverted post or poll
	maxLaneCQQPs = 16             // LIP_XCQ_QPS
)

// errLaneAgain is the lane's LIP_AGAIN: a key missed.
var errLaneAgain = errors.New("shimtest express lane: a key missed")

// laneQP is one QP on the lane (struct lip_xl).
type laneQP struct {
	app    datapath.AppQP
	lane   datapath.ExpressLane
	on     bool // lip_qp.express
	lk, rk map[uint32]uint32
	st     datapath.ExpressStats
	// rec, when the lane records (ExpressLane.Record): the hot path
	// whose rings of hq it keeps
	rec *Hotpath
	hq  *HotQP
}

// expressLane is the lane's state and what callers read of it.
type expressLane struct {
	lanes map[uint32]*laneQP    // by application QPN
	cqs   map[verbs.CQ][]uint32 // the lane QPs each CQ's polls drain (emptied, never removed)
	turn  int
	onErr error // injected: ExpressOn fails with it

	ons                                       []datapath.ExpressLane // every ExpressOn that succeeded, in order
	onQPs                                     []uint32
	tries, keys, cqSets, offs, surfaces, reps int // calls (tries: of ExpressOn), reports
	backs                                     int // ExpressBack calls that took a QP back
}

// ExpressHotpath is Hotpath with the express lane.
type ExpressHotpath struct{ *Hotpath }

var _ datapath.Express = ExpressHotpath{}

// WithExpress gives h an express lane; hand the result to the runtime's
// SetHotpath.
func (h *Hotpath) WithExpress() ExpressHotpath {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.x = &expressLane{lanes: map[uint32]*laneQP{}, cqs: map[verbs.CQ][]uint32{}}
	return ExpressHotpath{h}
}

// laneOf is the lane of a QP that is on it, else nil. h.mu held.
func (h *Hotpath) laneOf(qpn uint32) *laneQP {
	if h.x == nil {
		return nil
	}
	if l := h.x.lanes[qpn]; l != nil && l.on {
		return l
	}
	return nil
}

// divertedPost dispatches a post of n WRs to a diverted QP: to the lane
// while the QP is on it, else to the Runtime, again after LIP_AGAIN or
// datapath.ErrExpress, from the first WR not posted yet.
func (h *Hotpath) divertedPost(q *HotQP, n int, lane func(*laneQP, int) (int, error), hook func(int) (int, error)) (int, error) {
	done := 0
	for try := 0; try < maxTries; try++ {
		h.mu.Lock()
		if l := h.laneOf(q.app.QPN); l != nil {
			k, err := lane(l, done)
			h.mu.Unlock()
			done += k
			if !errors.Is(err, errLaneAgain) {
				return done, err
			}
		} else {
			h.mu.Unlock()
		}
		k, err := hook(done)
		if errors.Is(err, datapath.ErrHome) {
			return done + k, errHome // switched back: the hot path posts the rest
		}
		if !errors.Is(err, datapath.ErrExpress) {
			return done + k, err
		}
	}
	return done, verbs.Errorf("ibv_post", verbs.EIO, "layer 2 neither resolved the keys nor surfaced (%d of %d posted)", done, n)
}

// errHome: the Runtime gave the QP back meanwhile (datapath.ErrHome); the WRs
// from the count returned on go to the hot path (LIP_HOME).
var errHome = errors.New("shimtest hot path: switched back")

func (h *Hotpath) divertedPostSend(q *HotQP, wrs []verbs.SendWR) (int, error) {
	n, err := h.divertedPost(q, len(wrs),
		func(l *laneQP, from int) (int, error) { return l.postSend(q, wrs[from:]) },
		func(from int) (int, error) { return h.rt.PostSend(h.ctx, q.app.QPN, wrs[from:]) })
	if errors.Is(err, errHome) {
		k, err := h.PostSend(q, wrs[n:])
		return n + k, err
	}
	return n, err
}

func (h *Hotpath) divertedPostRecv(q *HotQP, wrs []verbs.RecvWR) (int, error) {
	n, err := h.divertedPost(q, len(wrs),
		func(l *laneQP, from int) (int, error) { return l.postRecv(q, wrs[from:]) },
		func(from int) (int, error) { return h.rt.PostRecv(h.ctx, q.app.QPN, wrs[from:]) })
	if errors.Is(err, errHome) {
		k, err := h.PostRecv(q, wrs[n:])
		return n + k, err
	}
	return n, err
}

// translate is wr with its keys moved to the backup; false when a key
// is not in the tables.
func (l *laneQP) translate(wr verbs.SendWR) (verbs.SendWR, bool) {
	if !crossnic.Replayable(wr.Opcode) {
		return wr, false // the backup cannot carry it: layer 2 surfaces the QP
	}
	d := wr
	d.SGList = append([]verbs.SGE(nil), wr.SGList...)
	var n uint64
	for i := range d.SGList {
		n += uint64(d.SGList[i].Length)
		if wr.SendFlags&verbs.SendInline != 0 {
			continue
		}
		k, ok := l.lk[d.SGList[i].LKey]
		if !ok {
			return d, false
		}
		d.SGList[i].LKey = k
	}
	switch wr.Opcode {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		if n == 0 {
			break // a zero-length WRITE checks no rkey
		}
		fallthrough
	case verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAdd:
		k, ok := l.rk[wr.RKey]
		if !ok {
			return d, false
		}
		d.RKey = k
	}
	return d, true
}

// postSend is xl_post_send. h.mu held.
func (l *laneQP) postSend(q *HotQP, wrs []verbs.SendWR) (int, error) {
	if l.st.Surfaced {
		return l.surfacedSend(q, wrs)
	}
	var out []verbs.SendWR
	for _, w := range wrs {
		d, ok := l.translate(w)
		if !ok {
			break
		}
		out = append(out, d)
	}
	return l.posted(len(out) < len(wrs), &l.st.Sends, func() (int, error) {
		if len(out) == 0 {
			return 0, nil
		}
		if l.rec != nil {
			return l.rec.recordSends(q, wrs[:len(out)], func([]verbs.SendWR) (int, error) { return l.lane.BackupQP.PostSend(out) })
		}
		return l.lane.BackupQP.PostSend(out)
	})
}

// postRecv is xl_post_recv. h.mu held.
func (l *laneQP) postRecv(q *HotQP, wrs []verbs.RecvWR) (int, error) {
	if l.st.Surfaced {
		return l.surfacedRecv(q, wrs)
	}
	var out []verbs.RecvWR
	for _, w := range wrs {
		d, ok := l.translateRecv(w)
		if !ok {
			break
		}
		out = append(out, d)
	}
	return l.posted(len(out) < len(wrs), &l.st.Recvs, func() (int, error) {
		if len(out) == 0 {
			return 0, nil
		}
		if l.rec != nil {
			return recordRecvs(q, wrs[:len(out)], func([]verbs.RecvWR) (int, error) { return l.lane.BackupQP.PostRecv(out) })
		}
		return l.lane.BackupQP.PostRecv(out)
	})
}

// translateRecv is w with its lkeys moved to the backup; false when one
// is not in the table.
func (l *laneQP) translateRecv(w verbs.RecvWR) (verbs.RecvWR, bool) {
	d := verbs.RecvWR{WRID: w.WRID, SGList: append([]verbs.SGE(nil), w.SGList...)}
	for i := range d.SGList {
		k, ok := l.lk[d.SGList[i].LKey]
		if !ok {
			return d, false
		}
		d.SGList[i].LKey = k
	}
	return d, true
}

// surfacedSend is xl_surfaced_send: after the QP surfaced, a post goes
// where the older WRs are, the backup QP (in error: it flushes behind
// them); a WR the backup refuses, or whose key misses, goes to the
// default QP with the rest. h.mu held.
func (l *laneQP) surfacedSend(q *HotQP, wrs []verbs.SendWR) (int, error) {
	return surfacedPost(wrs, l.translate, l.lane.BackupQP.PostSend, q.qp.PostSend, &l.st.Sends)
}

// surfacedRecv is xl_surfaced_recv: surfacedSend for receives.
func (l *laneQP) surfacedRecv(q *HotQP, wrs []verbs.RecvWR) (int, error) {
	return surfacedPost(wrs, l.translateRecv, l.lane.BackupQP.PostRecv, q.qp.PostRecv, &l.st.Recvs)
}

// surfacedPost posts wrs one by one, translated, to the backup with bak
// (counted), and from the first it cannot there on to the default QP
// with def.
func surfacedPost[W any](wrs []W, translate func(W) (W, bool), bak, def func([]W) (int, error), count *uint64) (int, error) {
	i := 0
	for ; i < len(wrs); i++ {
		d, ok := translate(wrs[i])
		if !ok {
			break
		}
		if _, err := bak([]W{d}); err != nil {
			break
		}
		*count++
	}
	if i == len(wrs) {
		return i, nil
	}
	n, err := def(wrs[i:])
	return i + n, err
}

// posted posts the translated WRs, counting them, and says LIP_AGAIN
// after them when a key missed.
func (l *laneQP) posted(miss bool, count *uint64, post func() (int, error)) (int, error) {
	n, err := post()
	if err != nil {
		return n, err
	}
	*count += uint64(n)
	if miss {
		l.st.Misses++
		return n, errLaneAgain
	}
	return n, nil
}

// laneSurf is a QP that surfaced during a poll, reported after it.
type laneSurf struct {
	qpn uint32
	wc  verbs.WC
}

// divertedPollCQ is lip_diverted_poll_cq.
func (h *Hotpath) divertedPollCQ(cq verbs.CQ, wc []verbs.WC) (int, error) {
	for try := 0; try < maxTries; try++ {
		h.mu.Lock()
		if h.x != nil && len(h.x.cqs[cq]) > 0 {
			var surf []laneSurf
			n, err := h.lanePoll(cq, wc, &surf)
			h.mu.Unlock()
			for _, s := range surf {
				h.rt.ExpressSurfaced(h.ctx, s.qpn, s.wc)
			}
			return n, err
		}
		h.goPolls++
		h.mu.Unlock()
		n, err := h.rt.PollCQ(cq, wc)
		if !errors.Is(err, datapath.ErrExpress) {
			return n, err
		}
	}
	return 0, errors.New("shimtest hot path: layer 2 kept answering again without putting the CQ on the lane")
}

// lanePoll is xl_poll. h.mu held.
func (h *Hotpath) lanePoll(cq verbs.CQ, wc []verbs.WC, surf *[]laneSurf) (int, error) {
	h.x.turn++
	defFirst := h.x.turn&1 == 1
	got := 0
	if defFirst {
		k, err := h.laneDefault(cq, wc)
		if err != nil {
			return 0, err
		}
		got = k
	}
	if got < len(wc) {
		k, err := h.laneBackups(cq, wc[got:], surf)
		if err != nil && got == 0 {
			return 0, err
		}
		got += k
	}
	if !defFirst && got < len(wc) {
		k, err := h.laneDefault(cq, wc[got:])
		if err != nil && got == 0 {
			return 0, err
		}
		got += k
	}
	return got, nil
}

// laneDefault polls the application's CQ itself (default_wcs).
func (h *Hotpath) laneDefault(cq verbs.CQ, wc []verbs.WC) (int, error) {
	k, err := cq.Poll(wc)
	if err != nil {
		return 0, err
	}
	kept := 0
	for _, w := range wc[:k] {
		if l := h.laneOf(w.QPNum); l != nil {
			if w.Status != verbs.WCSuccess && !l.st.Surfaced {
				l.st.Hidden++
				continue
			}
		} else if q := h.qps[w.QPNum]; q != nil && !q.diverted && w.Status == verbs.WCSuccess {
			h.retireLocked(q, w)
		}
		wc[kept] = w
		kept++
	}
	return kept, nil
}

// laneBackups drains the backup CQs of cq's lane QPs (poll_backups).
func (h *Hotpath) laneBackups(cq verbs.CQ, wc []verbs.WC, surf *[]laneSurf) (int, error) {
	got := 0
	for _, qpn := range h.x.cqs[cq] {
		l := h.laneOf(qpn)
		if l == nil {
			continue
		}
		brcq := l.lane.BackupRecvCQ
		if brcq == nil {
			brcq = l.lane.BackupCQ
		}
		var bcqs []verbs.CQ
		if l.app.SendCQ == cq {
			bcqs = append(bcqs, l.lane.BackupCQ)
		}
		if l.app.RecvCQ == cq && (len(bcqs) == 0 || brcq != l.lane.BackupCQ) {
			bcqs = append(bcqs, brcq)
		}
		for _, b := range bcqs {
			if got == len(wc) {
				return got, nil
			}
			k, err := b.Poll(wc[got:])
			if err != nil {
				return got, err
			}
			got += h.x.backupWCs(l, wc[got:got+k], surf)
		}
	}
	return got, nil
}

// backupWCs turns completions of l's backup QP into what the
// application sees, in place (backup_wcs); it returns how many it keeps.
func (x *expressLane) backupWCs(l *laneQP, wc []verbs.WC, surf *[]laneSurf) int {
	kept := 0
	for _, w := range wc {
		ctrl := w.WRID == ctrlSendWRID || w.WRID == ctrlRecvWRID
		switch {
		case w.Status != verbs.WCSuccess:
			x.surface(l, w, surf)
			if ctrl {
				continue
			}
		case ctrl:
			l.st.Own++
			if w.WRID == ctrlRecvWRID && w.Opcode&verbs.WCRecv != 0 && crossnic.IsRefusal(w.ImmData) {
				x.surface(l, w, surf) // the peer's refusal
			}
			continue
		default:
			l.st.Completions++
			if w.Opcode&verbs.WCRecv != 0 {
				w.SrcQP = l.lane.PeerQPN
			}
			if l.rec != nil {
				l.rec.retireLocked(l.hq, w)
			}
		}
		w.QPNum = l.app.QPN
		wc[kept] = w
		kept++
	}
	return kept
}

func (x *expressLane) surface(l *laneQP, w verbs.WC, surf *[]laneSurf) {
	if l.st.Surfaced {
		return // already surfaced: layer 2 knows
	}
	l.st.Surfaced = true
	x.reps++
	*surf = append(*surf, laneSurf{qpn: l.app.QPN, wc: w})
}

func (e ExpressHotpath) ExpressOn(q datapath.AppQP, lane datapath.ExpressLane) error {
	h := e.Hotpath
	h.mu.Lock()
	defer h.mu.Unlock()
	h.x.tries++
	if h.x.onErr != nil {
		return h.x.onErr
	}
	fq := h.qps[q.QPN]
	if fq == nil || !fq.diverted {
		return fmt.Errorf("express lane for QP %#x: the hot path has not diverted it", q.QPN)
	}
	l := &laneQP{app: q, lane: lane, on: true, lk: map[uint32]uint32{}, rk: map[uint32]uint32{}}
	for k, v := range lane.LKeys {
		l.lk[k] = v
	}
	if lane.Record != nil {
		if lane.Record.Unreplayable != "" {
			return fmt.Errorf("express lane for QP %#x: its WRs are not whole: %s", q.QPN, lane.Record.Unreplayable)
		}
		loadRings(fq, *lane.Record) // lip_xl_record
		l.rec, l.hq = h, fq
	}
	h.x.lanes[q.QPN] = l
	h.x.ons = append(h.x.ons, lane)
	h.x.onQPs = append(h.x.onQPs, q.QPN)
	return nil
}

func (e ExpressHotpath) ExpressKey(q datapath.AppQP, remote bool, from, to uint32) error {
	h := e.Hotpath
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.x.lanes[q.QPN]
	if l == nil {
		return fmt.Errorf("express key for QP %#x: not on the lane", q.QPN)
	}
	if remote {
		l.rk[from] = to
	} else {
		l.lk[from] = to
	}
	h.x.keys++
	return nil
}

func (e ExpressHotpath) ExpressCQ(cq verbs.CQ, qps []datapath.AppQP) error {
	h := e.Hotpath
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(qps) > maxLaneCQQPs {
		return fmt.Errorf("express lane CQ: %d QPs", len(qps))
	}
	qpns := []uint32{}
	for _, q := range qps {
		if h.x.lanes[q.QPN] == nil {
			return fmt.Errorf("express lane CQ: QP %#x is not on the lane", q.QPN)
		}
		qpns = append(qpns, q.QPN)
	}
	h.x.cqs[cq] = qpns
	h.x.cqSets++
	return nil
}

func (e ExpressHotpath) ExpressSurface(q datapath.AppQP) {
	h := e.Hotpath
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.x.lanes[q.QPN]; l != nil {
		l.st.Surfaced = true
	}
	h.x.surfaces++
}

func (e ExpressHotpath) ExpressOff(q datapath.AppQP) {
	h := e.Hotpath
	h.mu.Lock() // no post or poll is on the lane once it is held
	defer h.mu.Unlock()
	if l := h.x.lanes[q.QPN]; l != nil {
		l.on = false
	}
	h.x.offs++
}

// ExpressBack takes a recording QP off the lane and reads its rings.
func (e ExpressHotpath) ExpressBack(q datapath.AppQP) (datapath.Rings, error) {
	h := e.Hotpath
	h.mu.Lock() // no post or poll is on the lane once it is held
	defer h.mu.Unlock()
	l := h.laneOf(q.QPN)
	if l == nil || l.rec == nil {
		return datapath.Rings{}, fmt.Errorf("express back QP %#x: not on the lane, or not recorded", q.QPN)
	}
	l.on = false
	h.x.offs++
	h.x.backs++
	return ringsOf(l.hq), nil
}

func (e ExpressHotpath) ExpressStats(q datapath.AppQP) datapath.ExpressStats {
	h := e.Hotpath
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.x.lanes[q.QPN]; l != nil {
		return l.st
	}
	return datapath.ExpressStats{}
}

// ExpressCounts is what the lane did: every ExpressOn that succeeded
// (Ons, with the QPs in OnQPs), and the calls of each kind (Tries: of
// ExpressOn) and reports to the runtime (Reps).
type ExpressCounts struct {
	Ons                                       []datapath.ExpressLane
	OnQPs                                     []uint32
	Tries, Keys, CQSets, Offs, Surfaces, Reps int
	Backs                                     int
}

// ExpressCounts reads what the lane did.
func (h *Hotpath) ExpressCounts() ExpressCounts {
	h.mu.Lock()
	defer h.mu.Unlock()
	x := h.x
	return ExpressCounts{Ons: append([]datapath.ExpressLane(nil), x.ons...), OnQPs: append([]uint32(nil), x.onQPs...),
		Tries: x.tries, Keys: x.keys, CQSets: x.cqSets, Offs: x.offs, Surfaces: x.surfaces, Reps: x.reps, Backs: x.backs}
}

// FailExpressOn makes every later ExpressOn fail with err.
func (h *Hotpath) FailExpressOn(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.x.onErr = err
}

// LaneCQ returns the lane QPs the polls of cq drain, and whether the lane
// was ever told about cq.
func (h *Hotpath) LaneCQ(cq verbs.CQ) ([]uint32, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q, ok := h.x.cqs[cq]
	return append([]uint32(nil), q...), ok
}

// LaneKey is the lane's translation of a key of QP qpn.
func (h *Hotpath) LaneKey(qpn uint32, remote bool, from uint32) (uint32, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.x.lanes[qpn]
	if l == nil {
		return 0, false
	}
	m := l.lk
	if remote {
		m = l.rk
	}
	k, ok := m[from]
	return k, ok
}

// DropLaneKey makes the lane miss a key of QP qpn.
func (h *Hotpath) DropLaneKey(qpn uint32, remote bool, from uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.x.lanes[qpn]; l != nil {
		delete(map[bool]map[uint32]uint32{false: l.lk, true: l.rk}[remote], from)
	}
}

// SurfaceUnreported marks QP qpn on the lane as surfaced without the
// report to the runtime: the state between a lane poll that met the
// backup's error and its report (Runtime.ExpressSurfaced), which waits
// for the runtime's lock.
func (h *Hotpath) SurfaceUnreported(qpn uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.x.lanes[qpn]; l != nil {
		l.st.Surfaced = true
	}
}

// LaneStats reads the lane's counters of QP qpn.
func (h *Hotpath) LaneStats(qpn uint32) datapath.ExpressStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.x.lanes[qpn]; l != nil {
		return l.st
	}
	return datapath.ExpressStats{}
}

// OnLane reports whether QP qpn is on the lane and the polls of each of
// cqs drain lane QPs.
func (h *Hotpath) OnLane(qpn uint32, cqs ...verbs.CQ) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.laneOf(qpn) == nil {
		return false
	}
	for _, cq := range cqs {
		if len(h.x.cqs[cq]) == 0 {
			return false
		}
	}
	return true
}
