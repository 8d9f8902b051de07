package crossnic

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// Control messages travel as zero-length RDMA_WRITE_WITH_IMM (no memory is
// touched, no rkey checked). The immediate's top two bits are its kind:
//
//	bits 31-30  kind
//	kind 1 notify, 2 ack, 3 switch: bits 29-0 a receive counter mod 2^30
//	kind 0, bit 29 clear: refusal; every other bit zero
//	kind 0, bit 29 set:   announcement; bits 28-24 zero, bits 23-0 a PSN
//
// The receiver of a counter rebuilds it in full from what it already
// knows: the value nearest to that with the same low bits. A true counter
// is never behind it and never 2^29 ahead; one behind it (the peer's HCA
// ACKed a message and died before the receive's completion reached
// memory) comes out behind, for the rewind to refuse
// (ErrCounterMismatch).
//
// The shim's express lane (cmd/libibpath/express.c) reads the refusal
// from the immediate too: it tests imm & ctrlRefuseMask == ctrlRefuseBits,
// with the values of cmd/libibpath/ctrl.h, which TestShimControlHeader
// writes from this file (go test ./crossnic -run TestShimControlHeader
// -update) and checks.
type ctrlKind uint32

const (
	ctrlRefuse ctrlKind = 0 // "I cannot fail over (my error surfaced)"
	ctrlNotify ctrlKind = 1 // "I fell back; here is my receive counter"
	ctrlAck    ctrlKind = 2 // "me too; here is mine"
	ctrlSwitch ctrlKind = 3 // "my sends are back on the default QP" (on the default QP)
	// ctrlAnnounce: "my QPs' send PSN after their next resets" (kind 0
	// with the announcement bit; never on the wire as a kind of its own)
	ctrlAnnounce ctrlKind = 4

	ctrlCounterBits = 30
	ctrlCounterMask = 1<<ctrlCounterBits - 1

	// ctrlRefuseMask and ctrlRefuseBits: an immediate is a refusal when
	// imm&ctrlRefuseMask == ctrlRefuseBits (kind 0, announcement bit
	// clear). A refusal carries nothing else: it is sent as 0.
	ctrlRefuseMask = 0xe0000000
	ctrlRefuseBits = 0
	// ctrlAnnounceBit marks an announcement; ctrlPSNMask its PSN, and
	// the bits between must be zero.
	ctrlAnnounceBit = 1 << 29
	ctrlPSNMask     = 1<<24 - 1
)

// Reserved work request IDs of ibpath's own WRs on a protected QP (the five
// highest). An application WR with the same wr_id on the same queue would
// be mistaken for them; 64-bit IDs this high are not used in practice.
const (
	ctrlSendWRID   = ^uint64(0) - 1
	ctrlRecvWRID   = ^uint64(0) - 2
	probeWRID      = ^uint64(0) - 3
	ctrlSwitchWRID = ^uint64(0) - 4
	// NudgeWRID is layer 1's nudge (apm.Config.Nudge): the zero-length
	// RDMA WRITE the shim posts on the application's QP right after a
	// migration. A Conn never posts it; of its completions it sees only
	// an error other than a flush on a QP it protects, the QP's first
	// (onNudge): the shim keeps the rest from layer 2 as from the
	// application. It is reserved here so that every reserved wr_id has
	// one place.
	NudgeWRID = ^uint64(0)
)

// Replayable reports whether a send WR of opcode op can be carried by a
// backup QP: replayed after a fault, or posted there after a failover.
// SEND and RDMA WRITE (with immediate or not), RDMA READ and the two
// atomics (which are never replayed: "no replay with an atomic
// outstanding") are; LOCAL_INV, BIND_MW, SEND_WITH_INV and TSO are not:
// they name keys or state of the default device that the backup does not
// have (an invalidation there would invalidate the wrong key, or none).
// The shim's express lane reads the same set from ctrl.h
// (LIP_REPLAYABLE_OPS).
func Replayable(op verbs.WROpcode) bool { return op < 64 && replayableOps>>uint(op)&1 != 0 }

// replayableOps has bit op set for each opcode Replayable accepts.
const replayableOps = 1<<verbs.WRSend | 1<<verbs.WRSendWithImm | 1<<verbs.WRRDMAWrite | 1<<verbs.WRRDMAWriteWithImm |
	1<<verbs.WRRDMARead | 1<<verbs.WRAtomicCmpAndSwp | 1<<verbs.WRAtomicFetchAdd

// ctrlRecvs is how many control receives head a backup QP's receive queue
// when it is connected or purged: the peer's fallback notification (or
// acknowledgement) and the announcement that follows it consume one each.
const ctrlRecvs = 2

// ownWRID reports whether id is one of the Conn's own WRs (the reserved
// wr_ids above).
func ownWRID(id uint64) bool { return id >= ctrlSwitchWRID && id <= ctrlSendWRID }

// encodeCtrl encodes a notify, ack or switch carrying counter.
func encodeCtrl(k ctrlKind, counter uint64) uint32 {
	return uint32(k)<<ctrlCounterBits | uint32(counter&ctrlCounterMask)
}

// encodeRefusal is the refusal's immediate.
func encodeRefusal() uint32 { return ctrlRefuseBits }

// encodeAnnounce is the immediate announcing psn (24 bits).
func encodeAnnounce(psn uint32) uint32 { return ctrlAnnounceBit | psn&ctrlPSNMask }

// IsRefusal reports whether a control message's immediate is the peer's
// refusal: the test the shim's express lane makes in C.
func IsRefusal(imm uint32) bool { return imm&ctrlRefuseMask == ctrlRefuseBits }

// ControlMessage names the control message an immediate carries, for tools
// that watch a protected QP's completions (the simulator demo): "notify",
// "ack" and "switch" with the sender's receive counter mod 2^30, "refuse",
// "announce" with the announced PSN; "" for an immediate no peer sends.
func ControlMessage(imm uint32) (kind string, value uint32) {
	k, v, err := decodeCtrl(imm, 0)
	if err != nil {
		return "", 0
	}
	return [...]string{ctrlRefuse: "refuse", ctrlNotify: "notify", ctrlAck: "ack", ctrlSwitch: "switch", ctrlAnnounce: "announce"}[k], uint32(v)
}

// decodeCtrl decodes a control immediate: its kind and, for a notify, ack
// or switch, the full counter rebuilt from base; for an announcement the
// PSN. An immediate no peer sends (reserved bits set) is an error.
func decodeCtrl(imm uint32, base uint64) (ctrlKind, uint64, error) {
	k := ctrlKind(imm >> ctrlCounterBits)
	if k == 0 {
		switch {
		case imm == encodeRefusal():
			return ctrlRefuse, 0, nil
		case imm&^(ctrlAnnounceBit|ctrlPSNMask) == 0 && imm&ctrlAnnounceBit != 0:
			return ctrlAnnounce, uint64(imm & ctrlPSNMask), nil
		}
		return 0, 0, fmt.Errorf("control message with immediate %#x: no such kind", imm)
	}
	ahead := (uint64(imm&ctrlCounterMask) - base) & ctrlCounterMask
	if behind := ctrlCounterMask + 1 - ahead; ahead >= 1<<(ctrlCounterBits-1) && behind <= base {
		return k, base - behind, nil
	}
	return k, base + ahead, nil
}
