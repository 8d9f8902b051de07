/* Layer 2's control messages as the shim's C code reads them.
 * Written by go test ./crossnic -run TestShimControlHeader -update from
 * crossnic/control.go, which defines them (see there the immediate's
 * layout); that test fails when this file differs. Do not edit. */
#ifndef LIP_CTRL_H
#define LIP_CTRL_H

/* Reserved wr_ids of layer 2's control WRs on a backup QP. */
#define LIP_CTRL_SEND_WRID 0xfffffffffffffffeull
#define LIP_CTRL_RECV_WRID 0xfffffffffffffffdull

/* Layer 2's own WRs (control messages, probes and fences, switch-back
 * notifications) carry the wr_ids from LIP_OWN_WRID_MIN to
 * LIP_CTRL_SEND_WRID: never the application's. */
#define LIP_OWN_WRID_MIN 0xfffffffffffffffbull

/* Reserved wr_id of layer 1's nudge on the application's QP (never
 * passed to the application or to layer 2). */
#define LIP_NUDGE_WRID 0xffffffffffffffffull

/* Bit op is set for each send opcode a backup QP can carry (Replayable):
 * the express lane sends any other to layer 2, which surfaces the QP. */
#define LIP_REPLAYABLE_OPS 0x7full

/* A control immediate (host order) is the peer's refusal when
 * (imm & LIP_CTRL_REFUSE_MASK) == LIP_CTRL_REFUSE. */
#define LIP_CTRL_REFUSE_MASK 0xe0000000u
#define LIP_CTRL_REFUSE 0x00000000u

/* An announcement: LIP_CTRL_ANNOUNCE | psn (24 bits, LIP_CTRL_PSN_MASK). */
#define LIP_CTRL_ANNOUNCE 0x20000000u
#define LIP_CTRL_PSN_MASK 0x00ffffffu

#endif
