package crossnic

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

var updateHeader = flag.Bool("update", false, "rewrite cmd/libibpath/ctrl.h from crossnic's control constants")

const ctrlHeaderPath = "../cmd/libibpath/ctrl.h"

// ctrlHeader is cmd/libibpath/ctrl.h: crossnic's control-message contract
// as the shim's C code reads it.
func ctrlHeader() string {
	return fmt.Sprintf(`/* Layer 2's control messages as the shim's C code reads them.
 * Written by go test ./crossnic -run TestShimControlHeader -update from
 * crossnic/control.go, which defines them (see there the immediate's
 * layout); that test fails when this file differs. Do not edit. */
#ifndef LIP_CTRL_H
#define LIP_CTRL_H

/* Reserved wr_ids of layer 2's control WRs on a backup QP. */
#define LIP_CTRL_SEND_WRID 0x%016xull
#define LIP_CTRL_RECV_WRID 0x%016xull

/* Layer 2's own WRs (control messages, probes and fences, switch-back
 * notifications) carry the wr_ids from LIP_OWN_WRID_MIN to
 * LIP_CTRL_SEND_WRID: never the application's. */
#define LIP_OWN_WRID_MIN 0x%016xull

/* Reserved wr_id of layer 1's nudge on the application's QP (never
 * passed to the application or to layer 2). */
#define LIP_NUDGE_WRID 0x%016xull

/* Bit op is set for each send opcode a backup QP can carry (Replayable):
 * the express lane sends any other to layer 2, which surfaces the QP. */
#define LIP_REPLAYABLE_OPS 0x%xull

/* A control immediate (host order) is the peer's refusal when
 * (imm & LIP_CTRL_REFUSE_MASK) == LIP_CTRL_REFUSE. */
#define LIP_CTRL_REFUSE_MASK 0x%08xu
#define LIP_CTRL_REFUSE 0x%08xu

/* An announcement: LIP_CTRL_ANNOUNCE | psn (24 bits, LIP_CTRL_PSN_MASK). */
#define LIP_CTRL_ANNOUNCE 0x%08xu
#define LIP_CTRL_PSN_MASK 0x%08xu

#endif
`, ctrlSendWRID, ctrlRecvWRID, ctrlSwitchWRID, NudgeWRID, uint64(replayableOps), uint32(ctrlRefuseMask), uint32(ctrlRefuseBits), uint32(ctrlAnnounceBit), uint32(ctrlPSNMask))
}

// TestShimControlHeader: cmd/libibpath/ctrl.h says what control.go says
// (go test ./crossnic -run TestShimControlHeader -update rewrites it).
func TestShimControlHeader(t *testing.T) {
	want := ctrlHeader()
	if *updateHeader {
		if err := os.WriteFile(ctrlHeaderPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(ctrlHeaderPath)
	if err != nil {
		t.Fatalf("%v (run go test ./crossnic -run TestShimControlHeader -update)", err)
	}
	if string(got) != want {
		t.Errorf("%s is stale: run go test ./crossnic -run TestShimControlHeader -update and commit it", ctrlHeaderPath)
	}
}
