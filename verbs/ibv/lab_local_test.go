//go:build linux && cgo

package ibv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// TestLabLocal checks everything one guest can: devices, queries, the
// resource life cycle, state transitions validated by the kernel, and RC
// traffic over loopback (two QPs on rxe0; then rxe0 to rxe1, skipped if
// the two devices cannot reach each other inside one host).
func TestLabLocal(t *testing.T) {
	labOnly(t)
	devs, err := Provider{}.Devices()
	check(t, err, "ibv_get_device_list")
	names := map[string]bool{}
	for _, d := range devs {
		names[d.Name] = true
		fmt.Printf("device %s guid %016x node type %d\n", d.Name, d.GUID, d.NodeType)
	}
	for _, n := range []string{"rxe0", "rxe1"} {
		if !names[n] {
			fail(t, "device %s not listed (got %v)", n, devs)
		}
	}
	pass(t, "devices rxe0 and rxe1 listed")

	_, err = Provider{}.Open("rxe9")
	var ve *verbs.Error
	if !errors.As(err, &ve) || ve.Errno != verbs.ENODEV {
		fail(t, "open of missing rxe9: %v", err)
	}
	pass(t, "open of a missing device: %v", err)

	for _, n := range []string{"rxe0", "rxe1"} {
		ctx, err := OpenDevice(n)
		check(t, err, "open %s", n)
		da, err := ctx.QueryDevice()
		check(t, err, "query device %s", n)
		fmt.Printf("%s: fw %q vendor %#x part %#x max_qp %d max_qp_wr %d max_sge %d max_cqe %d ports %d caps %#x atomic %d\n",
			n, da.FWVer, da.VendorID, da.VendorPartID, da.MaxQP, da.MaxQPWR, da.MaxSGE, da.MaxCQE, da.PhysPortCnt, uint32(da.DeviceCapFlags), da.AtomicCap)
		if da.PhysPortCnt < 1 || da.MaxQP < 1 || da.MaxQPWR < 32 || da.NodeGUID != ctx.Device().GUID {
			fail(t, "%s device attributes implausible: %+v (device GUID %#x)", n, da, ctx.Device().GUID)
		}
		pass(t, "%s device attributes (AUTO_PATH_MIG advertised: %v)", n, da.DeviceCapFlags&verbs.DeviceAutoPathMig != 0)
		pa, err := ctx.QueryPort(1)
		check(t, err, "query port %s/1", n)
		fmt.Printf("%s/1: state %v phys %v mtu %v/%v gid_tbl_len %d link layer %v\n", n, pa.State, pa.PhysState, pa.ActiveMTU, pa.MaxMTU, pa.GIDTblLen, pa.LinkLayer)
		if pa.State != verbs.PortActive || pa.LinkLayer != verbs.LinkLayerEthernet || pa.GIDTblLen < 1 {
			fail(t, "%s/1: %+v, want ACTIVE Ethernet with a GID table", n, pa)
		}
		pass(t, "%s/1 ACTIVE, link layer Ethernet", n)
		idx, gid, err := roceV2IPv4(ctx)
		check(t, err, "%s RoCE v2 IPv4 GID: index %d %v", n, idx, gid)
		g, err := ctx.QueryGID(1, idx)
		if err != nil || g != gid {
			fail(t, "ibv_query_gid %s index %d = %v, %v; ibv_query_gid_ex said %v", n, idx, g, err, gid)
		}
		pass(t, "ibv_query_gid agrees with ibv_query_gid_ex")
		if _, err := ctx.QueryPort(9); err == nil {
			fail(t, "query of port 9 succeeded")
		} else {
			pass(t, "query of port 9 fails: %v", err)
		}
		_, err = ctx.GetAsyncEvent()
		if !errors.Is(err, verbs.EAGAIN) {
			fail(t, "GetAsyncEvent with nothing pending: %v, want EAGAIN", err)
		}
		pass(t, "GetAsyncEvent with nothing pending: %v", err)
		check(t, ctx.Close(), "close %s", n)
	}

	t.Run("transitions", labTransitions)
	t.Run("implicit-odp", labImplicitODP)
	t.Run("loopback-rxe0", func(t *testing.T) { labLoopback(t, "rxe0", "rxe0", true) })
	t.Run("rxe0-rxe1", func(t *testing.T) { labLoopback(t, "rxe0", "rxe1", false) })
}

// labTransitions checks that the kernel validates what Modify passes.
// labImplicitODP registers the whole address space on demand: a device
// with implicit ODP gives an MR at 0 of verbs.ImplicitLen, one without
// refuses as the kernel says (EINVAL: the lab's 6.1 rdma_rxe, which has
// no ODP; EOPNOTSUPP where the core check answers so), and what the
// device said is printed.
func labImplicitODP(t *testing.T) {
	e := newEnd(t, "rxe0")
	mr, err := e.pd.(*PD).RegImplicitODP(verbs.AccessLocalWrite | verbs.AccessRemoteWrite)
	switch {
	case err == nil:
		defer func() { check(t, mr.Dereg(), "ibv_dereg_mr of the implicit region") }()
		if !verbs.IsImplicitODP(mr) {
			fail(t, "implicit ODP MR at %#x+%d access %v", mr.Addr(), mr.Len(), mr.Access())
		}
		pass(t, "implicit ODP registered: lkey %#x", mr.LKey())
	case errors.Is(err, verbs.EOPNOTSUPP) || errors.Is(err, verbs.EINVAL):
		pass(t, "implicit ODP refused by the device: %v", err)
	default:
		fail(t, "implicit ODP: %v, want success, EOPNOTSUPP or EINVAL", err)
	}
}

func labTransitions(t *testing.T) {
	e := newEnd(t, "rxe0")
	if e.qp.State() != verbs.QPSReset {
		fail(t, "new QP in %v", e.qp.State())
	}
	// RESET -> RTR is not a legal transition.
	err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState)
	var ve *verbs.Error
	if !errors.As(err, &ve) || ve.Op != "ibv_modify_qp" || ve.Errno != verbs.EINVAL {
		fail(t, "RESET->RTR: %v, want ibv_modify_qp EINVAL", err)
	}
	pass(t, "RESET->RTR refused: %v", err)
	// RESET -> INIT without the required PORT/ACCESS/PKEY bits.
	err = e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit}, verbs.QPAttrState)
	if !errors.Is(err, verbs.EINVAL) {
		fail(t, "RESET->INIT without required mask bits: %v", err)
	}
	pass(t, "RESET->INIT with missing mask bits refused: %v", err)
	check(t, e.toInit(), "RESET->INIT")
	if e.qp.State() != verbs.QPSInit {
		fail(t, "State() = %v after INIT", e.qp.State())
	}
	a, ia, err := e.qp.Query(verbs.QPAttrState | verbs.QPAttrPort | verbs.QPAttrAccessFlags | verbs.QPAttrCap)
	check(t, err, "ibv_query_qp")
	if a.QPState != verbs.QPSInit || a.PortNum != 1 || a.QPAccessFlags != labAllAcc || ia.QPType != verbs.QPTRC ||
		ia.SendCQ != e.scq || ia.RecvCQ != e.rcq || ia.Cap.MaxSendWR < 32 {
		fail(t, "query: %+v / %+v", a, ia)
	}
	pass(t, "query: state %v port %d access %#x cap %+v, CQs are the same Go values", a.QPState, a.PortNum, uint32(a.QPAccessFlags), ia.Cap)
	// A send on a QP that is not RTS.
	_, err = e.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SGList: e.sge(0, 8)}})
	if err == nil {
		fail(t, "post_send in INIT accepted")
	}
	pass(t, "post_send in INIT refused: %v", err)
	check(t, e.postRecv(77, 0, 64), "post_recv in INIT")
	check(t, e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState), "INIT->ERR")
	if e.qp.State() != verbs.QPSErr {
		fail(t, "State() = %v after ERR", e.qp.State())
	}
	// Whether a receive queued before ERR is flushed at once is provider
	// behaviour (mlx5 does; rxe flushes from its responder task): noted,
	// not required.
	if wc, err := waitWC(e.rcq, 2*time.Second); err == nil {
		if wc.WRID != 77 || wc.Status != verbs.WCWRFlushErr {
			fail(t, "completion in ERR: %+v, want wr_id 77 WR_FLUSH_ERR", wc)
		}
		pass(t, "receive flushed on ERR: %v", wc.Status)
	} else {
		fmt.Printf("NOTE: receive queued before ERR not flushed within 2 s (%v)\n", err)
	}
	check(t, e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState), "ERR->RESET")
}

// labLoopback connects an RC QP on devA to one on devB in this process
// and runs every opcode with data checked. Unless required, a first WRITE
// that does not complete means the devices cannot reach each other here:
// the subtest is skipped, saying so.
func labLoopback(t *testing.T, devA, devB string, required bool) {
	a, b := newEnd(t, devA), newEnd(t, devB)
	check(t, a.toInit(), "%s INIT", devA)
	check(t, b.toInit(), "%s INIT", devB)
	const psnA, psnB = 0x1000, 0x2000
	// Where the path may not work, a short timeout makes the first WRITE
	// fail fast (4 ms x 2 tries).
	tmo, retry := uint8(14), uint8(7)
	if !required {
		tmo, retry = 10, 1
	}
	for _, c := range []struct {
		e    *end
		r    *end
		psn  uint32
		rpsn uint32
	}{{a, b, psnA, psnB}, {b, a, psnB, psnA}} {
		err := c.e.connect(c.r.info(c.rpsn), c.psn, tmo, retry)
		if err != nil && !required {
			fmt.Printf("SKIP: RC between %s and %s inside one guest does not work: %v (resolving the GID of the other device of this host times out)\n", devA, devB, err)
			t.Skipf("RC between %s and %s in one guest: %v", devA, devB, err)
		}
		check(t, err, "%s RTR/RTS", c.e.ctx.Device().Name)
	}
	var ve *verbs.Error
	fillPattern(a.buf[:4096], 1)
	err := a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 4096), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	check(t, err, "post RDMA WRITE %s->%s", devA, devB)
	wc, err := waitWC(a.scq, labWait)
	if err != nil || wc.Status != verbs.WCSuccess {
		if !required {
			fmt.Printf("SKIP: RC between %s and %s inside one guest does not work (%v %v): rxe delivers a packet for another local device's address through lo, where no rxe device listens\n", devA, devB, wc.Status, err)
			t.Skipf("RC between %s and %s in one guest: %v %v", devA, devB, wc.Status, err)
		}
		fail(t, "RDMA WRITE: %+v %v", wc, err)
	}
	if err := checkPattern(b.buf[:4096], 1); err != nil {
		fail(t, "RDMA WRITE data: %v", err)
	}
	pass(t, "RDMA WRITE %s->%s, 4096 bytes checked", devA, devB)

	// WRITE_WITH_IMM consumes a receive and notifies through the channel.
	check(t, b.rcq.ReqNotify(false), "ibv_req_notify_cq")
	check(t, b.postRecv(100, 8192, 64), "post_recv")
	fillPattern(a.buf[4096:6144], 2)
	check(t, a.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 0xabcd1234, SGList: a.sge(4096, 2048),
		RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()}), "post WRITE_WITH_IMM")
	if _, err := expectWC(a.scq, 2, verbs.WCRDMAWrite); err != nil {
		fail(t, "WRITE_WITH_IMM requester: %v", err)
	}
	cq, err := waitCQEvent(b.ch, labWait)
	if err != nil || cq != b.rcq {
		fail(t, "completion channel: %v (cq %v, want %v)", err, cq, b.rcq)
	}
	b.ch.AckCQEvents(cq, 1)
	pass(t, "completion channel notified for the receive CQ (same Go value)")
	wc, err = expectWC(b.rcq, 100, verbs.WCRecvRDMAWithImm)
	if err != nil || wc.ImmData != 0xabcd1234 || wc.WCFlags&verbs.WCFlagWithImm == 0 || wc.QPNum != b.qp.QPN() {
		fail(t, "WRITE_WITH_IMM responder: %+v %v", wc, err)
	}
	if err := checkPattern(b.buf[4096:6144], 2); err != nil {
		fail(t, "WRITE_WITH_IMM data: %v", err)
	}
	pass(t, "RDMA WRITE_WITH_IMM: imm %#x, 2048 bytes checked", wc.ImmData)

	// SEND / RECV, then SEND_WITH_IMM with two SGEs.
	check(t, b.postRecv(101, 8192, 1024), "post_recv")
	fillPattern(a.buf[6144:7144], 3)
	check(t, a.post(verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SGList: a.sge(6144, 1000)}), "post SEND")
	if _, err := expectWC(a.scq, 3, verbs.WCSend); err != nil {
		fail(t, "SEND requester: %v", err)
	}
	wc, err = expectWC(b.rcq, 101, verbs.WCRecv)
	if err != nil || wc.ByteLen != 1000 {
		fail(t, "SEND responder: %+v %v", wc, err)
	}
	if err := checkPattern(b.buf[8192:9192], 3); err != nil {
		fail(t, "SEND data: %v", err)
	}
	pass(t, "SEND/RECV: 1000 bytes checked")
	check(t, b.postRecv(102, 12288, 1024), "post_recv")
	sg := append(a.sge(0, 100), a.sge(4096, 100)...)
	check(t, a.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRSendWithImm, ImmData: 42, SGList: sg}), "post SEND_WITH_IMM")
	if _, err := expectWC(a.scq, 4, verbs.WCSend); err != nil {
		fail(t, "SEND_WITH_IMM requester: %v", err)
	}
	wc, err = expectWC(b.rcq, 102, verbs.WCRecv)
	if err != nil || wc.ImmData != 42 || wc.ByteLen != 200 || checkPattern(b.buf[12288:12388], 1) != nil || checkPattern(b.buf[12388:12488], 2) != nil {
		fail(t, "SEND_WITH_IMM responder: %+v %v", wc, err)
	}
	pass(t, "SEND_WITH_IMM: imm 42, two SGEs gathered")

	// Inline SEND.
	check(t, b.postRecv(103, 16384, 64), "post_recv")
	fillPattern(a.buf[20000:20032], 9)
	check(t, a.post(verbs.SendWR{WRID: 5, Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: a.sge(20000, 32)}), "post inline SEND")
	if _, err := expectWC(a.scq, 5, verbs.WCSend); err != nil {
		fail(t, "inline SEND: %v", err)
	}
	if _, err := expectWC(b.rcq, 103, verbs.WCRecv); err != nil || checkPattern(b.buf[16384:16416], 9) != nil {
		fail(t, "inline SEND responder: %v", err)
	}
	pass(t, "inline SEND")

	// READ.
	fillPattern(b.buf[32768:36864], 4)
	check(t, a.post(verbs.SendWR{WRID: 6, Opcode: verbs.WRRDMARead, SGList: a.sge(32768, 4096), RemoteAddr: b.mr.Addr() + 32768, RKey: b.mr.RKey()}), "post READ")
	if _, err := expectWC(a.scq, 6, verbs.WCRDMARead); err != nil {
		fail(t, "READ: %v", err)
	}
	if err := checkPattern(a.buf[32768:36864], 4); err != nil {
		fail(t, "READ data: %v", err)
	}
	pass(t, "RDMA READ: 4096 bytes checked")

	// Atomics on an 8-byte word of b.
	binary.NativeEndian.PutUint64(b.buf[40960:], 100)
	check(t, a.post(verbs.SendWR{WRID: 7, Opcode: verbs.WRAtomicFetchAdd, SGList: a.sge(40960, 8), RemoteAddr: b.mr.Addr() + 40960, RKey: b.mr.RKey(), CompareAdd: 5}), "post FETCH_ADD")
	if _, err := expectWC(a.scq, 7, verbs.WCFetchAdd); err != nil {
		fail(t, "FETCH_ADD: %v", err)
	}
	if old, now := binary.NativeEndian.Uint64(a.buf[40960:]), binary.NativeEndian.Uint64(b.buf[40960:]); old != 100 || now != 105 {
		fail(t, "FETCH_ADD: fetched %d (want 100), remote now %d (want 105)", old, now)
	}
	pass(t, "ATOMIC FETCH_AND_ADD: fetched 100, remote 105")
	check(t, a.post(verbs.SendWR{WRID: 8, Opcode: verbs.WRAtomicCmpAndSwp, SGList: a.sge(40968, 8), RemoteAddr: b.mr.Addr() + 40960, RKey: b.mr.RKey(), CompareAdd: 105, Swap: 7}), "post CMP_AND_SWP")
	if _, err := expectWC(a.scq, 8, verbs.WCCompSwap); err != nil {
		fail(t, "CMP_AND_SWP: %v", err)
	}
	if old, now := binary.NativeEndian.Uint64(a.buf[40968:]), binary.NativeEndian.Uint64(b.buf[40960:]); old != 105 || now != 7 {
		fail(t, "CMP_AND_SWP: fetched %d (want 105), remote now %d (want 7)", old, now)
	}
	pass(t, "ATOMIC CMP_AND_SWP: fetched 105, remote 7")

	// A batch with a bad WR in the middle: n accepted, wrs[n] is the bad one.
	qa, _, err := a.qp.Query(verbs.QPAttrCap)
	check(t, err, "query cap: %+v", qa.Cap)
	var tooMany []verbs.SGE
	for i := 0; i <= qa.Cap.MaxSendSGE; i++ {
		tooMany = append(tooMany, a.sge(i*8, 8)...)
	}
	batch := []verbs.SendWR{
		{WRID: 9, Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 64), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SendFlags: verbs.SendSignaled},
		{WRID: 10, Opcode: verbs.WRRDMAWrite, SGList: tooMany, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SendFlags: verbs.SendSignaled}, // one SGE above max_send_sge
	}
	n, err := a.qp.PostSend(batch)
	if err == nil || n != 1 || !errors.As(err, &ve) || ve.Op != "ibv_post_send" {
		fail(t, "batch with a bad WR: n=%d err=%v, want n=1 and an ibv_post_send error", n, err)
	}
	pass(t, "batch with a bad second WR: n=%d, %v", n, err)
	if _, err := expectWC(a.scq, 9, verbs.WCRDMAWrite); err != nil {
		fail(t, "first WR of the batch: %v", err)
	}

	// APM on RoCE: an alternate path is rejected, PATH_MIG_STATE alone is stored.
	labAPMOnRoCE(t, a)
}

// labAPMOnRoCE checks the LAB.md facts on an RTS QP: IBV_QP_ALT_PATH fails
// with EINVAL, IBV_QP_PATH_MIG_STATE alone is accepted.
func labAPMOnRoCE(t *testing.T, e *end) {
	attr := verbs.QPAttr{PathMigState: verbs.MigRearm, AltPortNum: 1, AltTimeout: 14, AltPKeyIndex: 0,
		AltAHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: e.gid, SGIDIndex: uint8(e.gidIdx), HopLimit: 64}}}
	err := e.qp.Modify(&attr, verbs.QPAttrAltPath|verbs.QPAttrPathMigState)
	var ve *verbs.Error
	if !errors.As(err, &ve) || ve.Op != "ibv_modify_qp" || ve.Errno != verbs.EINVAL {
		fail(t, "alternate path on RoCE: %v, want ibv_modify_qp EINVAL", err)
	}
	pass(t, "alternate path on RoCE refused: %v", err)
	err = e.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigRearm}, verbs.QPAttrPathMigState)
	if err != nil {
		fmt.Printf("NOTE: IBV_QP_PATH_MIG_STATE alone: %v\n", err)
		return
	}
	a, _, err := e.qp.Query(verbs.QPAttrPathMigState | verbs.QPAttrState)
	check(t, err, "query path_mig_state")
	fmt.Printf("after PATH_MIG_STATE=REARM: path_mig_state=%v state=%v\n", a.PathMigState, a.QPState)
	pass(t, "IBV_QP_PATH_MIG_STATE alone accepted on RoCE")
}
