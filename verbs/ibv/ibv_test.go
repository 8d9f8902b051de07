//go:build linux && cgo

package ibv

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

func TestConstantsMatchC(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range constPairs() {
		if seen[p.name] {
			t.Errorf("%s listed twice", p.name)
		}
		seen[p.name] = true
		if p.c != p.g {
			t.Errorf("%s: C value %d, verbs constant %d", p.name, p.c, p.g)
		}
	}
	if len(seen) < 150 {
		t.Errorf("only %d constants compared", len(seen))
	}
}

func TestDevicesWithoutHardware(t *testing.T) {
	devs, err := Provider{}.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	t.Logf("%d devices: %+v", len(devs), devs)
	if labEnabled() {
		return
	}
	_, err = Provider{}.Open("ibpath-no-such-dev0")
	var ve *verbs.Error
	if !errors.As(err, &ve) || ve.Op != "ibv_open_device" || ve.Errno != verbs.ENODEV ||
		!strings.Contains(ve.Detail, "ibpath-no-such-dev0") {
		t.Fatalf("Open of a missing device: %v, want ibv_open_device ENODEV naming the device", err)
	}
	if ctx, err := (Provider{}).Open("nope"); ctx != nil || err == nil {
		t.Fatalf("Open returned %v, %v", ctx, err)
	}
}

func TestAllocFree(t *testing.T) {
	b, err := Alloc(10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 10000 {
		t.Fatalf("len %d", len(b))
	}
	for i := range b {
		if b[i] != 0 {
			t.Fatalf("byte %d not zero", i)
		}
		b[i] = byte(i)
	}
	if !fromAlloc(uintptr(ptrOf(b[100:])), 9900) || fromAlloc(uintptr(ptrOf(b)), 10000+4096*4) {
		t.Fatal("fromAlloc bounds wrong")
	}
	if err := Free(b[1:]); err == nil {
		t.Fatal("Free of an interior slice succeeded")
	}
	if err := Free(b); err != nil {
		t.Fatal(err)
	}
	if err := Free(b); err == nil {
		t.Fatal("double Free succeeded")
	}
	if _, err := Alloc(0); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("Alloc(0): %v", err)
	}
}

func TestRegMRRefusesGoHeap(t *testing.T) {
	pd := &PD{ctx: &Context{info: verbs.DeviceInfo{Name: "none"}}} // never reaches C
	for _, buf := range [][]byte{make([]byte, 4096), []byte("stack or heap, not ibv.Alloc")} {
		_, err := pd.RegMR(buf, verbs.AccessLocalWrite)
		var ve *verbs.Error
		if !errors.As(err, &ve) || ve.Op != "ibv_reg_mr" || ve.Errno != verbs.EINVAL || !strings.Contains(ve.Detail, "ibv.Alloc") {
			t.Fatalf("RegMR of Go memory: %v", err)
		}
	}
	if _, err := pd.RegMR(nil, 0); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("RegMR(nil): %v", err)
	}
}

func TestRetErrRules(t *testing.T) {
	cases := []struct {
		ret   int
		errno error
		want  syscall.Errno
	}{
		{22, nil, syscall.EINVAL},            // errno returned directly
		{-1, syscall.ENOMEM, syscall.ENOMEM}, // -1 and errno
		{-95, nil, syscall.EOPNOTSUPP},       // -errno
		{-1, nil, syscall.EIO},               // -1, errno lost
		{12, syscall.EAGAIN, syscall.ENOMEM}, // the return value wins over a stale errno
		{-1, syscall.Errno(0), syscall.EIO},
	}
	for _, c := range cases {
		err := retErrFor("ibv_modify_qp", c.ret, c.errno)
		var ve *verbs.Error
		if !errors.As(err, &ve) || ve.Op != "ibv_modify_qp" || ve.Errno != c.want {
			t.Errorf("ret %d errno %v: %v, want %v", c.ret, c.errno, err, c.want)
		}
	}
	if retErrFor("x", 0, syscall.EINVAL) != nil {
		t.Error("ret 0 is an error")
	}
}

func gidSeq(base byte) verbs.GID {
	var g verbs.GID
	for i := range g {
		g[i] = base + byte(i)
	}
	return g
}

func hexGID(g verbs.GID) string { return fmt.Sprintf("%x", g[:]) }

func TestQPAttrToC(t *testing.T) {
	a := verbs.QPAttr{
		QPState: verbs.QPSRTR, CurQPState: verbs.QPSInit, PathMTU: verbs.MTU1024,
		PathMigState: verbs.MigRearm, QKey: 0x1111, RQPSN: 0x2222, SQPSN: 0x3333, DestQPN: 0x4444,
		QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		Cap:           verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 4, MaxInlineData: 5},
		AHAttr: verbs.AHAttr{GRH: verbs.GlobalRoute{DGID: gidSeq(0x10), FlowLabel: 6, SGIDIndex: 7, HopLimit: 8, TrafficClass: 9},
			DLID: 10, SL: 11, SrcPathBits: 12, StaticRate: 13, IsGlobal: true, PortNum: 1},
		AltAHAttr: verbs.AHAttr{GRH: verbs.GlobalRoute{DGID: gidSeq(0x80), FlowLabel: 16, SGIDIndex: 17, HopLimit: 18, TrafficClass: 19},
			DLID: 20, SL: 21, SrcPathBits: 22, StaticRate: 23, IsGlobal: false, PortNum: 2},
		PKeyIndex: 30, AltPKeyIndex: 31, EnSQDAsyncNotify: true, SQDraining: false,
		MaxRdAtomic: 32, MaxDestRdAtomic: 33, MinRNRTimer: 34, PortNum: 35, Timeout: 36,
		RetryCnt: 37, RNRRetry: 38, AltPortNum: 39, AltTimeout: 40, RateLimit: 41,
	}
	want := fmt.Sprintf("qp_state=2 cur_qp_state=1 path_mtu=3 path_mig_state=1 qkey=4369 "+
		"rq_psn=8738 sq_psn=13107 dest_qp_num=17476 qp_access_flags=6 "+
		"cap.max_send_wr=1 cap.max_recv_wr=2 cap.max_send_sge=3 cap.max_recv_sge=4 cap.max_inline_data=5 "+
		"ah_attr.grh.dgid=%s ah_attr.grh.flow_label=6 ah_attr.grh.sgid_index=7 ah_attr.grh.hop_limit=8 "+
		"ah_attr.grh.traffic_class=9 ah_attr.dlid=10 ah_attr.sl=11 ah_attr.src_path_bits=12 "+
		"ah_attr.static_rate=13 ah_attr.is_global=1 ah_attr.port_num=1 "+
		"alt_ah_attr.grh.dgid=%s alt_ah_attr.grh.flow_label=16 alt_ah_attr.grh.sgid_index=17 alt_ah_attr.grh.hop_limit=18 "+
		"alt_ah_attr.grh.traffic_class=19 alt_ah_attr.dlid=20 alt_ah_attr.sl=21 alt_ah_attr.src_path_bits=22 "+
		"alt_ah_attr.static_rate=23 alt_ah_attr.is_global=0 alt_ah_attr.port_num=2 "+
		"pkey_index=30 alt_pkey_index=31 en_sqd_async_notify=1 sq_draining=0 max_rd_atomic=32 "+
		"max_dest_rd_atomic=33 min_rnr_timer=34 port_num=35 timeout=36 retry_cnt=37 rnr_retry=38 "+
		"alt_port_num=39 alt_timeout=40 rate_limit=41", hexGID(gidSeq(0x10)), hexGID(gidSeq(0x80)))
	if got := dumpQPAttr(&a); got != want {
		t.Fatalf("C sees\n%s\nwant\n%s", strings.ReplaceAll(got, " ", "\n"), strings.ReplaceAll(want, " ", "\n"))
	}
}

func TestQPAttrFromC(t *testing.T) {
	ah := func(base uint8) verbs.AHAttr {
		return verbs.AHAttr{GRH: verbs.GlobalRoute{DGID: gidSeq(base), FlowLabel: uint32(base) + 20,
			SGIDIndex: base + 21, HopLimit: base + 22, TrafficClass: base + 23},
			DLID: uint16(base) + 24, SL: base + 25, SrcPathBits: base + 26, StaticRate: base + 27,
			IsGlobal: true, PortNum: base + 28}
	}
	want := verbs.QPAttr{
		QPState: verbs.QPSRTS, CurQPState: verbs.QPSRTR, PathMTU: verbs.MTU2048, PathMigState: verbs.MigArmed,
		QKey: 0x11111111, RQPSN: 0x222222, SQPSN: 0x333333, DestQPN: 0x444444,
		QPAccessFlags: verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
		Cap:           verbs.QPCap{MaxSendWR: 101, MaxRecvWR: 102, MaxSendSGE: 103, MaxRecvSGE: 104, MaxInlineData: 105},
		AHAttr:        ah(10), AltAHAttr: ah(100),
		PKeyIndex: 201, AltPKeyIndex: 202, EnSQDAsyncNotify: true, SQDraining: true,
		MaxRdAtomic: 205, MaxDestRdAtomic: 206, MinRNRTimer: 207, PortNum: 208, Timeout: 209,
		RetryCnt: 210, RNRRetry: 211, AltPortNum: 212, AltTimeout: 213, RateLimit: 214,
	}
	if got := filledQPAttr(); got != want {
		t.Fatalf("from C:\n%+v\nwant\n%+v", got, want)
	}
	// And back: Go -> C -> Go is the identity.
	back := dumpQPAttr(&want)
	if !strings.Contains(back, "alt_timeout=213 rate_limit=214") || !strings.Contains(back, "alt_ah_attr.port_num=128") {
		t.Fatalf("round trip: %s", back)
	}
}

func TestSendWRToC(t *testing.T) {
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, RemoteAddr: 0xa000, RKey: 0x11,
			SGList: []verbs.SGE{{Addr: 0x1000, Length: 64, LKey: 0x21}, {Addr: 0x2000, Length: 32, LKey: 0x22}}},
		{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 0xcafef00d, RemoteAddr: 0xb000, RKey: 0x12,
			SGList: []verbs.SGE{{Addr: 0x3000, Length: 8, LKey: 0x23}}},
		{WRID: 3, Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSolicited | verbs.SendInline, ImmData: 7},
		{WRID: 4, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendFence, RemoteAddr: 0xc000, RKey: 0x13,
			SGList: []verbs.SGE{{Addr: 0x4000, Length: 4096, LKey: 0x24}}},
		{WRID: 5, Opcode: verbs.WRAtomicFetchAdd, RemoteAddr: 0xd000, RKey: 0x14, CompareAdd: 5, Swap: 99,
			SGList: []verbs.SGE{{Addr: 0x5000, Length: 8, LKey: 0x25}}},
		{WRID: 6, Opcode: verbs.WRAtomicCmpAndSwp, RemoteAddr: 0xe000, RKey: 0x15, CompareAdd: 0x1234, Swap: 0x5678,
			SGList: []verbs.SGE{{Addr: 0x6000, Length: 8, LKey: 0x26}}},
		{WRID: 7, Opcode: verbs.WRSend, SGList: []verbs.SGE{{Addr: 0x7000, Length: 1, LKey: 0x27}}},
	}
	want := "wr_id=1 opcode=0 send_flags=2 imm_data_be=00000000 num_sge=2 rdma.remote_addr=a000 rdma.rkey=11 sge[0]=1000/64/21 sge[1]=2000/32/22\n" +
		"wr_id=2 opcode=1 send_flags=0 imm_data_be=cafef00d num_sge=1 rdma.remote_addr=b000 rdma.rkey=12 sge[0]=3000/8/23\n" +
		"wr_id=3 opcode=3 send_flags=12 imm_data_be=00000007 num_sge=0 rdma.remote_addr=0 rdma.rkey=0\n" +
		"wr_id=4 opcode=4 send_flags=1 imm_data_be=00000000 num_sge=1 rdma.remote_addr=c000 rdma.rkey=13 sge[0]=4000/4096/24\n" +
		"wr_id=5 opcode=6 send_flags=0 imm_data_be=00000000 num_sge=1 atomic.remote_addr=d000 atomic.rkey=14 atomic.compare_add=5 atomic.swap=63 sge[0]=5000/8/25\n" +
		"wr_id=6 opcode=5 send_flags=0 imm_data_be=00000000 num_sge=1 atomic.remote_addr=e000 atomic.rkey=15 atomic.compare_add=1234 atomic.swap=5678 sge[0]=6000/8/26\n" +
		"wr_id=7 opcode=2 send_flags=0 imm_data_be=00000000 num_sge=1 rdma.remote_addr=0 rdma.rkey=0 sge[0]=7000/1/27\n"
	if got := dumpSendChain(wrs); got != want {
		t.Fatalf("C chain:\n%s\nwant\n%s", got, want)
	}
	// A batch larger than the initial scratch grows it.
	big := make([]verbs.SendWR, 100)
	for i := range big {
		big[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{{Addr: 1, Length: 1, LKey: 1}, {Addr: 2, Length: 2, LKey: 2}}}
	}
	if got := dumpSendChain(big); strings.Count(got, "\n") != 100 || !strings.Contains(got, "wr_id=99 ") {
		t.Fatalf("100-WR chain has %d lines", strings.Count(got, "\n"))
	}
}

func TestRecvWRToC(t *testing.T) {
	wrs := []verbs.RecvWR{
		{WRID: 10, SGList: []verbs.SGE{{Addr: 0x1000, Length: 100, LKey: 1}}},
		{WRID: 11},
		{WRID: 12, SGList: []verbs.SGE{{Addr: 0x2000, Length: 200, LKey: 2}, {Addr: 0x3000, Length: 300, LKey: 3}}},
	}
	want := "wr_id=10 num_sge=1 sge[0]=1000/100/1\nwr_id=11 num_sge=0\nwr_id=12 num_sge=2 sge[0]=2000/200/2 sge[1]=3000/300/3\n"
	if got := dumpRecvChain(wrs); got != want {
		t.Fatalf("C chain:\n%s\nwant\n%s", got, want)
	}
}

func TestWCFromC(t *testing.T) {
	want := verbs.WC{WRID: 0x0102030405060708, Status: verbs.WCRetryExcErr, Opcode: verbs.WCRecvRDMAWithImm,
		VendorErr: 0x81, ByteLen: 4096, ImmData: 0xdeadbeef, QPNum: 0x1234, SrcQP: 0x5678,
		WCFlags: verbs.WCFlagWithImm | verbs.WCFlagGRH, PKeyIndex: 7, SLID: 0x99, SL: 3, DLIDPathBits: 5}
	if got := filledWC(); got != want {
		t.Fatalf("from C:\n%+v\nwant\n%+v", got, want)
	}
}

func TestPostPathAllocatesNothing(t *testing.T) {
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: 1, Length: 2, LKey: 3}}, RemoteAddr: 4, RKey: 5},
		{WRID: 2, Opcode: verbs.WRAtomicFetchAdd, SGList: []verbs.SGE{{Addr: 1, Length: 8, LKey: 3}}, CompareAdd: 1},
	}
	if n := fillAndBuildAllocs(wrs, 100, testing.AllocsPerRun); n != 0 {
		t.Fatalf("%v Go allocations per post", n)
	}
}

func TestChainsFromC(t *testing.T) {
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, RemoteAddr: 0xa000, RKey: 0x11,
			SGList: []verbs.SGE{{Addr: 0x1000, Length: 64, LKey: 0x21}, {Addr: 0x2000, Length: 32, LKey: 0x22}}},
		{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 0xcafef00d, RemoteAddr: 0xb000, RKey: 0x12,
			SGList: []verbs.SGE{{Addr: 0x3000, Length: 8, LKey: 0x23}}},
		{WRID: 3, Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSolicited, ImmData: 7},
		{WRID: 6, Opcode: verbs.WRAtomicCmpAndSwp, RemoteAddr: 0xe000, RKey: 0x15, CompareAdd: 0x1234, Swap: 0x5678,
			SGList: []verbs.SGE{{Addr: 0x6000, Length: 8, LKey: 0x26}}},
	}
	got := sendChainRoundTrip(wrs)
	if len(got) != len(wrs) {
		t.Fatalf("%d WRs back, want %d", len(got), len(wrs))
	}
	for i := range wrs {
		if fmt.Sprintf("%+v", got[i]) != fmt.Sprintf("%+v", wrs[i]) {
			t.Errorf("WR %d back as\n%+v\nwant\n%+v", i, got[i], wrs[i])
		}
	}
	rwrs := []verbs.RecvWR{{WRID: 10, SGList: []verbs.SGE{{Addr: 0x1000, Length: 100, LKey: 1}}}, {WRID: 11}}
	if r := recvChainRoundTrip(rwrs); fmt.Sprintf("%+v", r) != fmt.Sprintf("%+v", rwrs) {
		t.Errorf("receives back as %+v, want %+v", r, rwrs)
	}
	wc := verbs.WC{WRID: 9, Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: 12, ImmData: 0xdeadbeef,
		QPNum: 0x44, SrcQP: 0x55, WCFlags: verbs.WCFlagWithImm, SLID: 3}
	if back := wcRoundTrip(wc); back != wc {
		t.Errorf("WC back as %+v, want %+v", back, wc)
	}
}

// The state field of an application's QP is the application's: this
// package's own modify or query of it leaves it as found (UCX asserts
// RTS on every post), unless the application changed it meanwhile; a QP
// created here shows what its last call set.
func TestAppQPStateKept(t *testing.T) {
	rts, errState := uint32(verbs.QPSRTS), uint32(verbs.QPSErr)
	for _, c := range []struct {
		name string
		app  bool
		now  uint32
		mask verbs.QPAttrMask
		want uint32
	}{
		{"the application's, moved to ERR here", true, errState, verbs.QPAttrState, rts},
		{"the application's, changed by it meanwhile", true, uint32(verbs.QPSReset), verbs.QPAttrState, uint32(verbs.QPSReset)},
		{"the application's, no state in the mask", true, errState, verbs.QPAttrPort, errState},
		{"created here", false, errState, verbs.QPAttrState, errState},
	} {
		if got := keepStateAfter(c.app, rts, errState, c.now, c.mask); got != c.want {
			t.Errorf("%s: state %d, want %d", c.name, got, c.want)
		}
	}
}
