package crossnic

import (
	"errors"
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// Resume is what a Conn takes over from a data path that ran the default
// QP without it (the shim's hot path): the WRs the default QP holds that
// the application has not seen complete, in posting order, and the
// counters of the two-way handshake.
type Resume struct {
	// Sends are the outstanding send WRs, oldest first.
	Sends []verbs.SendWR
	// Inline[i] is the copy of Sends[i]'s inline payload taken when it was
	// posted (nil unless Sends[i] has verbs.SendInline). Empty when no WR
	// is inline.
	Inline [][]byte
	// NotifsDone counts the receive-consuming send WRs (SEND,
	// SEND_WITH_IMM, RDMA_WRITE_WITH_IMM) known complete.
	NotifsDone uint64
	// Recvs are the outstanding receive WRs, oldest first.
	Recvs []verbs.RecvWR
	// RecvsDone counts the successful receive completions so far: the
	// receive counter of the handshake.
	RecvsDone uint64
}

// ErrResume: a Resume that contradicts itself or the QP (more WRs than
// its queues hold, an inline WR without its payload, ...).
var ErrResume = errors.New("crossnic: inconsistent resume state")

// resume loads st into the Conn's rings. The rings must be empty (a
// Conn fresh from NewConn).
func (c *Conn) resume(st Resume) error {
	if len(st.Sends) > len(c.sring.recs) {
		return fmt.Errorf("%w: %d outstanding sends, the send ring holds %d", ErrResume, len(st.Sends), len(c.sring.recs))
	}
	if len(st.Recvs) > len(c.rring.recs) {
		return fmt.Errorf("%w: %d outstanding receives, the receive ring holds %d", ErrResume, len(st.Recvs), len(c.rring.recs))
	}
	if len(st.Inline) != 0 && len(st.Inline) != len(st.Sends) {
		return fmt.Errorf("%w: %d inline copies for %d sends", ErrResume, len(st.Inline), len(st.Sends))
	}
	for i := range st.Sends {
		w := &st.Sends[i]
		var copyOf []byte
		if i < len(st.Inline) {
			copyOf = st.Inline[i]
		}
		inline := w.SendFlags&verbs.SendInline != 0
		switch {
		case !inline && copyOf != nil:
			return fmt.Errorf("%w: send %d (wr_id %d) is not inline but has an inline copy", ErrResume, i, w.WRID)
		case inline && uint64(len(copyOf)) != sgeBytes(w.SGList):
			return fmt.Errorf("%w: send %d (wr_id %d): inline copy of %d bytes for %d bytes of SGEs", ErrResume, i, w.WRID, len(copyOf), sgeBytes(w.SGList))
		}
		if err := c.sring.Record(w, inlineReader(copyOf)); err != nil {
			return fmt.Errorf("%w: send %d: %w", ErrResume, i, err)
		}
	}
	for i := range st.Recvs {
		if err := c.rring.Record(&st.Recvs[i]); err != nil {
			return fmt.Errorf("%w: receive %d: %w", ErrResume, i, err)
		}
	}
	c.sring.notifsDone = st.NotifsDone
	c.rring.completed = st.RecvsDone
	return nil
}

// inlineReader serves a WR's inline payload from its copy: SendRing.Record
// reads its SGEs in order, so each read takes the next bytes.
func inlineReader(copyOf []byte) MemReader {
	off := 0
	return func(_ uint64, n uint32) []byte {
		if off+int(n) > len(copyOf) {
			return nil
		}
		b := copyOf[off : off+int(n)]
		off += int(n)
		return b
	}
}

// Adopt protects defQP (completing into defCQ) with its connected backup,
// taking over a QP that ran without a Conn so far: the Conn starts with
// st's outstanding WRs in its rings and st's counters, as if they had
// been posted through it. The backup's control receive was posted when
// the shadow connected it.
func (s *Shadow) Adopt(defQP verbs.QP, defCQ verbs.CQ, st Resume) (*Conn, error) {
	c, err := s.Conn(defQP, defCQ)
	if err != nil {
		return nil, err
	}
	if err := c.resume(st); err != nil {
		return nil, fmt.Errorf("crossnic: adopt QP %#x: %w", defQP.QPN(), err)
	}
	return c, nil
}
