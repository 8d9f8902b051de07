package sim

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

// transMaskBits lists every defined IBV_QP_* bit with the name QPAttrMask.String
// gives it, written out here independently of the verbs package.
var transMaskBits = []struct {
	bit  verbs.QPAttrMask
	name string
}{
	{1 << 0, "STATE"},
	{1 << 1, "CUR_STATE"},
	{1 << 2, "EN_SQD_ASYNC_NOTIFY"},
	{1 << 3, "ACCESS_FLAGS"},
	{1 << 4, "PKEY_INDEX"},
	{1 << 5, "PORT"},
	{1 << 6, "QKEY"},
	{1 << 7, "AV"},
	{1 << 8, "PATH_MTU"},
	{1 << 9, "TIMEOUT"},
	{1 << 10, "RETRY_CNT"},
	{1 << 11, "RNR_RETRY"},
	{1 << 12, "RQ_PSN"},
	{1 << 13, "MAX_QP_RD_ATOMIC"},
	{1 << 14, "ALT_PATH"},
	{1 << 15, "MIN_RNR_TIMER"},
	{1 << 16, "SQ_PSN"},
	{1 << 17, "MAX_DEST_RD_ATOMIC"},
	{1 << 18, "PATH_MIG_STATE"},
	{1 << 19, "CAP"},
	{1 << 20, "DEST_QPN"},
	{1 << 25, "RATE_LIMIT"},
}

type transWant struct{ req, opt verbs.QPAttrMask }

type transPair struct{ cur, next verbs.QPState }

const (
	sRESET   = verbs.QPSReset
	sINIT    = verbs.QPSInit
	sRTR     = verbs.QPSRTR
	sRTS     = verbs.QPSRTS
	sSQD     = verbs.QPSSQD
	sSQE     = verbs.QPSSQE
	sERR     = verbs.QPSErr
	sUNKNOWN = verbs.QPSUnknown
)

// wantRC is the RC column of the kernel's qp_state_table, written out by
// hand. Pairs not listed are invalid.
var wantRC = map[transPair]transWant{
	{sRESET, sRESET}: {},
	{sRESET, sINIT}:  {req: verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
	{sRESET, sERR}:   {},

	{sINIT, sRESET}: {},
	{sINIT, sINIT}:  {opt: verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
	{sINIT, sRTR}: {
		req: verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
			verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer,
		opt: verbs.QPAttrAltPath | verbs.QPAttrAccessFlags | verbs.QPAttrPKeyIndex,
	},
	{sINIT, sERR}: {},

	{sRTR, sRESET}: {},
	{sRTR, sRTS}: {
		req: verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
			verbs.QPAttrMaxQPRdAtomic,
		opt: verbs.QPAttrCurState | verbs.QPAttrAltPath | verbs.QPAttrAccessFlags |
			verbs.QPAttrMinRNRTimer | verbs.QPAttrPathMigState,
	},
	{sRTR, sERR}: {},

	{sRTS, sRESET}: {},
	{sRTS, sRTS}: {opt: verbs.QPAttrCurState | verbs.QPAttrAccessFlags | verbs.QPAttrAltPath |
		verbs.QPAttrPathMigState | verbs.QPAttrMinRNRTimer},
	{sRTS, sSQD}: {opt: verbs.QPAttrEnSQDAsyncNotify},
	{sRTS, sERR}: {},

	{sSQD, sRESET}: {},
	{sSQD, sRTS}: {opt: verbs.QPAttrCurState | verbs.QPAttrAccessFlags | verbs.QPAttrAltPath |
		verbs.QPAttrPathMigState | verbs.QPAttrMinRNRTimer},
	{sSQD, sSQD}: {opt: verbs.QPAttrPKeyIndex | verbs.QPAttrAV | verbs.QPAttrTimeout |
		verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic |
		verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrPort | verbs.QPAttrAltPath |
		verbs.QPAttrAccessFlags | verbs.QPAttrPathMigState | verbs.QPAttrMinRNRTimer},
	{sSQD, sERR}: {},

	{sSQE, sRESET}: {},
	{sSQE, sERR}:   {},

	{sERR, sRESET}: {},
	{sERR, sERR}:   {},
}

var transStates = []verbs.QPState{sRESET, sINIT, sRTR, sRTS, sSQD, sSQE, sERR, sUNKNOWN}

func transAllDefinedBits() verbs.QPAttrMask {
	var m verbs.QPAttrMask
	for _, b := range transMaskBits {
		m |= b.bit
	}
	return m
}

// wantTransEINVAL fails t unless err is an *verbs.Error from ibv_modify_qp
// with errno EINVAL whose text ends with suffix.
func wantTransEINVAL(t *testing.T, err error, suffix string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want EINVAL ending in %q", suffix)
	}
	if !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("got %v, want EINVAL", err)
	}
	var ve *verbs.Error
	if !errors.As(err, &ve) || ve.Op != "ibv_modify_qp" {
		t.Fatalf("got %#v, want *verbs.Error with Op ibv_modify_qp", err)
	}
	if !strings.HasSuffix(err.Error(), suffix) {
		t.Fatalf("error %q does not end in %q", err, suffix)
	}
}

func TestWantRCTableShape(t *testing.T) {
	// 3 from RESET, 4 from INIT, 3 from RTR, 4 from RTS, 4 from SQD,
	// 2 from SQE, 2 from ERR.
	if len(wantRC) != 22 {
		t.Fatalf("expectation table has %d entries, want 22", len(wantRC))
	}
}

func TestCheckTransitionAllPairs(t *testing.T) {
	valid := 0
	for _, cur := range transStates {
		for _, next := range transStates {
			t.Run(fmt.Sprintf("%v_to_%v", cur, next), func(t *testing.T) {
				w, ok := wantRC[transPair{cur, next}]
				if ok {
					valid++
					if err := checkTransition(cur, next, verbs.QPAttrState|w.req); err != nil {
						t.Fatalf("required mask %v rejected: %v", verbs.QPAttrState|w.req, err)
					}
					all := verbs.QPAttrState | w.req | w.opt
					if err := checkTransition(cur, next, all); err != nil {
						t.Fatalf("required|optional mask %v rejected: %v", all, err)
					}
					return
				}
				suffix := fmt.Sprintf("invalid transition %v -> %v for RC QP", cur, next)
				wantTransEINVAL(t, checkTransition(cur, next, verbs.QPAttrState), suffix)
				wantTransEINVAL(t, checkTransition(cur, next, transAllDefinedBits()), suffix)
			})
		}
	}
	if valid != len(wantRC) {
		t.Fatalf("visited %d valid pairs, want %d", valid, len(wantRC))
	}
}

func TestCheckTransitionMissingRequired(t *testing.T) {
	for p, w := range wantRC {
		for _, b := range transMaskBits {
			if w.req&b.bit == 0 {
				continue
			}
			t.Run(fmt.Sprintf("%v_to_%v_without_%s", p.cur, p.next, b.name), func(t *testing.T) {
				mask := (verbs.QPAttrState | w.req | w.opt) &^ b.bit
				wantTransEINVAL(t, checkTransition(p.cur, p.next, mask), "missing "+b.name)
			})
		}
	}
}

func TestCheckTransitionMissingRequiredMessage(t *testing.T) {
	err := checkTransition(sINIT, sRTR, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	const want = "INIT -> RTR requires AV|PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN: missing DEST_QPN"
	wantTransEINVAL(t, err, want)

	// Everything required missing at once is named in full.
	err = checkTransition(sRTR, sRTS, verbs.QPAttrState)
	wantTransEINVAL(t, err, "missing TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|SQ_PSN")
}

func TestCheckTransitionOptional(t *testing.T) {
	for p, w := range wantRC {
		for _, b := range transMaskBits {
			if w.opt&b.bit == 0 {
				continue
			}
			t.Run(fmt.Sprintf("%v_to_%v_with_%s", p.cur, p.next, b.name), func(t *testing.T) {
				mask := verbs.QPAttrState | w.req | b.bit
				if err := checkTransition(p.cur, p.next, mask); err != nil {
					t.Fatalf("mask %v rejected: %v", mask, err)
				}
			})
		}
	}
}

func TestCheckTransitionForbidden(t *testing.T) {
	for p, w := range wantRC {
		for _, b := range transMaskBits {
			if (verbs.QPAttrState|w.req|w.opt)&b.bit != 0 {
				continue
			}
			t.Run(fmt.Sprintf("%v_to_%v_with_%s", p.cur, p.next, b.name), func(t *testing.T) {
				mask := verbs.QPAttrState | w.req | b.bit
				wantTransEINVAL(t, checkTransition(p.cur, p.next, mask), "does not allow "+b.name)
			})
		}
		t.Run(fmt.Sprintf("%v_to_%v_with_undefined_bit", p.cur, p.next), func(t *testing.T) {
			mask := verbs.QPAttrState | w.req | 1<<21
			wantTransEINVAL(t, checkTransition(p.cur, p.next, mask), "does not allow 0x200000")
		})
	}
}

func TestCheckTransitionCurStateOnlyWhereListed(t *testing.T) {
	for _, tc := range []struct {
		p  transPair
		ok bool
	}{
		{transPair{sRTR, sRTS}, true},
		{transPair{sRTS, sRTS}, true},
		{transPair{sSQD, sRTS}, true},
		{transPair{sSQD, sSQD}, false}, // qp_state_table[SQD][SQD] lists PORT, not CUR_STATE
		{transPair{sRESET, sINIT}, false},
		{transPair{sINIT, sINIT}, false},
		{transPair{sINIT, sRTR}, false},
		{transPair{sRTS, sSQD}, false},
		{transPair{sRTS, sERR}, false},
		{transPair{sRTS, sRESET}, false},
	} {
		mask := verbs.QPAttrState | verbs.QPAttrCurState | wantRC[tc.p].req
		err := checkTransition(tc.p.cur, tc.p.next, mask)
		if tc.ok && err != nil {
			t.Errorf("%v -> %v with CUR_STATE: %v", tc.p.cur, tc.p.next, err)
		}
		if !tc.ok && !errors.Is(err, verbs.EINVAL) {
			t.Errorf("%v -> %v with CUR_STATE: got %v, want EINVAL", tc.p.cur, tc.p.next, err)
		}
	}
}

func TestCheckTransitionWithoutStateBit(t *testing.T) {
	// Without QPAttrState the call is cur -> cur, whatever next says.
	for _, tc := range []struct {
		cur, next verbs.QPState
		mask      verbs.QPAttrMask
		wantErr   string // "" for success, else the error suffix
	}{
		{sRTS, sRESET, verbs.QPAttrAccessFlags | verbs.QPAttrMinRNRTimer, ""},
		{sRTS, sERR, verbs.QPAttrCurState | verbs.QPAttrPathMigState | verbs.QPAttrAltPath, ""},
		{sINIT, sRTR, verbs.QPAttrPKeyIndex | verbs.QPAttrPort, ""},
		{sSQD, sRTS, verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrAV, ""},
		{sRESET, sINIT, 0, ""},
		{sERR, sRESET, 0, ""},
		{sRESET, sINIT, verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags,
			"RESET -> RESET does not allow ACCESS_FLAGS|PKEY_INDEX|PORT"},
		{sERR, sERR, verbs.QPAttrAccessFlags, "ERR -> ERR does not allow ACCESS_FLAGS"},
		{sRTS, sRTS, verbs.QPAttrSQPSN, "RTS -> RTS does not allow SQ_PSN"},
		{sINIT, sINIT, verbs.QPAttrAV, "INIT -> INIT does not allow AV"},
		{sRTR, sRTS, verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
			verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic,
			"invalid transition RTR -> RTR for RC QP"},
		{sRTR, sRTR, 0, "invalid transition RTR -> RTR for RC QP"},
		{sSQE, sERR, 0, "invalid transition SQE -> SQE for RC QP"},
		{sUNKNOWN, sRESET, 0, "invalid transition UNKNOWN -> UNKNOWN for RC QP"},
	} {
		err := checkTransition(tc.cur, tc.next, tc.mask)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("checkTransition(%v, %v, %v) = %v, want nil", tc.cur, tc.next, tc.mask, err)
			}
			continue
		}
		t.Run(fmt.Sprintf("%v_%v_%v", tc.cur, tc.next, tc.mask), func(t *testing.T) {
			wantTransEINVAL(t, err, tc.wantErr)
		})
	}
}

func TestCheckTransitionOutOfRangeStates(t *testing.T) {
	for _, tc := range []struct{ cur, next verbs.QPState }{
		{8, sRESET}, {sRTS, 8}, {255, sERR}, {sINIT, 255}, {255, 255},
	} {
		err := checkTransition(tc.cur, tc.next, verbs.QPAttrState)
		wantTransEINVAL(t, err, fmt.Sprintf("invalid transition %v -> %v for RC QP", tc.cur, tc.next))
	}
	wantTransEINVAL(t, checkTransition(9, 0, 0), "invalid transition QPState(9) -> QPState(9) for RC QP")
}

func TestCheckTransitionNoAllocOnSuccess(t *testing.T) {
	req := wantRC[transPair{sINIT, sRTR}].req
	allocs := testing.AllocsPerRun(100, func() {
		if checkTransition(sINIT, sRTR, verbs.QPAttrState|req) != nil {
			panic("INIT -> RTR rejected")
		}
		if checkTransition(sRTS, sRTS, verbs.QPAttrAccessFlags) != nil {
			panic("RTS -> RTS rejected")
		}
	})
	if allocs != 0 {
		t.Fatalf("success path allocates %v times per run, want 0", allocs)
	}
}
