package crossnic

// Control messages travel as zero-length RDMA_WRITE_WITH_IMM (no memory is
// touched, no rkey checked): the immediate carries the kind in its top two
// bits and a receive counter modulo 2^30 below them. The receiver rebuilds
// the full counter from what it already knows: the value nearest to that
// with the same low bits. A true counter is never behind it and never
// 2^29 ahead; one behind it (the peer's HCA ACKed a message and died
// before the receive's completion reached memory) comes out behind, for
// the rewind to refuse (ErrCounterMismatch).
type ctrlKind uint32

const (
	ctrlRefuse ctrlKind = 0 // "I cannot fail over (my error surfaced)"
	ctrlNotify ctrlKind = 1 // "I fell back; here is my receive counter"
	ctrlAck    ctrlKind = 2 // "me too; here is mine"
	ctrlSwitch ctrlKind = 3 // "my sends are back on the default QP" (on the default QP)

	ctrlCounterBits = 30
	ctrlCounterMask = 1<<ctrlCounterBits - 1
)

// Reserved work request IDs of ibpath's own WRs on a protected QP (the four
// highest). An application WR with the same wr_id on the same queue would
// be mistaken for them; 64-bit IDs this high are not used in practice.
const (
	ctrlSendWRID   = ^uint64(0) - 1
	ctrlRecvWRID   = ^uint64(0) - 2
	probeWRID      = ^uint64(0) - 3
	ctrlSwitchWRID = ^uint64(0) - 4
)

// ownWRID reports whether id is one of the Conn's own WRs (the reserved
// wr_ids above).
func ownWRID(id uint64) bool { return id >= ctrlSwitchWRID && id <= ctrlSendWRID }

func encodeCtrl(k ctrlKind, counter uint64) uint32 {
	return uint32(k)<<ctrlCounterBits | uint32(counter&ctrlCounterMask)
}

// decodeCtrl never fails today (every kind has a meaning); the error is
// kept for kinds added later.
func decodeCtrl(imm uint32, base uint64) (ctrlKind, uint64, error) {
	k := ctrlKind(imm >> ctrlCounterBits)
	ahead := (uint64(imm&ctrlCounterMask) - base) & ctrlCounterMask
	if behind := ctrlCounterMask + 1 - ahead; ahead >= 1<<(ctrlCounterBits-1) && behind <= base {
		return k, base - behind, nil
	}
	return k, base + ahead, nil
}
