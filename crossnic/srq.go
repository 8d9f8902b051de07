package crossnic

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// ErrSRQMoved: the SRQ's receives moved to the backup device; the
// application's SRQ on the default device still holds copies of them,
// which a QP receiving through it would consume a second time.
var ErrSRQMoved = errors.New("the SRQ's receives moved to the backup device")

// SRQGroup protects the RC QPs that receive through one shared receive
// queue of the application. A receive posted to an SRQ is no QP's: any
// QP on it may consume it, and a receive cannot be taken back from an
// SRQ (no state of the SRQ flushes it). So the SRQ's receives move to
// the backup as a whole: when one of its QPs fails over, every other one
// fails over with it (its default QP to ERR, consuming nothing more), and
// the receives none of them completed are posted, in order, on the
// shadow SRQ on the backup device that their backup QPs receive through.
// The application's SRQ keeps stale copies of them: its QPs never receive
// on the default device again (no switch back), and a QP created on it
// afterwards is not protected (ErrSRQMoved).
//
// Each member counts the receives its own messages completed (the
// completions' qp_num says which QP a receive served): the counter of
// its fallback handshake, unchanged. The peer's control messages land on
// the shadow SRQ too: the first on the single control receive posted
// there in advance, later ones on one of the application's receives,
// which a zero-length message leaves untouched and which is posted again
// at the shadow SRQ's tail. A member tells them from data by their place
// in the handshake: before its first replayed message the peer sends
// nothing but control messages on the backup QP.
//
// Like Conn, a group and its members are driven by the caller's calls
// and are not safe for concurrent use.
type SRQGroup struct {
	def, bak verbs.SRQ
	keys     *KeyMap
	ring     srqRing
	members  []*Conn
	moved    bool
	sges     []verbs.SGE
	chain    recvChain // the receives moved to the backup SRQ (chain.go)
	stats    SRQStats
}

// SRQStats counts what a group did.
type SRQStats struct {
	Moved    int // receives posted on the shadow SRQ when the group moved
	Requeued int // receives a control message consumed, posted again
}

// NewSRQGroup protects the application's SRQ def with bak, an SRQ on the
// backup device with room for def's max_wr WRs and one more: the control
// receive posted on it now for the first control message of a peer.
// keys translates the lkeys of the receives' SGEs to the backup's.
func NewSRQGroup(def, bak verbs.SRQ, keys *KeyMap) (*SRQGroup, error) {
	return newSRQGroup(def, bak, keys, true)
}

// newSRQGroup is NewSRQGroup; post says whether to post the control
// receive on bak (Shadow.CreateSRQ posted it already).
func newSRQGroup(def, bak verbs.SRQ, keys *KeyMap, post bool) (*SRQGroup, error) {
	da, err := def.Query()
	if err != nil {
		return nil, fmt.Errorf("crossnic: protect SRQ: ibv_query_srq: %w", err)
	}
	ba, err := bak.Query()
	if err != nil {
		return nil, fmt.Errorf("crossnic: protect SRQ: ibv_query_srq of the backup: %w", err)
	}
	if ba.MaxWR < da.MaxWR+1 || ba.MaxSGE < da.MaxSGE {
		return nil, fmt.Errorf("crossnic: protect SRQ: the backup SRQ (%d WRs, %d SGEs) is smaller than the application's (%d, %d) and a control receive",
			ba.MaxWR, ba.MaxSGE, da.MaxWR, da.MaxSGE)
	}
	g := &SRQGroup{def: def, bak: bak, keys: keys, sges: make([]verbs.SGE, 0, max(da.MaxSGE, 1))}
	g.ring.init(da.MaxWR, max(da.MaxSGE, 1))
	if !post {
		return g, nil
	}
	if _, err := bak.PostRecv([]verbs.RecvWR{{WRID: ctrlRecvWRID}}); err != nil {
		return nil, fmt.Errorf("crossnic: protect SRQ: post the control receive on the backup SRQ: %w", err)
	}
	return g, nil
}

// NewSRQConn protects def, a QP that receives through the group's SRQ,
// with bak, a backup QP that receives through the group's backup SRQ
// (no control receive of its own: the group posted one on the SRQ).
// Recovery cannot be enabled on it.
func NewSRQConn(def, bak Leg, keys *KeyMap, sqSigAll bool, g *SRQGroup) (*Conn, error) {
	if g.moved {
		return nil, fmt.Errorf("crossnic: protect QP %#x: %w", def.QP.QPN(), ErrSRQMoved)
	}
	attr, init, err := def.QP.Query(verbs.QPAttrCap | verbs.QPAttrDestQPN)
	if err != nil {
		return nil, fmt.Errorf("crossnic: protect QP: %w", err)
	}
	c, err := newConn(def, bak, keys, sqSigAll, init.Cap, attr.DestQPN)
	if err != nil {
		return nil, err
	}
	if err := g.join(c); err != nil {
		return nil, err
	}
	return c, nil
}

// join makes c, fresh from newConn, a member: its receive ring, which
// stays empty, only counts its receives from now on.
func (g *SRQGroup) join(c *Conn) error {
	if g.moved {
		return fmt.Errorf("crossnic: protect QP %#x: %w", c.defQPN, ErrSRQMoved)
	}
	c.srq = g
	g.members = append(g.members, c)
	return nil
}

// Leave removes c from its group (its QP is being destroyed).
func (g *SRQGroup) Leave(c *Conn) {
	for i, m := range g.members {
		if m == c {
			g.members = append(g.members[:i], g.members[i+1:]...)
			c.srq = nil
			return
		}
	}
}

// Moved reports whether the receives moved to the backup SRQ.
func (g *SRQGroup) Moved() bool { return g.moved }

// Outstanding is the number of receives posted and not completed.
func (g *SRQGroup) Outstanding() int { return g.ring.len() }

// Stats returns the counters.
func (g *SRQGroup) Stats() SRQStats { return g.stats }

// PostRecv posts receive WRs (ibv_post_srq_recv) on the SRQ that serves
// the group now, recorded so they can move. Errors are those of
// ibv_post_srq_recv; a post the dead default device refuses (EIO) is
// kept: the receive moves with the others.
func (g *SRQGroup) PostRecv(wrs []verbs.RecvWR) (int, error) {
	for i := range wrs {
		w := &wrs[i]
		if err := g.ring.record(w); err != nil {
			return i, verbs.Errorf("ibv_post_srq_recv", verbs.ENOMEM, "%v", err)
		}
		var err error
		if g.moved {
			err = g.postBak(w)
		} else if _, err = g.def.PostRecv(wrs[i : i+1]); errors.Is(err, verbs.EIO) {
			err = nil
		}
		if err != nil {
			g.ring.dropLast()
			return i, err
		}
	}
	return len(wrs), nil
}

// postBak posts w on the backup SRQ, its lkeys translated.
func (g *SRQGroup) postBak(w *verbs.RecvWR) error {
	r, err := g.keys.TranslateRecv(g.sges, w)
	if err != nil {
		return err
	}
	if _, err := g.bak.PostRecv([]verbs.RecvWR{r}); err != nil {
		return fmt.Errorf("crossnic: post SRQ receive %d on the backup SRQ: %w", w.WRID, err)
	}
	return nil
}

// move moves the receives to the backup SRQ once, for the member that
// failed over first (trigger): every other member fails over too, and
// its default QP goes to ERR whatever becomes of it (one that cannot
// fail over surfaces its error), so that none consumes a receive of the
// application's SRQ again; what they completed before is collected; then
// the receives none completed are posted on the backup SRQ in order.
func (g *SRQGroup) move(trigger *Conn) error {
	if g.moved {
		return nil
	}
	g.moved = true
	for _, m := range g.members {
		if m == trigger {
			continue
		}
		if m.m.SQ == fsm.SQDefault {
			m.fault(fmt.Sprintf("QP %#x, which receives through the same SRQ, failed over", trigger.defQPN), nil)
		}
		if err := m.def.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); errors.Is(err, verbs.EIO) {
			m.defDied()
		}
		_ = m.drain(&m.def)
	}
	ch := &g.chain
	ch.start(cap(g.sges))
	var err error
	g.ring.each(func(w *verbs.RecvWR) bool {
		var r verbs.RecvWR
		if r, err = g.keys.TranslateRecv(ch.slot(), w); err != nil {
			return false
		}
		ch.add(r)
		if ch.full() {
			err = g.postChain()
			ch.start(cap(g.sges))
		}
		return err == nil
	})
	if perr := g.postChain(); err == nil {
		err = perr
	}
	return err
}

// postChain posts the receives chained in g.chain on the backup SRQ
// (chain.go) and counts those it took.
func (g *SRQGroup) postChain() error {
	ch := &g.chain
	if len(ch.wrs) == 0 {
		return nil
	}
	n, err := g.bak.PostRecv(ch.wrs)
	g.stats.Moved += n
	if err != nil {
		err = fmt.Errorf("crossnic: post SRQ receive %d on the backup SRQ: %w", ch.wrs[min(n, len(ch.wrs)-1)].WRID, err)
	}
	ch.wrs = ch.wrs[:0]
	return err
}

// completed retires the receive a completion of a member names.
func (g *SRQGroup) completed(wrid uint64) bool { return g.ring.retire(wrid) }

// requeue posts again, at the backup SRQ's tail, the receive a
// zero-length control message consumed: its buffer is untouched and the
// application never sees its completion.
func (g *SRQGroup) requeue(wrid uint64) error {
	if !g.ring.retire(wrid) {
		return fmt.Errorf("crossnic: a control message consumed SRQ receive %d, which is not outstanding", wrid)
	}
	w := g.ring.last()
	if err := g.ring.record(w); err != nil {
		return fmt.Errorf("crossnic: requeue SRQ receive %d: %w", wrid, err)
	}
	g.stats.Requeued++
	return g.postBak(g.ring.at(g.ring.tail - 1))
}
