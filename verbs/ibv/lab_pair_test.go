//go:build linux && cgo

package ibv

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// TestLabPair connects an RC QP between two guests over rxe0 (link A),
// exchanging QP information over TCP (on link B), and moves data both
// ways. Roles come from the environment:
//
//	server: IBPATH_LAB_ROLE=server IBPATH_LAB_LISTEN=10.77.1.2:18600
//	client: IBPATH_LAB_ROLE=client IBPATH_LAB_PEER=10.77.1.2:18600
//
// IBPATH_LAB_DEV picks the device (rxe0). The client ends by taking its
// link down and up again (ip link set, the device's netdev from
// IBPATH_LAB_NETDEV, default eth0) to see PORT_ERR and PORT_ACTIVE async
// events; IBPATH_LAB_NO_FLAP=1 leaves the link alone.
func TestLabPair(t *testing.T) {
	labOnly(t)
	role := os.Getenv("IBPATH_LAB_ROLE")
	var conn net.Conn
	var err error
	switch role {
	case "server":
		addr := getenv("IBPATH_LAB_LISTEN", "10.77.1.2:18600")
		ln, lerr := net.Listen("tcp", addr)
		check(t, lerr, "listen on %s", addr)
		defer ln.Close()
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(120 * time.Second))
		conn, err = ln.Accept()
		check(t, err, "accept the client")
	case "client":
		addr := getenv("IBPATH_LAB_PEER", "10.77.1.2:18600")
		deadline := time.Now().Add(120 * time.Second)
		for {
			conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		check(t, err, "connect to the server at %s", addr)
	default:
		t.Skip("IBPATH_LAB_ROLE is neither server nor client")
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(180 * time.Second))
	p := &pairLink{enc: json.NewEncoder(conn), dec: json.NewDecoder(bufio.NewReader(conn))}

	dev := getenv("IBPATH_LAB_DEV", "rxe0")
	e := newEnd(t, dev)
	check(t, e.toInit(), "%s QP %#x to INIT", dev, e.qp.QPN())
	psn := uint32(0x100000 + os.Getpid()&0xffff)
	// Receives are posted before the peer can send.
	for i := 0; i < 4; i++ {
		check(t, e.postRecv(uint64(1000+i), 8192+i*1024, 1024), "post_recv %d", i)
	}
	check(t, e.rcq.ReqNotify(false), "arm the receive CQ")
	fillPattern(e.buf[32768:36864], 0x40) // read by the peer
	binary.NativeEndian.PutUint64(e.buf[40960:], 100)

	mine := e.info(psn)
	var peer peerInfo
	if err := p.swap(mine, &peer); err != nil {
		fail(t, "exchange QP info: %v", err)
	}
	fmt.Printf("local QPN %#x GID %v (index %d); peer QPN %#x GID %v\n", mine.QPN, mine.GID, e.gidIdx, peer.QPN, peer.GID)
	check(t, e.connect(peer, psn, 14, 7), "QP %#x to RTR and RTS towards %#x", e.qp.QPN(), peer.QPN)
	if err := p.sync("rts"); err != nil {
		fail(t, "sync rts: %v", err)
	}

	if role == "client" {
		labPairClient(t, e, peer, p)
	} else {
		labPairServer(t, e, peer, p)
	}
}

// pairLink carries JSON messages between the two test processes.
type pairLink struct {
	enc *json.Encoder
	dec *json.Decoder
}

func (p *pairLink) swap(mine, theirs any) error {
	if err := p.enc.Encode(mine); err != nil {
		return err
	}
	return p.dec.Decode(theirs)
}

// sync is a barrier: both sides send a tag and expect the same one.
func (p *pairLink) sync(tag string) error {
	var got string
	if err := p.swap(tag, &got); err != nil {
		return err
	}
	if got != tag {
		return fmt.Errorf("peer at %q, expected %q", got, tag)
	}
	return nil
}

// verdict carries one side's result of a step to the other.
type verdict struct {
	Step string
	Err  string
}

func (p *pairLink) report(t *testing.T, step string, err error) {
	v := verdict{Step: step}
	if err != nil {
		v.Err = err.Error()
	}
	if e := p.enc.Encode(v); e != nil {
		fail(t, "send verdict %s: %v", step, e)
	}
	if err != nil {
		fail(t, "%s: %v", step, err)
	}
	pass(t, "%s", step)
}

func (p *pairLink) await(t *testing.T, step string) {
	var v verdict
	if err := p.dec.Decode(&v); err != nil {
		fail(t, "peer verdict on %s: %v", step, err)
	}
	if v.Step != step || v.Err != "" {
		fail(t, "peer says %s: %s (expected verdict on %s)", v.Step, v.Err, step)
	}
	pass(t, "peer confirms %s", step)
}

func labPairClient(t *testing.T, e *end, r peerInfo, p *pairLink) {
	// WRITE then WRITE_WITH_IMM: the server checks both.
	fillPattern(e.buf[0:4096], 0x10)
	check(t, e.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: e.sge(0, 4096), RemoteAddr: r.Addr, RKey: r.RKey}), "post RDMA WRITE")
	if _, err := expectWC(e.scq, 1, verbs.WCRDMAWrite); err != nil {
		fail(t, "RDMA WRITE: %v", err)
	}
	fillPattern(e.buf[4096:6144], 0x20)
	check(t, e.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 0xfeed0001, SGList: e.sge(4096, 2048), RemoteAddr: r.Addr + 4096, RKey: r.RKey}), "post WRITE_WITH_IMM")
	if _, err := expectWC(e.scq, 2, verbs.WCRDMAWrite); err != nil {
		fail(t, "WRITE_WITH_IMM: %v", err)
	}
	p.await(t, "server saw WRITE and WRITE_WITH_IMM data, imm and a channel event")

	// SEND: the server checks it.
	fillPattern(e.buf[6144:7144], 0x30)
	check(t, e.post(verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SGList: e.sge(6144, 1000)}), "post SEND")
	if _, err := expectWC(e.scq, 3, verbs.WCSend); err != nil {
		fail(t, "SEND: %v", err)
	}
	p.await(t, "server received the SEND")

	// The server writes to us and then sends with immediate.
	wc, err := expectWC(e.rcq, 1000, verbs.WCRecv)
	if err == nil && (wc.ImmData != 0x5e5e || wc.WCFlags&verbs.WCFlagWithImm == 0) {
		err = fmt.Errorf("completion %+v, want imm 0x5e5e", wc)
	}
	if err == nil {
		err = checkPattern(e.buf[16384:20480], 0x50)
	}
	p.report(t, "client saw the server's WRITE and SEND_WITH_IMM", err)

	// READ and atomics against the server's memory.
	check(t, e.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMARead, SGList: e.sge(32768, 4096), RemoteAddr: r.Addr + 32768, RKey: r.RKey}), "post READ")
	if _, err := expectWC(e.scq, 4, verbs.WCRDMARead); err != nil {
		fail(t, "READ: %v", err)
	}
	if err := checkPattern(e.buf[32768:36864], 0x40); err != nil {
		fail(t, "READ data: %v", err)
	}
	pass(t, "RDMA READ of 4096 bytes checked")
	check(t, e.post(verbs.SendWR{WRID: 5, Opcode: verbs.WRAtomicFetchAdd, SGList: e.sge(40960, 8), RemoteAddr: r.Addr + 40960, RKey: r.RKey, CompareAdd: 5}), "post FETCH_ADD")
	if _, err := expectWC(e.scq, 5, verbs.WCFetchAdd); err != nil {
		fail(t, "FETCH_ADD: %v", err)
	}
	if v := binary.NativeEndian.Uint64(e.buf[40960:]); v != 100 {
		fail(t, "FETCH_ADD fetched %d, want 100", v)
	}
	check(t, e.post(verbs.SendWR{WRID: 6, Opcode: verbs.WRAtomicCmpAndSwp, SGList: e.sge(40968, 8), RemoteAddr: r.Addr + 40960, RKey: r.RKey, CompareAdd: 105, Swap: 7}), "post CMP_AND_SWP")
	if _, err := expectWC(e.scq, 6, verbs.WCCompSwap); err != nil {
		fail(t, "CMP_AND_SWP: %v", err)
	}
	if v := binary.NativeEndian.Uint64(e.buf[40968:]); v != 105 {
		fail(t, "CMP_AND_SWP fetched %d, want 105", v)
	}
	pass(t, "FETCH_AND_ADD fetched 100, CMP_AND_SWP fetched 105")
	p.await(t, "server word is 7 after FETCH_ADD(5) and CMP_SWAP(105->7)")

	labAPMOnRoCE(t, e)
	if err := p.sync("done"); err != nil {
		fail(t, "sync done: %v", err)
	}

	if os.Getenv("IBPATH_LAB_NO_FLAP") == "1" {
		fmt.Println("SKIP: link flap (IBPATH_LAB_NO_FLAP=1)")
		return
	}
	nd := getenv("IBPATH_LAB_NETDEV", "eth0")
	check(t, ipLink(nd, "down"), "ip link set %s down", nd)
	ev, err := waitAsync(e.ctx, verbs.EventPortErr, labWait)
	upErr := ipLink(nd, "up")
	if err != nil {
		fail(t, "async event after %s down: %v", nd, err)
	}
	pass(t, "async event %v on port %d after %s down", ev.Type, ev.Port, nd)
	check(t, upErr, "ip link set %s up", nd)
	ev, err = waitAsync(e.ctx, verbs.EventPortActive, 20*time.Second)
	if err != nil {
		fail(t, "async event after %s up: %v", nd, err)
	}
	pass(t, "async event %v on port %d after %s up", ev.Type, ev.Port, nd)
}

func labPairServer(t *testing.T, e *end, r peerInfo, p *pairLink) {
	// WRITE, then WRITE_WITH_IMM with a completion channel event.
	err := func() error {
		cq, err := waitCQEvent(e.ch, labWait)
		if err != nil {
			return err
		}
		e.ch.AckCQEvents(cq, 1)
		if cq != e.rcq {
			return fmt.Errorf("channel named CQ %v, not the receive CQ", cq)
		}
		check(t, e.rcq.ReqNotify(false), "re-arm the receive CQ")
		wc, err := expectWC(e.rcq, 1000, verbs.WCRecvRDMAWithImm)
		if err != nil {
			return err
		}
		if wc.ImmData != 0xfeed0001 || wc.ByteLen != 2048 {
			return fmt.Errorf("WRITE_WITH_IMM completion %+v", wc)
		}
		if err := checkPattern(e.buf[0:4096], 0x10); err != nil {
			return fmt.Errorf("WRITE data: %v", err)
		}
		return checkPattern(e.buf[4096:6144], 0x20)
	}()
	p.report(t, "server saw WRITE and WRITE_WITH_IMM data, imm and a channel event", err)

	wc, err := expectWC(e.rcq, 1001, verbs.WCRecv)
	if err == nil && wc.ByteLen != 1000 {
		err = fmt.Errorf("SEND of %d bytes, want 1000", wc.ByteLen)
	}
	if err == nil {
		err = checkPattern(e.buf[9216:10216], 0x30)
	}
	p.report(t, "server received the SEND", err)

	// Towards the client: WRITE then SEND_WITH_IMM.
	fillPattern(e.buf[16384:20480], 0x50)
	check(t, e.post(verbs.SendWR{WRID: 11, Opcode: verbs.WRRDMAWrite, SGList: e.sge(16384, 4096), RemoteAddr: r.Addr + 16384, RKey: r.RKey}), "post RDMA WRITE")
	check(t, e.post(verbs.SendWR{WRID: 12, Opcode: verbs.WRSendWithImm, ImmData: 0x5e5e, SGList: e.sge(16384, 16)}), "post SEND_WITH_IMM")
	if _, err := expectWC(e.scq, 11, verbs.WCRDMAWrite); err != nil {
		fail(t, "RDMA WRITE: %v", err)
	}
	if _, err := expectWC(e.scq, 12, verbs.WCSend); err != nil {
		fail(t, "SEND_WITH_IMM: %v", err)
	}
	p.await(t, "client saw the server's WRITE and SEND_WITH_IMM")

	// The client reads and runs atomics; the word ends at 7.
	deadline := time.Now().Add(labWait)
	var v uint64
	for time.Now().Before(deadline) {
		if v = binary.NativeEndian.Uint64(e.buf[40960:]); v == 7 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var aerr error
	if v != 7 {
		aerr = fmt.Errorf("server word is %d, want 7", v)
	}
	p.report(t, "server word is 7 after FETCH_ADD(5) and CMP_SWAP(105->7)", aerr)
	if err := p.sync("done"); err != nil {
		fail(t, "sync done: %v", err)
	}
	// The client may now pull its link: the QP here may see errors; none
	// of that is checked on this side.
	_, err = e.ctx.GetAsyncEvent()
	if err != nil && !errors.Is(err, verbs.EAGAIN) {
		fail(t, "GetAsyncEvent: %v", err)
	}
}
