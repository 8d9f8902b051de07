package shimtest

import (
	"bytes"
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// The application's checked traffic. Message k of a QP is an RDMA WRITE
// of its MsgSize bytes into the peer's write region (unsignaled, wr_id
// 2k), then a SEND_WITH_IMM of the same bytes (signaled, wr_id 2k+1,
// immediate k) into the peer's receive k (wr_id RecvWRID+k). What the
// application sees is checked as it polls: every signaled WR completes
// exactly once, in order (CheckSend); every message arrives once, in
// order, with its data, in the receive and in the write region
// (CheckRecv).
const (
	MsgSize  = 64   // bytes per message
	Slots    = 32   // message slots per region, reused in turn
	RecvWRID = 1000 // wr_id of receive k: RecvWRID+k
)

// Regions of a QP's part of its host's buffer (SlotOffset).
const (
	RegionOut   = 0 // the messages it sends
	RegionRecv  = 1 // where the peer's SENDs land
	RegionWrite = 2 // where the peer's WRITEs land
)

// SlotOffset is the offset, in its host's buffer, of message k's slot in
// region r of the QP with index idx (its place among the host's QPs).
func SlotOffset(idx, r, k int) int { return ((idx*3+r)*Slots + k%Slots) * MsgSize }

// BufferSize is the size of the buffer of a host with n QPs.
func BufferSize(n int) int { return n * 3 * Slots * MsgSize }

// Pattern is the content of message k of the QP with index idx on side
// side (each side numbers its hosts 0, 1, ...).
func Pattern(side, idx, k int) []byte {
	b := make([]byte, MsgSize)
	for i := range b {
		b[i] = byte(side*101 + idx*53 + k*31 + i)
	}
	return b
}

// Round is message k's WRs: the WRITE of the slot at addr (lkey) to the
// peer's at peerAddr (rkey), then the SEND_WITH_IMM of the same bytes,
// inline when inline is set.
func Round(k int, addr uint64, lkey uint32, peerAddr uint64, rkey uint32, inline bool) []verbs.SendWR {
	send := verbs.SendWR{WRID: uint64(2*k + 1), Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(k),
		SGList: []verbs.SGE{{Addr: addr, Length: MsgSize, LKey: lkey}}}
	if inline {
		send.SendFlags |= verbs.SendInline
	}
	return []verbs.SendWR{{WRID: uint64(2 * k), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: addr, Length: MsgSize, LKey: lkey}},
		RemoteAddr: peerAddr, RKey: rkey}, send}
}

// RecvWR is receive k into the slot at addr (lkey).
func RecvWR(k int, addr uint64, lkey uint32) verbs.RecvWR {
	return verbs.RecvWR{WRID: uint64(RecvWRID + k), SGList: []verbs.SGE{{Addr: addr, Length: MsgSize, LKey: lkey}}}
}

// CheckSend checks a successful send completion that follows done
// others: it must be of the next message's SEND (each signaled WR once,
// in order).
func CheckSend(done int, wc verbs.WC) error {
	if want := uint64(2*done + 1); wc.WRID != want {
		return fmt.Errorf("send completion wr_id %d, want %d (each signaled WR once, in order)", wc.WRID, want)
	}
	return nil
}

// CheckRecv checks a successful receive completion that follows k others
// into the QP's own receive queue: receive k, of message k, whose bytes
// are got (its receive slot) and wrote (its write slot) and must be want.
func CheckRecv(k int, wc verbs.WC, got, wrote, want []byte) error {
	if wc.WRID != uint64(RecvWRID+k) {
		return fmt.Errorf("receive completion wr_id %d, want %d (each receive once, in order)", wc.WRID, RecvWRID+k)
	}
	return CheckMessage(k, wc, got, wrote, want)
}

// CheckMessage checks that a receive completion is message k, with its
// data: got and wrote are its bytes in the receive buffer and in the
// write region, want the message's.
func CheckMessage(k int, wc verbs.WC, got, wrote, want []byte) error {
	if wc.ImmData != uint32(k) || wc.ByteLen != MsgSize {
		return fmt.Errorf("receive of message %d (%d bytes), want message %d of %d bytes (each message once, in order)",
			wc.ImmData, wc.ByteLen, k, MsgSize)
	}
	if !bytes.Equal(got, want) || !bytes.Equal(wrote, want) {
		return fmt.Errorf("message %d arrived without its data", k)
	}
	return nil
}
