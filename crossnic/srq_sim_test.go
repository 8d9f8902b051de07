package crossnic_test

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

const (
	srqQPs    = 3  // QPs on the receiving node's SRQ
	srqRecvs  = 12 // receives the application keeps posted on it
	srqMsg    = 48 // bytes per SEND
	srqWindow = 4  // SENDs outstanding per QP
	srqWRID   = 5000
)

// srqWorld: node0 sends on srqQPs protected QPs to node1, whose QPs
// receive through one SRQ that an SRQGroup protects. Every SEND carries
// its QP's index and sequence number; node1's application checks that
// each QP's messages arrive once, in order, on that QP, into a receive it
// posted and did not see complete yet, and posts each receive again.
type srqWorld struct {
	t       *testing.T
	f       *sim.Fabric
	hca     [2]*sim.HCA // each node's default HCA
	snd     [srqQPs]*crossnic.Conn
	rcv     [srqQPs]*crossnic.Conn
	rcvQPN  [srqQPs]uint32
	rcvLeg  [srqQPs][2]crossnic.Leg
	group   *crossnic.SRQGroup
	ctxs    [2][2]verbs.Context // [node][default, backup]
	sbuf    []byte
	smr     verbs.MR
	rbuf    []byte
	rmr     verbs.MR
	sent    [srqQPs]int
	acked   [srqQPs]int
	got     [srqQPs]int
	posted  map[uint64]bool // node1's receives outstanding, as its application sees them
	sendErr []verbs.WC
	desc    string // the schedule, for a failure's message
}

func (w *srqWorld) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s%s", w.desc, fmt.Sprintf(format, args...))
}

// srqBakHook, when set, wraps the backup SRQ as the group sees it (not
// for parallel use).
var srqBakHook func(verbs.SRQ) verbs.SRQ

func newSRQWorld(t *testing.T, seed uint64, p sim.Profile) *srqWorld {
	t.Helper()
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: seed, Profile: p}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	must(t, err)
	w := &srqWorld{t: t, f: f, posted: map[uint64]bool{}}
	w.sbuf = make([]byte, srqQPs*srqWindow*srqMsg*64)
	w.rbuf = make([]byte, srqRecvs*srqMsg)
	var pd [2][2]verbs.PD
	var mr [2][2]verbs.MR
	for n, name := range []string{"node0", "node1"} {
		h := f.Host(name)
		w.hca[n] = h.HCA("mlx5_0")
		for l, dev := range []string{"mlx5_0", "mlx5_1"} {
			w.ctxs[n][l], err = h.Open(dev)
			must(t, err)
			pd[n][l], err = w.ctxs[n][l].AllocPD()
			must(t, err)
			buf := w.sbuf
			if n == 1 {
				buf = w.rbuf
			}
			mr[n][l], err = pd[n][l].RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			must(t, err)
		}
	}
	w.smr, w.rmr = mr[0][0], mr[1][0]
	var srq [2]verbs.SRQ
	srq[0], err = pd[1][0].(verbs.SRQCreator).CreateSRQ(verbs.SRQAttr{MaxWR: srqRecvs, MaxSGE: 1})
	must(t, err)
	da, err := srq[0].Query()
	must(t, err)
	srq[1], err = pd[1][1].(verbs.SRQCreator).CreateSRQ(verbs.SRQAttr{MaxWR: da.MaxWR + 1, MaxSGE: 1})
	must(t, err)
	rkeys := &crossnic.KeyMap{LKeys: map[uint32]uint32{mr[1][0].LKey(): mr[1][1].LKey()}}
	bak := srq[1]
	if srqBakHook != nil {
		bak = srqBakHook(bak)
	}
	w.group, err = crossnic.NewSRQGroup(srq[0], bak, rkeys)
	must(t, err)
	skeys := &crossnic.KeyMap{LKeys: map[uint32]uint32{mr[0][0].LKey(): mr[0][1].LKey()}}
	for i := range srqQPs {
		var s, r [2]*side
		for l := range 2 {
			s[l] = &side{ctx: w.ctxs[0][l], pd: pd[0][l], mr: mr[0][l]}
			s[l].cq, err = s[l].ctx.CreateCQ(256, nil, 0)
			must(t, err)
			s[l].qp, err = s[l].pd.CreateQP(verbs.QPInitAttr{SendCQ: s[l].cq, RecvCQ: s[l].cq, QPType: verbs.QPTRC,
				Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
			must(t, err)
			r[l] = &side{ctx: w.ctxs[1][l], pd: pd[1][l], mr: mr[1][l]}
			r[l].cq, err = r[l].ctx.CreateCQ(256, nil, 0)
			must(t, err)
			r[l].qp, err = r[l].pd.CreateQP(verbs.QPInitAttr{SendCQ: r[l].cq, RecvCQ: r[l].cq, QPType: verbs.QPTRC, SRQ: srq[l],
				Cap: verbs.QPCap{MaxSendWR: 32, MaxSendSGE: 1}})
			must(t, err)
			connectRetry(t, s[l], r[l], 3)
			connectRetry(t, r[l], s[l], 3)
		}
		must(t, crossnic.PostControlRecv(s[1].qp))
		w.snd[i], err = crossnic.NewConn(crossnic.Leg{Ctx: s[0].ctx, QP: s[0].qp, CQ: s[0].cq},
			crossnic.Leg{Ctx: s[1].ctx, QP: s[1].qp, CQ: s[1].cq}, skeys, false)
		must(t, err)
		w.rcv[i], err = crossnic.NewSRQConn(crossnic.Leg{Ctx: r[0].ctx, QP: r[0].qp, CQ: r[0].cq},
			crossnic.Leg{Ctx: r[1].ctx, QP: r[1].qp, CQ: r[1].cq}, rkeys, false, w.group)
		must(t, err)
		w.rcvQPN[i] = r[0].qp.QPN()
		w.rcvLeg[i] = [2]crossnic.Leg{{Ctx: r[0].ctx, QP: r[0].qp, CQ: r[0].cq}, {Ctx: r[1].ctx, QP: r[1].qp, CQ: r[1].cq}}
	}
	for k := range srqRecvs {
		w.postRecv(uint64(srqWRID + k))
	}
	return w
}

func (w *srqWorld) postRecv(wrid uint64) {
	k := int(wrid - srqWRID)
	sge := verbs.SGE{Addr: w.rmr.Addr() + uint64(k*srqMsg), Length: srqMsg, LKey: w.rmr.LKey()}
	if _, err := w.group.PostRecv([]verbs.RecvWR{{WRID: wrid, SGList: []verbs.SGE{sge}}}); err != nil {
		w.fatalf("post_srq_recv %d: %v", wrid, err)
	}
	w.posted[wrid] = true
}

// post tops up each QP's window of SENDs.
func (w *srqWorld) post() {
	for i, c := range w.snd {
		for w.sent[i]-w.acked[i] < srqWindow {
			n := w.sent[i]
			off := (i*64*srqWindow + n%(64*srqWindow)) * srqMsg
			msg := w.sbuf[off : off+srqMsg]
			binary.LittleEndian.PutUint32(msg, uint32(i))
			binary.LittleEndian.PutUint32(msg[4:], uint32(n))
			for b := 8; b < srqMsg; b++ {
				msg[b] = byte(n*7 + i + b)
			}
			wr := verbs.SendWR{WRID: uint64(n), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{{Addr: w.smr.Addr() + uint64(off), Length: srqMsg, LKey: w.smr.LKey()}}}
			if _, err := c.PostSend([]verbs.SendWR{wr}); errors.Is(err, verbs.EIO) {
				return // the error surfaced (check says why)
			} else if err != nil {
				w.fatalf("QP %d: post_send %d: %v", i, n, err)
			}
			w.sent[i]++
		}
	}
}

func (w *srqWorld) events() {
	for n, conns := range [][srqQPs]*crossnic.Conn{w.snd, w.rcv} {
		for _, ctx := range w.ctxs[n] {
			for {
				ev, err := ctx.GetAsyncEvent()
				if err != nil {
					break
				}
				for _, c := range conns {
					c.HandleEvent(ctx, ev, 1)
				}
				ctx.AckAsyncEvent(ev)
			}
		}
	}
}

func (w *srqWorld) poll() {
	for i, c := range w.snd {
		w.drain(c, func(x verbs.WC) {
			if x.Status != verbs.WCSuccess {
				w.sendErr = append(w.sendErr, x)
				return
			}
			if x.WRID != uint64(w.acked[i]) {
				w.fatalf("QP %d: send %d completed, expected %d", i, x.WRID, w.acked[i])
			}
			w.acked[i]++
		})
	}
	for i, c := range w.rcv {
		w.drain(c, func(x verbs.WC) { w.onRecv(i, x) })
	}
}

// drain hands every completion c has for the application to fn.
func (w *srqWorld) drain(c *crossnic.Conn, fn func(verbs.WC)) {
	var wc [16]verbs.WC
	for {
		n, err := c.Poll(wc[:])
		if err != nil {
			w.fatalf("poll: %v", err)
		}
		if n == 0 {
			return
		}
		for _, x := range wc[:n] {
			fn(x)
		}
	}
}

func (w *srqWorld) onRecv(i int, x verbs.WC) {
	if x.Status != verbs.WCSuccess {
		w.fatalf("QP %d: receive %d completed with %v at %v", i, x.WRID, x.Status, w.f.Now())
	}
	if x.QPNum != w.rcvQPN[i] {
		w.fatalf("QP %d: completion names QP %#x, want %#x", i, x.QPNum, w.rcvQPN[i])
	}
	if !w.posted[x.WRID] {
		w.fatalf("QP %d: receive %d completed, but it is not posted (a receive used twice)", i, x.WRID)
	}
	delete(w.posted, x.WRID)
	k := int(x.WRID - srqWRID)
	msg := w.rbuf[k*srqMsg : (k+1)*srqMsg]
	q, n := int(binary.LittleEndian.Uint32(msg)), int(binary.LittleEndian.Uint32(msg[4:]))
	if x.ByteLen != srqMsg || q != i || n != w.got[i] {
		w.fatalf("QP %d: receive %d holds QP %d's message %d (%d bytes), want message %d", i, x.WRID, q, n, x.ByteLen, w.got[i])
	}
	for b := 8; b < srqMsg; b++ {
		if msg[b] != byte(n*7+i+b) {
			w.fatalf("QP %d: message %d corrupt at byte %d", i, n, b)
		}
	}
	w.got[i]++
	w.postRecv(x.WRID)
}

// run sends for d, then lets everything in flight complete.
func (w *srqWorld) run(d time.Duration) {
	end := w.f.Now() + d
	for w.f.Now() < end+20*time.Millisecond {
		if w.f.Now() < end {
			w.post()
		}
		w.f.RunFor(10 * time.Microsecond)
		w.events()
		for _, c := range w.snd {
			c.Tick()
		}
		for _, c := range w.rcv {
			c.Tick()
		}
		w.poll()
	}
}

// check: every message sent arrived once, in order, and every send
// completed once, without error; every QP on both nodes fell back.
func (w *srqWorld) check(fellBack bool) error {
	if len(w.sendErr) > 0 {
		return fmt.Errorf("send errors: %+v", w.sendErr)
	}
	for i := range srqQPs {
		if w.got[i] != w.sent[i] || w.acked[i] != w.sent[i] || w.sent[i] < 20 {
			return fmt.Errorf("QP %d: %d sent, %d received, %d completed", i, w.sent[i], w.got[i], w.acked[i])
		}
		for n, c := range []*crossnic.Conn{w.snd[i], w.rcv[i]} {
			want := fsm.SQDefault
			if fellBack {
				want = fsm.SQFallback
			}
			if sq, _ := c.State(); sq != want {
				return fmt.Errorf("QP %d on node%d: %v (%s), want %v", i, n, sq, c.Reason(), want)
			}
		}
	}
	if got := w.group.Outstanding(); got != srqRecvs {
		return fmt.Errorf("%d receives outstanding on the SRQ, want %d", got, srqRecvs)
	}
	if w.group.Moved() != fellBack {
		return fmt.Errorf("the SRQ's receives moved: %v, want %v", w.group.Moved(), fellBack)
	}
	return nil
}

func TestSRQGroupNoFault(t *testing.T) {
	w := newSRQWorld(t, 1, sim.ProfileStrict)
	w.run(2 * time.Millisecond)
	if err := w.check(false); err != nil {
		t.Fatal(err)
	}
}

// The HCA of the QPs on the SRQ dies: every one of them fails over, the
// receives none completed move to the backup SRQ once, and each QP's
// messages arrive once, in order, each into a receive the application
// posted and had not seen complete.
func TestSRQReceiverHCADeath(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newSRQWorld(t, 2, p)
		w.run(500 * time.Microsecond)
		must(t, w.f.KillHCA(w.hca[1]))
		w.run(3 * time.Millisecond)
		if err := w.check(true); err != nil {
			t.Fatal(err)
		}
		st := w.group.Stats()
		t.Logf("group %+v", st)
		if st.Moved == 0 || st.Moved > srqRecvs {
			t.Fatalf("%d receives moved, want 1..%d", st.Moved, srqRecvs)
		}
	})
}

// The sender's HCA dies: the peer's notification reaches one QP of the
// SRQ on its backup (the group's control receive), and the whole group
// moves with it; the peers' later control messages consume the
// application's receives, which go back to the SRQ's tail unseen.
func TestSRQSenderHCADeath(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newSRQWorld(t, 3, p)
		w.run(500 * time.Microsecond)
		must(t, w.f.KillHCA(w.hca[0]))
		w.run(3 * time.Millisecond)
		if err := w.check(true); err != nil {
			t.Fatal(err)
		}
		if st := w.group.Stats(); st.Requeued == 0 {
			t.Fatalf("group %+v: no control message consumed an application receive", st)
		}
	})
}

// One QP of the SRQ fails over while its HCA is healthy (layer 1 handed
// it over): the others go with it, or they would consume the receives the
// backup SRQ holds copies of.
func TestSRQOneQPMovesTheGroup(t *testing.T) {
	w := newSRQWorld(t, 4, sim.ProfileStrict)
	w.run(500 * time.Microsecond)
	w.rcv[1].HandOver(nil, "test: no path left")
	w.run(3 * time.Millisecond)
	if err := w.check(true); err != nil {
		t.Fatal(err)
	}
	if err := w.rcv[0].EnableRecovery(crossnic.Recovery{Clock: w.f}); !errors.Is(err, crossnic.ErrSRQMoved) {
		t.Fatalf("recovery on a QP of an SRQ: %v, want ErrSRQMoved", err)
	}
	// a QP the application creates on the SRQ now would consume the
	// stale copies its SRQ holds: not protected
	l := w.rcvLeg[0]
	if _, err := crossnic.NewSRQConn(l[0], l[1], &crossnic.KeyMap{}, false, w.group); !errors.Is(err, crossnic.ErrSRQMoved) {
		t.Fatalf("a new QP on the moved SRQ: %v, want ErrSRQMoved", err)
	}
}

var srqRuns = flag.Int("crossnic.srqruns", 1000, "fault schedules in TestSRQCampaign")

// srqFaults are the faults TestSRQCampaign draws from.
var srqFaults = []string{
	"none",
	"the SRQ side's default HCA dies",
	"the sending side's default HCA dies",
	"layer 1 hands one QP of the SRQ over",
	"both default HCAs die, one after the other",
	"the SRQ side's default port goes down",
	"loss on both default ports, then the SRQ side's default HCA dies",
}

// TestSRQCampaign runs seeded schedules of srqFaults at random times, on
// the simulator's profiles in turn: every QP's messages arrive once, in
// order, each into a receive posted and not completed, every send
// completes once, and the group moves exactly when a QP failed over.
func TestSRQCampaign(t *testing.T) {
	runs := *srqRuns
	if testing.Short() {
		runs = 30
	}
	var moved [8]int
	for s := uint64(1); s <= uint64(runs); s++ {
		rng := rand.New(rand.NewPCG(s, 0x5e9))
		p := sim.Profiles[s%uint64(len(sim.Profiles))]
		k := rng.IntN(len(srqFaults))
		at := time.Duration(100+rng.IntN(1400)) * time.Microsecond
		w := newSRQWorld(t, s, p)
		w.desc = fmt.Sprintf("schedule %d, profile %s, fault %q at %v: ", s, p, srqFaults[k], at)
		w.run(at)
		switch k {
		case 1:
			must(t, w.f.KillHCA(w.hca[1]))
		case 2:
			must(t, w.f.KillHCA(w.hca[0]))
		case 3:
			w.rcv[rng.IntN(srqQPs)].HandOver(nil, "campaign")
		case 4:
			first := rng.IntN(2)
			must(t, w.f.KillHCA(w.hca[first]))
			w.run(time.Duration(rng.IntN(300)) * time.Microsecond)
			must(t, w.f.KillHCA(w.hca[1-first]))
		case 5:
			must(t, w.f.SetLink(w.hca[1].Port(1), false))
		case 6:
			loss := 0.01 + 0.04*rng.Float64()
			for _, a := range w.hca {
				must(t, w.f.SetLoss(a.Port(1), loss, loss))
			}
			w.run(time.Duration(rng.IntN(500)) * time.Microsecond)
			must(t, w.f.KillHCA(w.hca[1]))
		}
		w.run(2 * time.Millisecond)
		if err := w.check(k != 0); err != nil {
			t.Fatalf("%s%v\nreproduce: go test ./crossnic -run TestSRQCampaign -crossnic.srqruns %d -v (the last schedule)", w.desc, err, s)
		}
		if w.group.Moved() {
			moved[k]++
		}
	}
	for k, name := range srqFaults {
		t.Logf("fault %d %-66s group moved in %d schedules", k, name, moved[k])
		if k != 0 && runs >= 100 && moved[k] == 0 {
			t.Errorf("fault %d (%s) never moved the group", k, name)
		}
	}
}
