package pathsel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Port counters as the kernel exposes them, summed into the classes a
// HealthMonitor judges (PortCounters). Two directories under each port:
//
//   - counters/: InfiniBand's PortCounters attribute, read from the port's
//     performance management agent (IBA vol. 1, 16.1.3.5): symbol_error,
//     link_error_recovery, link_downed, port_rcv_errors,
//     local_link_integrity_errors, excessive_buffer_overrun_errors,
//     port_rcv_remote_physical_errors (link errors), port_xmit_packets,
//     port_xmit_wait (ticks a packet waited to be sent: congestion). The
//     32-bit and 16-bit PMA counters saturate rather than wrap; a
//     saturated counter stops counting, and the monitor sees no more
//     errors from it.
//   - hw_counters/: the driver's own. Sequence errors, each a gap in a
//     packet sequence: mlx5's (drivers/infiniband/hw/mlx5/counters.c,
//     retrans_q_cnts and out_of_seq_q_cnts) packet_seq_err and
//     implied_nak_seq_err (a requester told of a gap), out_of_sequence
//     (a responder that saw one); rdma_rxe's (drivers/infiniband/sw/rxe/
//     rxe_hw_counters.c) rcvd_seq_err and out_of_seq_request. mlx5's
//     congestion counters (cong_cnts):
//     np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled. rdma_rxe's
//     link_downed, and sent_pkts for the packets sent (rxe has no
//     counters/).
//
// ACK timeouts (local_ack_timeout_err, rxe's completer_retry_err,
// roce_adp_retrans) are not read: a peer that died, or whose own link
// went down, makes every QP to it time out, on a port that is fine.
// Nor are duplicate requests (duplicate_request, both drivers): a
// duplicate is the retransmission of a requester whose ACK timer fired
// first, so a peer slower than its timeout (a short ACK timeout, a busy
// host) makes them on a path that loses nothing; in the lab, with links
// that lost no packet, they were all rdma_rxe counted (2,856 on one port
// in a minute, against no gap at all). A sequence error needs a peer
// that is alive and a path that delivers some packets and loses others.
//
// A counter a device lacks counts 0. A name in both directories
// (link_downed) is taken once, from counters/.
var (
	linkErrorCounters = []string{"symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
		"local_link_integrity_errors", "excessive_buffer_overrun_errors", "port_rcv_remote_physical_errors"}
	seqErrorCounters   = []string{"packet_seq_err", "implied_nak_seq_err", "out_of_sequence", "rcvd_seq_err", "out_of_seq_request"}
	xmitPktCounters    = []string{"port_xmit_packets", "sent_pkts"}
	congestionCounters = []string{"port_xmit_wait", "np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled"}
)

// CounterNames is every counter file ReadPortCounters reads, by class.
func CounterNames() (linkErrors, retrans, xmitPkts, congestion []string) {
	return linkErrorCounters, seqErrorCounters, xmitPktCounters, congestionCounters
}

// SumCounters sums named counter values into their classes; get
// returns a counter's value and whether the port has it.
func SumCounters(get func(name string) (uint64, bool)) PortCounters {
	var c PortCounters
	sum := func(dst *uint64, names []string) {
		for _, n := range names {
			if v, ok := get(n); ok {
				*dst += v
			}
		}
	}
	sum(&c.LinkErrors, linkErrorCounters)
	sum(&c.SeqErrors, seqErrorCounters)
	sum(&c.XmitPkts, xmitPktCounters)
	sum(&c.Congestion, congestionCounters)
	return c
}

// ReadPortCounters reads the counters of port of dev under the sysfs
// root (opts.SysfsRoot, "/sys" when empty), both directories. A port
// with neither directory has no counters (ok false); a counter file that
// cannot be read or parsed is an error naming it.
func ReadPortCounters(opts DiscoverOptions, dev string, port uint8) (c PortCounters, ok bool, err error) {
	root := opts.SysfsRoot
	if root == "" {
		root = "/sys"
	}
	dir := filepath.Join(root, "class", "infiniband", dev, "ports", strconv.Itoa(int(port)))
	vals := map[string]uint64{}
	for _, sub := range []string{"counters", "hw_counters"} {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return c, false, fmt.Errorf("pathsel: port counters: %w", err)
		}
		ok = true
		for _, e := range ents {
			name := e.Name()
			if _, seen := vals[name]; seen || !wanted(name) {
				continue
			}
			path := filepath.Join(dir, sub, name)
			b, err := os.ReadFile(path)
			if err != nil {
				return c, true, fmt.Errorf("pathsel: port counters: %w", err)
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return c, true, fmt.Errorf("pathsel: port counters: %s: %w: %q is not a counter", path, ErrMalformed, strings.TrimSpace(string(b)))
			}
			vals[name] = v
		}
	}
	return SumCounters(func(n string) (uint64, bool) { v, ok := vals[n]; return v, ok }), ok, nil
}

// wanted reports whether a counter file counts in a class.
func wanted(name string) bool {
	for _, l := range [][]string{linkErrorCounters, seqErrorCounters, xmitPktCounters, congestionCounters} {
		for _, n := range l {
			if n == name {
				return true
			}
		}
	}
	return false
}
