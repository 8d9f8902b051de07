package crossnic

import "github.com/ibpath/ibpath/verbs"

// A replay, and the move of the receives to the backup, post their WRs in
// chains: one ibv_post_send (ibv_post_recv) for up to chainLen WRs, not
// one per WR. A provider rings the HCA's doorbell once per call (libmlx5
// writes the doorbell record and the BlueFlame register once; rdma_rxe
// makes one write(2) on the uverbs file, and its requester then runs in
// the caller's context), so failing over a QP whose send queue is full
// costs a few calls instead of its depth. In the lab, where the guest's
// one CPU also runs rdma_rxe's data path, 128 replayed WRITEs posted one
// by one took 40 to 420 ms (docs/PERFORMANCE.md).

// chainLen bounds a chain: the scratch stays small however deep the
// rings are, and the bad WR a provider names is found among few.
const chainLen = 64

// sendChain is the scratch of one chain of send WRs: each WR's SGEs in
// a slot of per entries of sges, so a WR's SGE list outlives the next
// one's translation.
type sendChain struct {
	wrs  []verbs.SendWR
	sges []verbs.SGE
	per  int
}

// recvChain is sendChain for receive WRs.
type recvChain struct {
	wrs  []verbs.RecvWR
	sges []verbs.SGE
	per  int
}

// start empties the chain, allocating its scratch the first time, for
// WRs of at most per SGEs.
func (s *sendChain) start(per int) {
	if s.per != per {
		s.wrs, s.sges, s.per = make([]verbs.SendWR, 0, chainLen), make([]verbs.SGE, chainLen*per), per
	}
	s.wrs = s.wrs[:0]
}

// next returns the next WR's place and its SGE slot; keep adds it.
func (s *sendChain) next() (*verbs.SendWR, []verbs.SGE) {
	k := len(s.wrs)
	return &s.wrs[:k+1][k], s.sges[k*s.per : k*s.per : (k+1)*s.per]
}

func (s *sendChain) keep() { s.wrs = s.wrs[:len(s.wrs)+1] }

func (s *sendChain) full() bool { return len(s.wrs) == cap(s.wrs) }

func (s *recvChain) start(per int) {
	if s.per != per {
		s.wrs, s.sges, s.per = make([]verbs.RecvWR, 0, chainLen), make([]verbs.SGE, chainLen*per), per
	}
	s.wrs = s.wrs[:0]
}

// slot returns the next receive's SGE slot.
func (s *recvChain) slot() []verbs.SGE {
	k := len(s.wrs)
	return s.sges[k*s.per : k*s.per : (k+1)*s.per]
}

func (s *recvChain) add(w verbs.RecvWR) { s.wrs = append(s.wrs, w) }

func (s *recvChain) full() bool { return len(s.wrs) == cap(s.wrs) }
