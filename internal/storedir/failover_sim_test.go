package storedir_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/storedir"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// A minimal copy of crossnic/conn_sim_test.go's two-node world: each node
// has a protected QP (default on mlx5_0, backup on mlx5_1) over one buffer
// registered on both HCAs. The backup attributes go through one
// bbolt-backed store per node; each node's publications are written to
// both stores, as replication would, so each can look up the other's.

const (
	slot   = 256
	nslots = 32
	window = 8
	qcap   = 128
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type side struct {
	ctx verbs.Context
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
}

func openSide(t *testing.T, h *sim.Host, dev string, buf []byte, skip int) *side {
	s := &side{}
	var err error
	s.ctx, err = h.Open(dev)
	must(t, err)
	pd, err := s.ctx.AllocPD()
	must(t, err)
	s.cq, err = s.ctx.CreateCQ(1024, nil, 0)
	must(t, err)
	for i := 0; i < skip; i++ { // so QP numbers differ between HCAs
		_, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
	}
	s.qp, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: qcap, MaxRecvWR: qcap, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	s.mr, err = pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	return s
}

func connect(t *testing.T, a, b *side) {
	must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
	pa, err := b.ctx.QueryPort(1)
	must(t, err)
	must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR, AHAttr: verbs.AHAttr{DLID: pa.LID, PortNum: 1},
		PathMTU: verbs.MTU1024, DestQPN: b.qp.QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 1},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS, Timeout: 10, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
			verbs.QPAttrMaxQPRdAtomic))
}

func pattern(round int) []byte {
	b := make([]byte, slot)
	for i := range b {
		b[i] = byte(round*31 + i)
	}
	return b
}

type node struct {
	name     string
	def, bak *side
	conn     *crossnic.Conn
	buf      []byte
	hca      *sim.HCA
	st       *store.Store
	owner    store.Owner
}

func (n *node) outAddr(s int) uint64 { return n.def.mr.Addr() + uint64(s*slot) }
func (n *node) inAddr(s int) uint64  { return n.def.mr.Addr() + uint64((nslots+s)*slot) }
func (n *node) recvSGE(k int) verbs.SGE {
	return verbs.SGE{Addr: n.inAddr(k % nslots), Length: slot, LKey: n.def.mr.LKey()}
}

func lid(t *testing.T, s *side) uint16 {
	pa, err := s.ctx.QueryPort(1)
	must(t, err)
	return pa.LID
}

type world struct {
	t      *testing.T
	f      *sim.Fabric
	n      [2]*node
	sent   int      // rounds posted by node0
	done   []uint64 // node0's completions, in order
	errs   []verbs.WC
	notifs []uint32 // notifications node1 received, in order
}

func newWorld(t *testing.T, dir string) *world {
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 1}, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	must(t, err)
	w := &world{t: t, f: f}
	for i, name := range []string{"node0", "node1"} {
		h := f.Host(name)
		buf := make([]byte, 2*nslots*slot+8)
		st, err := store.Open(filepath.Join(dir, name+".db"), store.Options{})
		must(t, err)
		t.Cleanup(func() { st.Close() })
		w.n[i] = &node{name: name, buf: buf, hca: h.HCA("mlx5_0"), st: st,
			owner: store.Owner{Node: name, PID: 1000 + i, Incarnation: 1},
			def:   openSide(t, h, "mlx5_0", buf, 0), bak: openSide(t, h, "mlx5_1", buf, 3)}
	}
	a, b := w.n[0], w.n[1]
	for _, p := range [][2]*side{{a.def, b.def}, {b.def, a.def}, {a.bak, b.bak}, {b.bak, a.bak}} {
		connect(t, p[0], p[1])
	}
	// Each node publishes its mappings, as its owner, into both stores.
	for _, me := range w.n {
		for _, st := range []*store.Store{a.st, b.st} {
			d := storedir.New(st, me.owner)
			must(t, d.PublishMR(crossnic.MRRef{LID: lid(t, me.def), RKey: me.def.mr.RKey()}, me.bak.mr.RKey()))
			must(t, d.PublishQP(crossnic.Endpoint{LID: lid(t, me.def), QPN: me.def.qp.QPN()},
				crossnic.Backup{Device: "mlx5_1", Port: 1, LID: lid(t, me.bak), QPN: me.bak.qp.QPN()}))
		}
	}
	for i, me := range w.n {
		peer := w.n[1-i]
		dir := storedir.New(me.st, me.owner) // lookups from this node's own store
		if bk, ok := dir.LookupQP(crossnic.Endpoint{LID: lid(t, peer.def), QPN: peer.def.qp.QPN()}); !ok || bk.QPN != peer.bak.qp.QPN() {
			t.Fatalf("%s: peer's backup QP %+v, %v", me.name, bk, ok)
		}
		peerLID := lid(t, peer.def)
		keys := &crossnic.KeyMap{LKeys: map[uint32]uint32{me.def.mr.LKey(): me.bak.mr.LKey()},
			RKey: func(rk uint32) (uint32, bool) { return dir.LookupMR(crossnic.MRRef{LID: peerLID, RKey: rk}) }}
		var err error
		me.conn, err = crossnic.NewConn(crossnic.Leg{Ctx: me.def.ctx, QP: me.def.qp, CQ: me.def.cq},
			crossnic.Leg{Ctx: me.bak.ctx, QP: me.bak.qp, CQ: me.bak.cq}, keys, false)
		must(t, err)
		must(t, me.conn.EnableRecovery(crossnic.Recovery{Clock: f, ProbeInterval: 2 * time.Millisecond}))
		recvs := make([]verbs.RecvWR, 64)
		for k := range recvs {
			recvs[k] = verbs.RecvWR{WRID: uint64(1000 + k), SGList: []verbs.SGE{me.recvSGE(k)}}
		}
		_, err = me.conn.PostRecv(recvs)
		must(t, err)
	}
	return w
}

// post sends round r from node0: a bulk WRITE and a WRITE_WITH_IMM
// notification (NCCL-Simple).
func (w *world) post(r int) error {
	me, peer := w.n[0], w.n[1]
	s := r % nslots
	copy(me.buf[s*slot:(s+1)*slot], pattern(r))
	_, err := me.conn.PostSend([]verbs.SendWR{
		{WRID: uint64(2 * r), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: me.outAddr(s), Length: slot, LKey: me.def.mr.LKey()}},
			RemoteAddr: peer.inAddr(s), RKey: peer.def.mr.RKey()},
		{WRID: uint64(2*r + 1), Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(r),
			RemoteAddr: peer.inAddr(s), RKey: peer.def.mr.RKey()},
	})
	return err
}

func (w *world) pump() {
	for i, me := range w.n {
		for {
			ev, err := me.def.ctx.GetAsyncEvent()
			if err != nil {
				break
			}
			me.conn.HandleEvent(me.def.ctx, ev, 1)
			me.def.ctx.AckAsyncEvent(ev)
		}
		me.conn.Tick()
		wc := make([]verbs.WC, 32)
		for {
			n, err := me.conn.Poll(wc)
			must(w.t, err)
			if n == 0 {
				break
			}
			for _, c := range wc[:n] {
				w.onWC(i, c)
			}
		}
	}
}

func (w *world) onWC(i int, c verbs.WC) {
	me := w.n[i]
	if c.Status != verbs.WCSuccess {
		w.errs = append(w.errs, c)
		return
	}
	if c.Opcode != verbs.WCRecv && c.Opcode != verbs.WCRecvRDMAWithImm {
		w.done = append(w.done, c.WRID)
		return
	}
	r := int(c.ImmData)
	s := r % nslots
	if !bytes.Equal(me.buf[(nslots+s)*slot:(nslots+s+1)*slot], pattern(r)) {
		w.t.Fatalf("%s: notification %d arrived without its data", me.name, r)
	}
	w.notifs = append(w.notifs, c.ImmData)
	k := int(c.WRID - 1000)
	_, err := me.conn.PostRecv([]verbs.RecvWR{{WRID: c.WRID, SGList: []verbs.SGE{me.recvSGE(k)}}})
	must(w.t, err)
}

// run drives rounds from node0 (when send) for d of virtual time.
func (w *world) run(d time.Duration, send bool) {
	end := w.f.Now() + d
	for w.f.Now() < end {
		if send && w.sent-len(w.done)-len(w.errs) < window && len(w.errs) == 0 {
			err := w.post(w.sent)
			if err != nil && !errors.Is(err, verbs.EIO) {
				w.t.Fatalf("post: %v", err)
			}
			if err == nil {
				w.sent++
			}
		}
		w.f.RunFor(5 * time.Microsecond)
		w.pump()
	}
}

func TestFailoverThroughStore(t *testing.T) {
	w := newWorld(t, t.TempDir())
	w.run(300*time.Microsecond, true)
	must(t, w.f.KillHCA(w.n[0].hca))
	w.run(2*time.Millisecond, true)
	w.run(20*time.Millisecond, false) // drain
	if sq, rq := w.n[0].conn.State(); sq != fsm.SQFallback || rq != fsm.RQFallback {
		t.Fatalf("node0 %v/%v, want fallback", sq, rq)
	}
	if len(w.errs) != 0 {
		t.Fatalf("errors reached the application: %v", w.errs)
	}
	for k, id := range w.done {
		if id != uint64(2*k+1) {
			t.Fatalf("completions %v: not each signaled WR once, in order (at %d)", w.done, k)
		}
	}
	for k, r := range w.notifs {
		if r != uint32(k) {
			t.Fatalf("notifications %v: not exactly once, in order (at %d)", w.notifs, k)
		}
	}
	if w.sent < 40 || len(w.done) != w.sent || len(w.notifs) != w.sent {
		t.Fatalf("%d sent, %d completed, %d notified", w.sent, len(w.done), len(w.notifs))
	}
	if st := w.n[0].conn.Stats(); st.Replayed == 0 {
		t.Fatalf("stats %+v: nothing was replayed", st)
	}
}
