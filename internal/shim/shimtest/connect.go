package shimtest

import "github.com/ibpath/ibpath/verbs"

// ConnectStep is one ibv_modify_qp of an application's RC connect.
type ConnectStep = verbs.ModifyStep

// Timeout is the local ACK timeout the shim's tests connect with
// (4.096 us * 2^10 = 4.2 ms).
const Timeout = 10

// ConnectSteps are the INIT, RTR and RTS modifies of an RC connect, on
// the port ah leaves from, along ah to the QP destQPN, with the given
// remote access and local ACK timeout (retry_cnt 3, rnr_retry 7, path MTU
// 1024, starting PSNs 0).
func ConnectSteps(ah verbs.AHAttr, destQPN uint32, access verbs.AccessFlags, timeout uint8) []ConnectStep {
	c := verbs.RCConnect{AH: ah, Access: access, PathMTU: verbs.MTU1024, DestQPN: destQPN, MaxDestRdAtomic: 1,
		MinRNRTimer: 1, Timeout: timeout, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1}
	return c.Steps()
}
