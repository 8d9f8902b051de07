package sim

import (
	"time"

	"github.com/ibpath/ibpath/verbs"
)

type pktKind uint8

const (
	pktRequest pktKind = iota
	pktAck
	pktReadResp
	pktAtomicResp
	pktNakSeq    // PSN sequence error: resend from psn
	pktNakRNR    // receiver not ready
	pktNakInvReq // invalid request
	pktNakAccess // remote access error
	pktNakRemOp  // remote operational error
)

func (k pktKind) isResponse() bool { return k != pktRequest }

// packet is one RC message on the wire: a whole request (all its MTU-sized
// packets travel as one unit spanning npkts PSNs) or one response.
type packet struct {
	kind     pktKind
	src, dst *Port
	key      uint16 // routing key: picks the spine
	sentAt   time.Duration
	leftAt   time.Duration // the last byte left the source port
	slid     uint16
	sgid     verbs.GID
	global   bool
	sl       uint8
	migReq   bool // BTH MigReq: the sender's QP is MIGRATED
	sqpn     uint32
	dqpn     uint32
	psn      uint32
	npkts    uint32
	op       verbs.WROpcode
	flags    verbs.SendFlags
	length   uint32
	raddr    uint64
	rkey     uint32
	imm      uint32
	cmp      uint64
	swap     uint64
	rnrTimer uint8

	// Request payload: the requester's WQE while it is live, or a copy
	// made when the requester is reset or destroyed with the packet in flight.
	owner  *QP
	resets uint32 // owner's resets when it was sent (staleExec)
	// gone: the requester was reset or destroyed while the packet was
	// in flight, at goneAt (staleExec: whether the responder that takes
	// it began its incarnation after that)
	gone   bool
	goneAt time.Duration
	wqe    *sendWQE
	data   []byte

	rdata []byte // READ response: the responder memory read
	orig  uint64 // atomic response: the original value
}

// PSNs are 24-bit and wrap.
const psnMask = 0xffffff

// psnDiff is a-b as a signed distance in the 24-bit PSN space.
func psnDiff(a, b uint32) int32 { return int32((a-b)&psnMask<<8) >> 8 }

func (f *Fabric) newPacket() *packet {
	if n := len(f.pktFree); n > 0 {
		p := f.pktFree[n-1]
		f.pktFree = f.pktFree[:n-1]
		return p
	}
	return &packet{}
}

func (f *Fabric) freePacket(p *packet) {
	*p = packet{}
	f.pktFree = append(f.pktFree, p)
}

// route finds the port a path's address vector leads to.
func (f *Fabric) route(src *Port, ah *verbs.AHAttr) *Port {
	if src.hca.linkLayer == verbs.LinkLayerEthernet {
		return f.gids[ah.GRH.DGID]
	}
	dst := f.lids[ah.DLID]
	if dst != nil && ah.IsGlobal && !dst.hasGID(ah.GRH.DGID) {
		return nil // the destination HCA drops packets whose DGID is not its own
	}
	return dst
}

func (p *Port) hasGID(g verbs.GID) bool {
	for _, x := range p.gids {
		if x == g {
			return true
		}
	}
	return false
}

// usable: the port can carry traffic now.
func (p *Port) usable() bool {
	return p.state == verbs.PortActive && p.hca.alive && p.leaf != nil && p.leaf.alive
}

// routeLatency reports whether src can reach dst now and how long it takes.
// Traffic between leaves crosses the spine chosen by the routing key (the
// DLID on IB, so the LIDs of an LMC range take different spines).
func (f *Fabric) routeLatency(src, dst *Port, key uint16) (time.Duration, bool) {
	if !src.usable() || !dst.usable() {
		return 0, false
	}
	lat := f.cfg.LinkLatency
	if src.leaf != dst.leaf {
		if !f.spines[int(key)%len(f.spines)].alive {
			return 0, false
		}
		lat += f.cfg.SpineLatency
	}
	return lat, true
}

// transmit puts a packet on the wire along path pa of qp, or drops it
// (and reports false).
func (f *Fabric) transmit(q *QP, pa *path, p *packet, bytes uint32) bool {
	src := pa.port
	p.owner, p.resets = q, q.resets
	if src == nil {
		f.drop(p, "QP has no port")
		return false
	}
	p.src = src
	p.sl = pa.ah.SL
	p.global = pa.ah.IsGlobal
	p.migReq = q.mig == verbs.MigMigrated
	if src.hca.linkLayer == verbs.LinkLayerInfiniBand {
		p.slid = src.lid | uint16(pa.ah.SrcPathBits)
	}
	if pa.ah.IsGlobal && int(pa.ah.GRH.SGIDIndex) < len(src.gids) {
		p.sgid = src.gids[pa.ah.GRH.SGIDIndex]
	} else if len(src.gids) > 0 {
		p.sgid = src.gids[0]
	}
	dst := f.route(src, &pa.ah)
	if dst == nil {
		f.drop(p, "no route")
		return false
	}
	p.dst = dst
	p.key = pa.ah.DLID
	if src.hca.linkLayer == verbs.LinkLayerEthernet {
		p.key = uint16(dst.guid ^ src.guid)
	}
	lat, ok := f.routeLatency(src, dst, p.key)
	if !ok {
		f.drop(p, "route down")
		return false
	}
	if d := max(src.delay, dst.delay); d > 0 {
		lat += time.Duration(f.rng.Int64N(int64(d) + 1))
	}
	if f.lost(p, src, dst) {
		f.drop(p, "lost")
		return false
	}
	// Serialization on the source port, then propagation.
	start := f.now
	if src.busyUntil > start {
		start = src.busyUntil
	}
	src.cnt.xmitPkts += uint64(max(p.npkts, 1))
	ser := time.Duration(float64(bytes+64) * 8 / src.gbps)
	src.busyUntil = start + ser
	p.sentAt, p.leftAt = f.now, start+ser
	at := start + ser + lat - f.now
	if until, held := f.matchHold(p); held {
		// Held in the fabric: it carries what it was sent with, whatever
		// the requester's memory and WQE hold when it arrives.
		detach(p)
		at = max(at, until-f.now)
		if f.tracer != nil {
			f.trace(src.hca, "fault", "%s qp %#x psn %d held in the fabric until %v", kindName(p), q.qpn, p.psn, f.now+at)
		}
	}
	f.schedule(at, event{kind: evPacket, pkt: p})
	if f.tracer != nil {
		f.trace(src.hca, "tx", "%s qp %#x -> %v qp %#x psn %d n %d", kindName(p), q.qpn, dst, p.dqpn, p.psn, p.npkts)
	}
	return true
}

// lost decides random and exact-PSN losses.
func (f *Fabric) lost(p *packet, src, dst *Port) bool {
	if len(f.drops) > 0 && f.matchDrop(p) {
		return true
	}
	var prob float64
	if p.kind == pktRequest {
		prob = max(src.reqLoss, dst.reqLoss)
	} else {
		prob = max(src.respLoss, dst.respLoss)
	}
	if prob > 0 && f.rng.Float64() < prob {
		countLoss(p, src, dst)
		return true
	}
	return false
}

func (f *Fabric) drop(p *packet, why string) {
	f.stats.Dropped++
	if f.tracer != nil {
		h := f.hosts[0].hcas[0]
		if p.src != nil {
			h = p.src.hca
		}
		f.trace(h, "drop", "%s psn %d to qp %#x: %s", kindName(p), p.psn, p.dqpn, why)
	}
	f.freePacket(p)
}

// deliver runs when a packet reaches its destination port.
func (f *Fabric) deliver(p *packet) {
	// A packet that has left its source port arrives unless the rest of its
	// route broke meanwhile; what happens to the sender afterwards does not
	// matter. One whose sender failed while it was still being sent is lost.
	if cut := max(p.src.downAt, p.src.hca.diedAt); cut >= p.sentAt && cut < p.leftAt {
		f.drop(p, "sender failed before the packet left")
		return
	}
	if !p.dst.usable() {
		f.drop(p, "destination down")
		return
	}
	if p.src.leaf != p.dst.leaf && !f.spines[int(p.key)%len(f.spines)].alive {
		f.drop(p, "spine down")
		return
	}
	// It has crossed the switch's egress queue into the port.
	if p.dst.mark > 0 {
		f.congest(p)
	}
	q := p.dst.hca.qps[p.dqpn]
	if q == nil {
		f.drop(p, "no such QP")
		return
	}
	if !q.acceptPath(p) {
		f.drop(p, "path mismatch")
		return
	}
	if p.kind == pktRequest {
		q.onRequest(p)
	} else {
		q.onResponse(p)
	}
	f.freePacket(p)
}

// detachInflight copies the payload of q's request packets still on the
// wire, so they deliver what was sent even after q's slots are reused.
func (f *Fabric) detachInflight(q *QP) {
	for i := range f.events {
		p := f.events[i].pkt
		if p == nil || p.owner != q || p.kind != pktRequest {
			continue
		}
		if !p.gone {
			p.gone, p.goneAt = true, f.now
		}
		detach(p)
	}
}

// detach gives request p a copy of its payload, so it no longer reads the
// requester's WQE or memory.
func detach(p *packet) {
	if p.wqe == nil {
		return
	}
	buf := make([]byte, 0, p.length)
	for _, seg := range payloadSegs(p) {
		buf = append(buf, seg...)
	}
	p.data, p.wqe = buf, nil
}

// payloadSegs lists the memory a request's payload comes from.
func payloadSegs(p *packet) [][]byte {
	switch {
	case p.wqe == nil:
		return [][]byte{p.data}
	case p.wqe.isInline:
		return [][]byte{p.wqe.inline}
	}
	return p.wqe.local
}

func kindName(p *packet) string {
	switch p.kind {
	case pktRequest:
		return p.op.String()
	case pktAck:
		return "ACK"
	case pktReadResp:
		return "READ_RESP"
	case pktAtomicResp:
		return "ATOMIC_ACK"
	case pktNakSeq:
		return "NAK_SEQ"
	case pktNakRNR:
		return "RNR_NAK"
	case pktNakInvReq:
		return "NAK_INV_REQ"
	case pktNakAccess:
		return "NAK_REM_ACCESS"
	case pktNakRemOp:
		return "NAK_REM_OP"
	}
	return "?"
}
