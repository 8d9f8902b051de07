package crossnic

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// srqRNRTimer is the least RNR timer the backup QPs of an SRQ's QPs are
// connected with: 1.28 ms (IBA's encoding 14). Their peers' control
// messages can meet the backup SRQ empty, before the failover that moves
// the receives there, and are resent after it, without end, until they
// land: every 10 us, the other backups' timer, each of an SRQ's QPs
// would send a packet per 10 us for as long as the move takes (a few ms
// for sixteen QPs under TCG in the lab).
const srqRNRTimer = 14

// CreateSRQ mirrors ibv_create_srq: an SRQ on the backup device with room
// for the application's WRs and one more, on which the control receive
// of the group (SRQGroup) is posted now, before any QP on it can be
// connected and a peer's control message arrive. The QPs the application
// creates on defSRQ get their backup QPs on it (CreateQP).
func (s *Shadow) CreateSRQ(defPD verbs.PD, defSRQ verbs.SRQ) error {
	bpd, err := s.pd(defPD)
	if err != nil {
		return err
	}
	sc, ok := bpd.(verbs.SRQCreator)
	if !ok {
		return fmt.Errorf("crossnic: shadow ibv_create_srq on %s: %w", s.bakDesc.Name,
			verbs.Errorf("ibv_create_srq", verbs.EOPNOTSUPP, "the backup device's PD makes no SRQ"))
	}
	a, err := defSRQ.Query()
	if err != nil {
		return fmt.Errorf("crossnic: shadow: ibv_query_srq of the application's SRQ: %w", err)
	}
	b, err := sc.CreateSRQ(verbs.SRQAttr{MaxWR: a.MaxWR + 1, MaxSGE: a.MaxSGE})
	if err != nil {
		return fmt.Errorf("crossnic: shadow ibv_create_srq on %s: %w", s.bakDesc.Name, err)
	}
	if _, err := b.PostRecv([]verbs.RecvWR{{WRID: ctrlRecvWRID}}); err != nil {
		_ = b.Destroy()
		return fmt.Errorf("crossnic: shadow: post the control receive on the backup SRQ: %w", err)
	}
	s.srqs[defSRQ] = b
	return nil
}

// DestroySRQ releases the backup of defSRQ, which the application
// destroyed (its QPs, and so theirs, are gone: an SRQ in use cannot be
// destroyed); an SRQ the shadow does not know is not an error.
func (s *Shadow) DestroySRQ(defSRQ verbs.SRQ) error {
	b := s.srqs[defSRQ]
	if b == nil {
		return nil
	}
	delete(s.srqs, defSRQ)
	if err := b.Destroy(); err != nil {
		return fmt.Errorf("crossnic: shadow ibv_destroy_srq on %s: %w", s.bakDesc.Name, err)
	}
	return nil
}

// AdoptSRQ protects defSRQ, whose receives a data path that ran without a
// group recorded so far (the shim's hot path): the group starts with
// recvs, its outstanding receives, oldest first. Its QPs join it with
// AdoptSRQConn.
func (s *Shadow) AdoptSRQ(defSRQ verbs.SRQ, recvs []verbs.RecvWR) (*SRQGroup, error) {
	b := s.srqs[defSRQ]
	if b == nil {
		return nil, fmt.Errorf("crossnic: shadow: the application's SRQ has no backup")
	}
	lkeys := make(map[uint32]uint32, len(s.lkeys))
	for k, v := range s.lkeys {
		lkeys[k] = v
	}
	g, err := newSRQGroup(defSRQ, b, &KeyMap{LKeys: lkeys}, false)
	if err != nil {
		return nil, err
	}
	for i := range recvs {
		if err := g.ring.record(&recvs[i]); err != nil {
			return nil, fmt.Errorf("%w: SRQ receive %d: %w", ErrResume, i, err)
		}
	}
	return g, nil
}

// AdoptSRQConn is Adopt for a QP that receives through the SRQ of g: st
// has no receives (they are the group's), RecvsDone counts this QP's.
func (s *Shadow) AdoptSRQConn(defQP verbs.QP, defCQ verbs.CQ, st Resume, g *SRQGroup) (*Conn, error) {
	if len(st.Recvs) > 0 {
		return nil, fmt.Errorf("crossnic: adopt QP %#x: %w: %d receives of a QP on an SRQ", defQP.QPN(), ErrResume, len(st.Recvs))
	}
	sq := s.qps[defQP]
	if sq == nil || sq.srq == nil || s.srqs[sq.srq] != g.bak {
		return nil, fmt.Errorf("crossnic: adopt QP %#x: it does not receive through the group's SRQ", defQP.QPN())
	}
	c, err := s.Conn(defQP, defCQ)
	if err != nil {
		return nil, err
	}
	if err := g.join(c); err != nil {
		return nil, err
	}
	if err := c.resume(st); err != nil {
		g.Leave(c)
		return nil, fmt.Errorf("crossnic: adopt QP %#x: %w", defQP.QPN(), err)
	}
	return c, nil
}

// MapLKey adds the backup lkey of a region registered after the group was
// built, so receives using it can move.
func (g *SRQGroup) MapLKey(defLKey, bakLKey uint32) {
	if g.keys.LKeys == nil {
		g.keys.LKeys = map[uint32]uint32{}
	}
	g.keys.LKeys[defLKey] = bakLKey
}

// BackupSRQ is the backup of the application's SRQ defSRQ.
func (s *Shadow) BackupSRQ(defSRQ verbs.SRQ) (verbs.SRQ, bool) {
	b, ok := s.srqs[defSRQ]
	return b, ok
}
