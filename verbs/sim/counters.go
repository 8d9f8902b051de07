package sim

import "github.com/ibpath/ibpath/verbs"

// Port counters, under the names a driver gives them in sysfs
// (pathsel.ReadPortCounters; docs/SIMULATOR.md, rule 106):
//
//   - port_xmit_packets: the packets that left the port (a message of n
//     packets counts n);
//   - port_rcv_errors: the packets lost to the port's loss (SetLoss). The
//     model's lossy port is a bad cable, which corrupts what crosses it;
//     the PMA of the switch port at its other end is not modelled, so
//     both directions' losses count here. Exact-PSN drops (DropRequest,
//     DropResponse: a test's tool) count nowhere;
//   - link_downed: the link went down (IBA's LinkDownedCounter);
//   - local_ack_timeout_err: a requester whose primary path leaves by the
//     port timed out waiting for an ACK (mlx5's counter of the same
//     name); packet_seq_err: such a requester got a sequence NAK;
//   - out_of_sequence, duplicate_request: a request arrived at the port
//     with a PSN past the one its responder expected (a gap), or before
//     it (a retransmission of one whose ACK was lost): mlx5's counters
//     of those names;
//   - congestion (SetCongestion, congestion.go; rule 107), on a RoCE
//     port mlx5's DCQCN counters: np_ecn_marked_roce_packets (packets
//     that arrived at the port marked Congestion Experienced),
//     np_cnp_sent (the CNPs the port answered them with, one per marked
//     packet), rp_cnp_handled (the CNPs the port got back for the marked
//     packets it sent); on an InfiniBand port port_xmit_wait (ticks the
//     port waited for credits to send: xmitWaitTicks per marked packet
//     it sent). A port has only its link layer's names.
type portCounters struct {
	xmitPkts, rcvErrors, linkDowned, ackTimeouts, seqNaks, outOfSeq, dupReqs uint64
	ecnMarked, cnpSent, cnpHandled, xmitWait                                 uint64
}

// countSeq counts at request p's destination port its PSN's distance d
// from the one the responder expected.
func countSeq(p *packet, d int32) {
	switch {
	case p.dst == nil:
	case d > 0:
		p.dst.cnt.outOfSeq++
	case d < 0:
		p.dst.cnt.dupReqs++
	}
}

// PortCounters implements the sysfs counters of a port (the names
// above): a verbs.PortCounterReader.
func (c *Context) PortCounters(port uint8) (map[string]uint64, error) {
	f := c.fab()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.usable("port counters"); err != nil {
		return nil, err
	}
	p := c.hca.Port(port)
	if p == nil {
		return nil, verbs.Errorf("port counters", verbs.EINVAL, "%s has no port %d", c.hca.name, port)
	}
	k := p.cnt
	m := map[string]uint64{"port_xmit_packets": k.xmitPkts, "port_rcv_errors": k.rcvErrors, "link_downed": k.linkDowned,
		"local_ack_timeout_err": k.ackTimeouts, "packet_seq_err": k.seqNaks, "out_of_sequence": k.outOfSeq, "duplicate_request": k.dupReqs}
	if c.hca.linkLayer == verbs.LinkLayerEthernet {
		m["np_ecn_marked_roce_packets"], m["np_cnp_sent"], m["rp_cnp_handled"] = k.ecnMarked, k.cnpSent, k.cnpHandled
	} else {
		m["port_xmit_wait"] = k.xmitWait
	}
	return m, nil
}

// countLoss counts a packet lost to the loss of src or dst on the
// lossier of the two.
func countLoss(p *packet, src, dst *Port) {
	s, d := src.reqLoss, dst.reqLoss
	if p.kind != pktRequest {
		s, d = src.respLoss, dst.respLoss
	}
	if s >= d {
		src.cnt.rcvErrors++
	} else {
		dst.cnt.rcvErrors++
	}
}
