package crossnic_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

const (
	nslots = 32 // data slots per direction
	window = 8  // rounds in flight per sender
	// recvWRID is the wr_id of a node's first receive; sends use small
	// ones (2r and 2r+1 for round r), so the two never meet.
	recvWRID = 1 << 32
	nrecvs   = 64 // receives each node keeps posted (wr_ids recvWRID+k)
)

// workload varies how a round of the WRITE workload is posted: the bulk
// WRITE with two SGEs, inline (its source slot scribbled over at once,
// as an application may after an inline post), and an RDMA READ of the
// peer's fixed region between the WRITE and the notification.
type workload uint8

const (
	wlMultiSGE workload = 1 << iota
	wlInline
	wlRead
)

func (l workload) String() string {
	var b strings.Builder
	for k, name := range []string{"multi-sge", "inline", "read"} {
		if l&(1<<k) != 0 {
			if b.Len() > 0 {
				b.WriteByte('+')
			}
			b.WriteString(name)
		}
	}
	if b.Len() == 0 {
		return "plain"
	}
	return b.String()
}

// readWRID is the wr_id of round r's READ (wlRead): apart from the
// sends' 2r, 2r+1 and the receives'.
func readWRID(r int) uint64 { return 1<<40 + 1 + uint64(r) }

// isRecvWRID says whether wr_id is one of the world's receives (the opcode
// of an error completion is undefined).
func isRecvWRID(id uint64) bool { return id >= recvWRID && id < recvWRID+nrecvs }

// node is one host: a protected QP (default on mlx5_0, backup on mlx5_1)
// over one buffer registered on both HCAs.
type node struct {
	name     string
	def, bak *side
	conn     *crossnic.Conn
	buf      []byte
	hca      *sim.HCA
}

// world is two protected nodes and the checker's view of their traffic.
type world struct {
	t       testing.TB
	f       *sim.Fabric
	n       [2]*node
	sent    [2]int      // rounds posted by each node
	done    [2][]uint64 // wr_ids each application saw complete, in order
	errs    [2][]verbs.WC
	notifs  [2][]uint32 // notifications each node received, in order
	sendRx  [2]bool     // two-sided SEND workload (else NCCL-Simple WRITEs)
	refused [2]bool     // a post failed (EIO): the sender stopped
	lazy    [2]int      // poll that node only every lazy-th pump (0: every pump)
	mailbox bool        // the Conns have mailboxes (worldOpts.noMailbox clear)
	pumps   int
	wc      [32]verbs.WC // pump's poll buffer
	polled  int          // completions the last pump delivered
	stopped [2]bool      // that node's process is stopped: never polled, nothing posted
	load    [2]workload  // how each node's rounds are built (WRITE workload)
	// overrunOK: a poll may fail with EIO (a CQ overrun the schedule
	// provokes); overran: that node's did, and its application stopped,
	// its completions after the overrun lost as with plain verbs
	overrunOK bool
	overran   [2]bool
	// holdRecvs: that node reposts the receives it consumed only every
	// holdRecvs of virtual time, in a burst (its peer's SENDs meet an
	// empty receive queue meanwhile: RNR); held are those waiting
	holdRecvs [2]time.Duration
	held      [2][]uint64
	heldAt    [2]time.Duration
	// What each application posted and saw complete, in order, send and
	// receive queues apart (wr_ids: an error completion's opcode is
	// undefined); atoms holds the completions of atomics (atomicWRID).
	posted, rposted  [2][]uint64
	sendSeq, recvSeq [2][]uint64
	atoms            [2][]verbs.WC
}

func newWorld(t testing.TB, seed uint64) *world {
	dir := crossnic.NewMemDirectory()
	return newWorldDir(t, seed, [2]crossnic.Directory{dir, dir})
}

// newWorldDir is newWorld with each node publishing and looking up backup
// attributes through its own Directory; the two must share what they hold
// (one directory, or two views of one replicated store).
func newWorldDir(t testing.TB, seed uint64, dirs [2]crossnic.Directory) *world {
	return newWorldWrap(t, seed, dirs, nil)
}

// newWorldWrap is newWorldDir with each node's backup QP, as its Conn
// sees it, wrapped by wrapBak (nil: as it is): tests inject failures of
// the verbs the Conn calls on it.
func newWorldWrap(t testing.TB, seed uint64, dirs [2]crossnic.Directory, wrapBak func(verbs.QP) verbs.QP) *world {
	return newWorldWith(t, dirs, worldOpts{cfg: sim.Config{Seed: seed}, retry: 3, wrapBak: wrapBak})
}

// traceHook, when set, sees each new world's fabric before it runs
// (TestScheduleDeterministic; not for parallel use).
var traceHook func(*sim.Fabric)

// worldOpts are the knobs of newWorldWith.
type worldOpts struct {
	cfg     sim.Config              // the fabric's (Seed included)
	retry   uint8                   // retry_cnt of every QP
	wrapBak func(verbs.QP) verbs.QP // see newWorldWrap
	wrapDef func(verbs.CQ) verbs.CQ // each node's default CQ as its Conn sees it (nil: as it is)
	// wrapDefQP: node i's default QP as its Conn sees it (nil: as it is)
	wrapDefQP func(i int, qp verbs.QP) verbs.QP
	// noRecovery: the Conns do not switch back; handshake, when set,
	// bounds their fallback handshake (BoundHandshake), or with recovery
	// is its HandshakeTimeout
	noRecovery bool
	handshake  time.Duration
	rnrRetry   uint8 // rnr_retry of every QP (0: 7, without end)
	noRecvs    bool  // the nodes post no receives at the start
	timeout    uint8 // local ACK timeout of every QP (0: 10, 4 ms)
	// acrossSpines: each HCA hangs off a leaf of its own, so all traffic
	// crosses a spine (the DLID picks which); else the rails' leaves
	// join the hosts' HCAs of one rail directly
	acrossSpines bool
	// cqe: entries of each node's default CQ (0: 1024)
	cqe int
	// fabric, when set, is an existing world's: the new world's
	// connection shares its hosts' HCAs (its QPs, CQs and MRs its own)
	fabric *sim.Fabric
	// noMailbox: the Conns open no mailbox (mailbox.go): the handshake
	// goes through the control receives, and there is no switch back
	// (noRecovery must be set too)
	noMailbox bool
}

// worldFabric builds the fabric of two hosts with two single-port HCAs
// each (mlx5_0 for the default QPs, mlx5_1 for the backups).
func worldFabric(o worldOpts) (*sim.Fabric, error) {
	if !o.acrossSpines {
		return sim.NewRailFabric(sim.RailSpec{Config: o.cfg, Hosts: 2, HCAsPerHost: 2, PortsPerHCA: 1})
	}
	f := sim.New(o.cfg)
	for i := 0; i < 2; i++ {
		h, err := f.AddHost(fmt.Sprintf("node%d", i))
		if err != nil {
			return nil, err
		}
		for r := 0; r < 2; r++ {
			leaf, err := f.AddLeaf(fmt.Sprintf("leaf%d-%d", i, r))
			if err != nil {
				return nil, err
			}
			a, err := h.AddHCA(sim.HCASpec{Name: fmt.Sprintf("mlx5_%d", r), Ports: 1})
			if err != nil {
				return nil, err
			}
			if err := f.Cable(a.Port(1), leaf); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// forProfiles runs fn once per vendor profile of the simulator, each as a
// subtest: what a test checks must hold whether a dead device flushes its
// QPs (rdmavt) or completes nothing more (strict, mlx5).
func forProfiles(t *testing.T, fn func(t *testing.T, p sim.Profile)) {
	for _, p := range sim.Profiles {
		t.Run(string(p), func(t *testing.T) { fn(t, p) })
	}
}

// newWorldProfile is newWorld on a fabric of the given profile.
func newWorldProfile(t testing.TB, seed uint64, p sim.Profile) *world {
	dir := crossnic.NewMemDirectory()
	return newWorldWith(t, [2]crossnic.Directory{dir, dir}, worldOpts{cfg: sim.Config{Seed: seed, Profile: p}, retry: 3})
}

// newWorldWith builds the world of newWorldWrap with the given fabric
// configuration and retry count.
func newWorldWith(t testing.TB, dirs [2]crossnic.Directory, o worldOpts) *world {
	wrapBak := o.wrapBak
	f := o.fabric
	if f == nil {
		var err error
		f, err = worldFabric(o)
		must(t, err)
		if os.Getenv("IBPATH_SIM_TRACE") != "" { // the trace of a schedule replayed by its seed
			f.SetTracer(func(r sim.TraceRecord) { fmt.Printf("%+v\n", r) })
		}
		if traceHook != nil {
			traceHook(f)
		}
	}
	w := &world{t: t, f: f}
	for i, name := range []string{"node0", "node1"} {
		h := f.Host(name)
		buf := make([]byte, 4*nslots*slot+8)
		for k := 0; k < nslots; k++ {
			copy(buf[(2*nslots+k)*slot:], fixedPattern(k))
		}
		w.n[i] = &node{name: name, buf: buf, hca: h.HCA("mlx5_0"),
			def: openSideCQ(t, h, "mlx5_0", buf, 0, cmp.Or(o.cqe, 1024)), bak: openSideSkip(t, h, "mlx5_1", buf, 3)}
	}
	a, b := w.n[0], w.n[1]
	rnr := o.rnrRetry
	if rnr == 0 {
		rnr = 7
	}
	timeout := o.timeout
	if timeout == 0 {
		timeout = 10
	}
	for _, p := range [][2]*side{{a.def, b.def}, {b.def, a.def}, {a.bak, b.bak}, {b.bak, a.bak}} {
		connectTimeout(t, p[0], p[1], o.retry, rnr, timeout)
	}
	// Shadow attributes published in advance; each side translates its
	// own lkeys and the peer's rkeys.
	for i, me := range w.n {
		pa, err := me.def.ctx.QueryPort(1)
		must(t, err)
		must(t, dirs[i].PublishMR(crossnic.MRRef{LID: pa.LID, RKey: me.def.mr.RKey()}, me.bak.mr.RKey()))
	}
	for i, me := range w.n {
		peer, dir := w.n[1-i], dirs[i]
		pp, _ := peer.def.ctx.QueryPort(1)
		keys := &crossnic.KeyMap{LKeys: map[uint32]uint32{me.def.mr.LKey(): me.bak.mr.LKey()},
			RKey: func(rk uint32) (uint32, bool) { return dir.LookupMR(crossnic.MRRef{LID: pp.LID, RKey: rk}) }}
		var err error
		must(t, crossnic.PostControlRecv(me.bak.qp))
		bakQP := verbs.QP(me.bak.qp)
		if wrapBak != nil {
			bakQP = wrapBak(bakQP)
		}
		defCQ := verbs.CQ(me.def.cq)
		if o.wrapDef != nil {
			defCQ = o.wrapDef(defCQ)
		}
		defQP := verbs.QP(me.def.qp)
		if o.wrapDefQP != nil {
			defQP = o.wrapDefQP(i, defQP)
		}
		me.conn, err = crossnic.NewConn(crossnic.Leg{Ctx: me.def.ctx, QP: defQP, CQ: defCQ},
			crossnic.Leg{Ctx: me.bak.ctx, QP: bakQP, CQ: me.bak.cq}, keys, false)
		must(t, err)
		me.conn.SetMemReader(me.read)
		psns := rand.New(rand.NewPCG(o.cfg.Seed, uint64(i)+uint64(me.def.qp.QPN())<<1))
		me.conn.SetPSNSource(psns.Uint32) // a seed replays the same PSNs
	}
	if !o.noMailbox {
		w.mailbox = true
		var boxes [2]crossnic.Mailbox
		for i, me := range w.n {
			var err error
			boxes[i], err = me.conn.OpenMailbox()
			must(t, err)
		}
		for i, me := range w.n {
			must(t, me.conn.SetPeerMailbox(boxes[1-i]))
		}
	} else if !o.noRecovery {
		t.Fatal("worldOpts: noMailbox without noRecovery: a switch back needs mailboxes (crossnic.ErrNoMailbox)")
	}
	for i, me := range w.n {
		switch {
		case !o.noRecovery:
			must(t, me.conn.EnableRecovery(crossnic.Recovery{Clock: f, ProbeInterval: 2 * time.Millisecond, HandshakeTimeout: o.handshake}))
		case o.handshake > 0:
			must(t, me.conn.BoundHandshake(f, o.handshake))
		}
		if o.noRecvs {
			continue
		}
		recvs := make([]verbs.RecvWR, nrecvs)
		for k := range recvs {
			recvs[k] = verbs.RecvWR{WRID: recvWRID + uint64(k), SGList: []verbs.SGE{me.recvSGE(k)}}
			w.rposted[i] = append(w.rposted[i], recvs[k].WRID)
		}
		_, err := me.conn.PostRecv(recvs)
		must(t, err)
	}
	return w
}

// Memory layout of a node's buffer: [0, nslots*slot) is what it sends,
// [nslots*slot, 2*nslots*slot) what its peer writes or sends into,
// [2*nslots*slot, 3*nslots*slot) a fixed region its peer READs
// (fixedPattern), [3*nslots*slot, 4*nslots*slot) where its READs land,
// and the last 8 bytes a counter for atomics.
func (n *node) outAddr(s int) uint64   { return n.def.mr.Addr() + uint64(s*slot) }
func (n *node) inAddr(s int) uint64    { return n.def.mr.Addr() + uint64((nslots+s)*slot) }
func (n *node) fixedAddr(s int) uint64 { return n.def.mr.Addr() + uint64((2*nslots+s)*slot) }
func (n *node) readAddr(s int) uint64  { return n.def.mr.Addr() + uint64((3*nslots+s)*slot) }
func (n *node) readBytes(s int) []byte { return n.buf[(3*nslots+s)*slot : (3*nslots+s+1)*slot] }

// read is the node's MemReader: its buffer, which is all the memory its
// WRs name.
func (n *node) read(addr uint64, k uint32) []byte {
	base := n.def.mr.Addr()
	if addr < base || addr+uint64(k) > base+uint64(len(n.buf)) {
		return nil
	}
	return n.buf[addr-base : addr-base+uint64(k)]
}

// fixedPattern is the content of slot s of every node's fixed region.
func fixedPattern(s int) []byte { return pattern(128 + s) }
func (n *node) recvSGE(k int) verbs.SGE {
	return verbs.SGE{Addr: n.inAddr(k % nslots), Length: slot, LKey: n.def.mr.LKey()}
}

// post sends round r from node i: a bulk WRITE and a WRITE_WITH_IMM
// notification (NCCL-Simple), or a SEND carrying the round (two-sided).
func (w *world) post(i, r int) error {
	me, peer := w.n[i], w.n[1-i]
	s := r % nslots
	copy(me.buf[s*slot:(s+1)*slot], pattern(r))
	lkey := me.def.mr.LKey()
	var wrs []verbs.SendWR
	if w.sendRx[i] {
		wrs = []verbs.SendWR{{WRID: uint64(2*r + 1), Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(r),
			SGList: []verbs.SGE{{Addr: me.outAddr(s), Length: slot, LKey: lkey}}}}
	} else {
		bulk := verbs.SendWR{WRID: uint64(2 * r), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{{Addr: me.outAddr(s), Length: slot, LKey: lkey}},
			RemoteAddr: peer.inAddr(s), RKey: peer.def.mr.RKey()}
		if w.load[i]&wlMultiSGE != 0 {
			bulk.SGList = []verbs.SGE{{Addr: me.outAddr(s), Length: slot / 4, LKey: lkey}, {Addr: me.outAddr(s) + slot/4, Length: slot - slot/4, LKey: lkey}}
		}
		if w.load[i]&wlInline != 0 {
			bulk.SendFlags |= verbs.SendInline
		}
		wrs = []verbs.SendWR{bulk}
		if w.load[i]&wlRead != 0 {
			clear(me.readBytes(s))
			wrs = append(wrs, verbs.SendWR{WRID: readWRID(r), Opcode: verbs.WRRDMARead,
				SGList:     []verbs.SGE{{Addr: me.readAddr(s), Length: slot, LKey: lkey}},
				RemoteAddr: peer.fixedAddr(s), RKey: peer.def.mr.RKey()})
		}
		wrs = append(wrs, verbs.SendWR{WRID: uint64(2*r + 1), Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(r),
			RemoteAddr: peer.inAddr(s), RKey: peer.def.mr.RKey()})
	}
	n, err := me.conn.PostSend(wrs)
	for _, wr := range wrs[:n] {
		w.posted[i] = append(w.posted[i], wr.WRID)
	}
	if n > 0 && w.load[i]&wlInline != 0 && !w.sendRx[i] {
		// The inline data was copied at the post: the application may
		// reuse its buffer now, and a replay must still send the round.
		clear(me.buf[s*slot : (s+1)*slot])
	}
	return err
}

// pump delivers async events of both devices and polls both nodes
// (a lazy one only now and then).
func (w *world) pump() {
	w.pumps++
	w.polled = 0
	for i, me := range w.n {
		if w.stopped[i] || w.lazy[i] > 1 && w.pumps%w.lazy[i] != 0 {
			continue
		}
		for _, ctx := range []verbs.Context{me.def.ctx, me.bak.ctx} {
			for {
				ev, err := ctx.GetAsyncEvent()
				if err != nil {
					break
				}
				me.conn.HandleEvent(ctx, ev, 1)
				ctx.AckAsyncEvent(ev)
			}
		}
		me.conn.Tick()
		w.releaseHeld(i)
		wc := w.wc[:]
		for {
			n, err := me.conn.Poll(wc)
			if err != nil && w.overrunOK && errors.Is(err, verbs.EIO) {
				// ibv_poll_cq fails after an overrun: the application
				// stops, as it would with plain verbs.
				w.overran[i], w.stopped[i] = true, true
				break
			}
			if err != nil {
				w.t.Fatalf("%s poll: %v", me.name, err)
			}
			if n == 0 {
				break
			}
			w.polled += n
			for _, c := range wc[:n] {
				w.onWC(i, c)
			}
		}
	}
}

func (w *world) onWC(i int, c verbs.WC) {
	me := w.n[i]
	if isRecvWRID(c.WRID) {
		w.recvSeq[i] = append(w.recvSeq[i], c.WRID)
	} else {
		w.sendSeq[i] = append(w.sendSeq[i], c.WRID)
	}
	if c.WRID == atomicWRID {
		w.atoms[i] = append(w.atoms[i], c)
		return
	}
	if c.Status != verbs.WCSuccess {
		w.errs[i] = append(w.errs[i], c)
		return
	}
	if c.QPNum != me.def.qp.QPN() {
		w.t.Fatalf("%s: completion with QP number %#x, the application's QP is %#x", me.name, c.QPNum, me.def.qp.QPN())
	}
	if c.Opcode != verbs.WCRecv && c.Opcode != verbs.WCRecvRDMAWithImm {
		w.done[i] = append(w.done[i], c.WRID)
		if r := int(c.WRID / 2); w.load[i]&wlRead != 0 && !w.sendRx[i] {
			// The round's READ, posted before, completed with it.
			if s := r % nslots; !bytes.Equal(me.readBytes(s), fixedPattern(s)) {
				w.t.Fatalf("%s: round %d completed without its READ's data at %v: %v sendSeq %v posted %v got %x", me.name, r, w.f.Now(), c, w.sendSeq[i], w.posted[i], me.readBytes(s)[:8])
			}
		}
		return
	}
	r := int(c.ImmData)
	s := r % nslots
	if !bytes.Equal(me.buf[(nslots+s)*slot:(nslots+s+1)*slot], pattern(r)) {
		w.t.Fatalf("%s: notification %d arrived without its data", me.name, r)
	}
	w.notifs[i] = append(w.notifs[i], c.ImmData)
	if w.holdRecvs[i] > 0 {
		w.held[i] = append(w.held[i], c.WRID)
		return
	}
	w.repost(i, c.WRID)
}

// repost replaces a consumed receive (same slot layout).
func (w *world) repost(i int, wrid uint64) {
	me := w.n[i]
	k := int(wrid - recvWRID)
	if _, err := me.conn.PostRecv([]verbs.RecvWR{{WRID: wrid, SGList: []verbs.SGE{me.recvSGE(k)}}}); err != nil {
		if errors.Is(err, verbs.EIO) {
			return // its device died, as plain verbs report: not posted
		}
		w.t.Fatalf("%s: repost receive: %v", me.name, err)
	}
	w.rposted[i] = append(w.rposted[i], wrid)
}

// releaseHeld reposts node i's held receives once holdRecvs passed.
func (w *world) releaseHeld(i int) {
	if now := w.f.Now(); len(w.held[i]) > 0 && now-w.heldAt[i] >= w.holdRecvs[i] {
		w.heldAt[i] = now
		for _, id := range w.held[i] {
			w.repost(i, id)
		}
		w.held[i] = w.held[i][:0]
	}
}

// inOrder checks what node i's application saw complete against what it
// posted: each send WR at most once and in posting order (a success for
// a signaled WR, an error for any), and the receives in posting order,
// each once. When all is true every receive posted must have completed
// (the node's error surfaced and its QPs are in ERR or dead).
func (w *world) inOrder(i int, all bool) error {
	name := w.n[i].name
	p := 0
	for k, id := range w.sendSeq[i] {
		for p < len(w.posted[i]) && w.posted[i][p] != id {
			p++
		}
		if p == len(w.posted[i]) {
			return fmt.Errorf("%s: send completion %d (wr_id %d) twice, out of posting order or never posted: completions %v", name, k, id, tail(w.sendSeq[i], k))
		}
		p++
	}
	for k, id := range w.recvSeq[i] {
		if k >= len(w.rposted[i]) || w.rposted[i][k] != id {
			return fmt.Errorf("%s: receive completion %d is wr_id %d, posted %v: not each receive once, in posting order", name, k, id, tail(w.rposted[i], k))
		}
	}
	if all && len(w.recvSeq[i]) != len(w.rposted[i]) {
		return fmt.Errorf("%s: %d receives posted, %d completed: the rest never completed", name, len(w.rposted[i]), len(w.recvSeq[i]))
	}
	return nil
}

// tail is a few elements of s around k, for messages.
func tail(s []uint64, k int) []uint64 { return s[max(0, k-3):min(len(s), k+3)] }

// dead reports whether node i's application QP is done for: in ERR, or
// its device dead. Every WR it posted must then have completed.
func (w *world) dead(i int) bool {
	a, _, err := w.n[i].def.qp.Query(verbs.QPAttrState)
	return err != nil || a.QPState == verbs.QPSErr
}

// run drives rounds from the senders in dirs for d of virtual time,
// keeping at most window rounds unconfirmed per sender. The world moves
// in steps of 5 µs; when it has nothing to do (nothing posted, nothing
// polled) it moves to the fabric's next event at once, up to idleStep
// (a long local ACK timeout, a stopped peer): the Conns' own timers
// then run up to idleStep late, as in an application that polls slowly.
// Not with a lazy node, whose pace is counted in 5 µs steps.
func (w *world) run(d time.Duration, dirs ...int) { runAll([]*world{w}, d, dirs...) }

// runAll is run for several worlds on one fabric (connections sharing
// the hosts' HCAs), each with the same senders.
func runAll(ws []*world, d time.Duration, dirs ...int) {
	const step, idleStep = 5 * time.Microsecond, 500 * time.Microsecond
	f := ws[0].f
	end := f.Now() + d
	for now := f.Now(); now < end; now = f.Now() {
		idle := true
		for _, w := range ws {
			if w.postRounds(dirs) || w.polled > 0 || w.lazy != [2]int{} {
				idle = false
			}
		}
		next := now + step
		if idle {
			next = now + idleStep
			if at, ok := f.NextEvent(); ok && at < next {
				next = max(at, now+step)
			}
		}
		f.RunUntil(min(next, end))
		for _, w := range ws {
			w.pump()
		}
	}
}

// postRounds posts the next round of each sender in dirs that has room
// and credit, and reports whether it posted any.
func (w *world) postRounds(dirs []int) bool {
	posted := false
	for _, i := range dirs {
		// credits: no more than nslots/2 rounds ahead of what the
		// peer's application consumed, as a real sender's flow
		// control (a lazy peer must not have its slots overwritten)
		credit := w.sent[i]-len(w.notifs[1-i]) < nslots/2
		if w.sent[i]-len(w.done[i])-len(w.errs[i]) < window && credit && len(w.errs[i]) == 0 && !w.refused[i] && !w.stopped[i] {
			err := w.post(i, w.sent[i])
			switch {
			case err == nil:
				w.sent[i]++
				posted = true
			case errors.Is(err, verbs.EIO):
				// Refused, as plain verbs would once the error
				// surfaced: not sent, and nothing more is posted.
				w.refused[i] = true
			default:
				w.t.Fatalf("%s post: %v", w.n[i].name, err)
			}
		}
	}
	return posted
}

// check verifies the invariants for the senders in dirs: every signaled WR
// completed exactly once in order (or, when the error surfaced, nothing
// succeeded after the first error); every notification delivered exactly
// once, in order; data intact (checked on arrival).
func (w *world) check(dirs ...int) error {
	if err := w.checkSafe(dirs...); err != nil {
		return err
	}
	for _, i := range dirs {
		if len(w.done[i])+len(w.errs[i]) < w.sent[i] && len(w.errs[i]) == 0 && !w.overran[i] {
			return fmt.Errorf("%s: %d rounds sent, %d completed", w.n[i].name, w.sent[i], len(w.done[i]))
		}
	}
	return nil
}

// checkSafe is check without its last rule: rounds may still be pending
// (a sender whose peer's QP died, on a provider that retransmits without
// end, waits for ever, as it would without ibpath).
func (w *world) checkSafe(dirs ...int) error {
	for _, i := range dirs {
		me, peer := w.n[i], 1-i
		for k, id := range w.done[i] {
			if id != uint64(2*k+1) {
				return fmt.Errorf("%s: completions %v...: not each signaled WR once, in order (at %d)", me.name, w.done[i][:min(len(w.done[i]), 12)], k)
			}
		}
		for k, r := range w.notifs[peer] {
			if r != uint32(k) {
				return fmt.Errorf("%s received notifications %v...: not exactly once and in order (at %d)", w.n[peer].name, w.notifs[peer][:min(k+3, len(w.notifs[peer]))], k)
			}
		}
		if sq, _ := me.conn.State(); sq != fsm.SQSurfaced && len(w.errs[i]) > 0 {
			return fmt.Errorf("%s saw errors %v although its connection did not surface", me.name, w.errs[i])
		}
	}
	for i := range w.n {
		sq, _ := w.n[i].conn.State()
		if err := w.inOrder(i, sq == fsm.SQSurfaced && w.dead(i) && !w.overran[i]); err != nil {
			return err
		}
	}
	return nil
}

// exactlyOnce checks a sender whose error reached the application: every
// signaled WR it posted still completed exactly once, with success or an
// error.
func (w *world) exactlyOnce(i int) error {
	got := map[uint64]int{}
	for _, id := range w.done[i] {
		got[id]++
	}
	for _, e := range w.errs[i] {
		got[e.WRID]++
	}
	for r := 0; r < w.sent[i]; r++ {
		if got[uint64(2*r+1)] != 1 {
			return fmt.Errorf("%s surfaced: signaled WR %d completed %d times", w.n[i].name, 2*r+1, got[uint64(2*r+1)])
		}
	}
	return nil
}

// delivered checks the invariants and that every round the senders in
// dirs posted completed and reached the peer.
func (w *world) delivered(dirs ...int) error {
	if err := w.check(dirs...); err != nil {
		return err
	}
	for _, i := range dirs {
		if len(w.done[i]) != w.sent[i] || len(w.notifs[1-i]) != w.sent[i] {
			return fmt.Errorf("%s: %d sent, %d completed, %d received by the peer", w.n[i].name, w.sent[i], len(w.done[i]), len(w.notifs[1-i]))
		}
	}
	return nil
}

// The HCA-death tests run on every profile: a dead device's QPs flush
// what they held (rdmavt) or complete nothing more (strict, mlx5), and
// the application must see the same either way.

func TestSenderHCADeathFailsOver(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 1, p)
		w.run(300*time.Microsecond, 0)
		must(t, w.f.KillHCA(w.n[0].hca))
		w.run(2*time.Millisecond, 0)
		w.run(20 * time.Millisecond) // drain
		if sq, rq := w.n[0].conn.State(); sq != fsm.SQFallback || rq != fsm.RQFallback {
			t.Fatalf("node0 %v/%v, want fallback", sq, rq)
		}
		if sq, _ := w.n[1].conn.State(); sq != fsm.SQFallback {
			t.Fatalf("node1 %v, want fallback", sq)
		}
		if err := w.check(0); err != nil {
			t.Fatal(err)
		}
		if len(w.done[0]) != w.sent[0] || w.sent[0] < 40 {
			t.Fatalf("%d of %d rounds completed", len(w.done[0]), w.sent[0])
		}
		st := w.n[0].conn.Stats()
		t.Logf("node0 stats %+v", st)
		if st.Replayed == 0 || st.RecvsMoved == 0 {
			t.Fatalf("stats %+v: nothing was replayed or moved", st)
		}
	})
}

func TestReceiverHCADeathFailsOver(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 2, p)
		w.run(300*time.Microsecond, 0)
		must(t, w.f.KillHCA(w.n[1].hca))
		w.run(2*time.Millisecond, 0)
		w.run(20 * time.Millisecond)
		if err := w.check(0); err != nil {
			t.Fatal(err)
		}
		if len(w.done[0]) != w.sent[0] || len(w.notifs[1]) != w.sent[0] {
			t.Fatalf("%d rounds sent, %d completed, %d notified", w.sent[0], len(w.done[0]), len(w.notifs[1]))
		}
	})
}

func TestAckLostBeforeSenderDeath(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 3, p)
		w.run(200*time.Microsecond, 0)
		// The ACK of the next notification is lost, then the sender dies:
		// the peer consumed it, so it must not arrive twice.
		next := w.sent[0]
		must(t, w.f.DropResponse(w.n[0].def.qp, uint32(2*next+1)))
		must(t, w.f.DropResponse(w.n[0].def.qp, uint32(2*next+2)))
		must(t, w.f.DropResponse(w.n[0].def.qp, uint32(2*next+3)))
		w.run(6*time.Microsecond, 0)
		must(t, w.f.KillHCA(w.n[0].hca))
		w.run(2*time.Millisecond, 0)
		w.run(20 * time.Millisecond)
		if err := w.check(0); err != nil {
			t.Fatal(err)
		}
		if st := w.n[0].conn.Stats(); st.Delivered == 0 {
			t.Fatalf("stats %+v: the delivered notification was not recognised", st)
		}
	})
}

func TestBothDirectionsSendRecv(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 4, p)
		w.sendRx = [2]bool{true, true}
		w.run(300*time.Microsecond, 0, 1)
		must(t, w.f.KillHCA(w.n[1].hca))
		w.run(2*time.Millisecond, 0, 1)
		w.run(20 * time.Millisecond)
		if err := w.delivered(0, 1); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBothSidesDetectIndependently(t *testing.T) {
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 5, p)
		w.run(300*time.Microsecond, 0, 1)
		// Both default HCAs die at once: each side starts its own fallback.
		must(t, w.f.KillHCA(w.n[0].hca))
		must(t, w.f.KillHCA(w.n[1].hca))
		w.run(2*time.Millisecond, 0, 1)
		w.run(20 * time.Millisecond)
		if err := w.delivered(0, 1); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAtomicInFlightSurfaces: an atomic executes at the responder, its
// response is lost, and the requester's HCA dies: a replay could add a
// second time, so the error surfaces. On every profile the application
// sees the same: the atomic completes exactly once, with WR_FLUSH_ERR,
// and so does every other WR and receive it had posted, in posting order
// (from the shadow rings where the dead HCA completes nothing more); the
// counter shows the one execution.
func TestAtomicInFlightSurfaces(t *testing.T) {
	seen := map[sim.Profile][]verbs.WC{}
	forProfiles(t, func(t *testing.T, p sim.Profile) {
		w := newWorldProfile(t, 6, p)
		w.run(100*time.Microsecond, 0)
		a, b := w.n[0], w.n[1]
		must(t, w.f.DropResponse(a.def.qp, w.nextPSN(0))) // the atomic's response
		w.postAtomic(0)
		w.f.RunFor(5 * time.Microsecond)
		if n := binary.LittleEndian.Uint64(b.buf[len(b.buf)-8:]); n != 1 {
			t.Fatalf("counter %d before the death, want the atomic executed once", n)
		}
		must(t, w.f.KillHCA(a.hca))
		w.run(5 * time.Millisecond)
		if sq, _ := a.conn.State(); sq != fsm.SQSurfaced || !strings.Contains(a.conn.Reason(), "atomic") {
			t.Fatalf("state %v reason %q, want surfaced for the atomic", sq, a.conn.Reason())
		}
		if err := w.atomicOnce(0); err != nil {
			t.Fatal(err)
		}
		if st := w.atoms[0][0].Status; st != verbs.WCWRFlushErr {
			t.Fatalf("the atomic completed with %v, want WR_FLUSH_ERR (its HCA died)", st)
		}
		if st := a.conn.Stats(); st.Replayed != 0 {
			t.Fatalf("stats %+v: something was replayed", st)
		}
		must(t, w.checkSafe(0))
		must(t, w.exactlyOnce(0))
		if len(w.recvSeq[0]) != nrecvs {
			t.Fatalf("%d of the %d receives completed", len(w.recvSeq[0]), nrecvs)
		}
		var errs []verbs.WC
		for _, wc := range append(w.errs[0], w.atoms[0]...) {
			if wc.Status != verbs.WCWRFlushErr || wc.QPNum != a.def.qp.QPN() {
				t.Fatalf("error completion %+v, want WR_FLUSH_ERR on QP %#x", wc, a.def.qp.QPN())
			}
			errs = append(errs, verbs.WC{WRID: wc.WRID, Status: wc.Status})
		}
		seen[p] = errs
	})
	for _, p := range sim.Profiles[1:] {
		if !slices.Equal(seen[p], seen[sim.Profiles[0]]) {
			t.Fatalf("the application saw\n%v on %s,\n%v on %s", seen[p], p, seen[sim.Profiles[0]], sim.Profiles[0])
		}
	}
}

func TestLinkFlapSwitchesBack(t *testing.T) {
	w := newWorld(t, 7)
	w.sendRx[1] = true
	port := w.n[0].hca.Port(1)
	for flap := 0; flap < 2; flap++ {
		w.run(300*time.Microsecond, 0, 1)
		must(t, w.f.SetLink(port, false))
		w.run(5*time.Millisecond, 0, 1)
		for i, n := range w.n {
			if sq, _ := n.conn.State(); sq == fsm.SQDefault || sq == fsm.SQSurfaced {
				t.Fatalf("flap %d, link down: %s is %v", flap, w.n[i].name, sq)
			}
		}
		must(t, w.f.SetLink(port, true))
		w.run(100*time.Millisecond, 0, 1)
		for _, n := range w.n {
			sq, rq := n.conn.State()
			if sq != fsm.SQDefault || rq != fsm.RQDefault {
				t.Fatalf("flap %d, link back: %s is %v/%v (%s), want default/default; stats %+v", flap, n.name, sq, rq, n.conn.Reason(), n.conn.Stats())
			}
		}
		if err := w.check(0, 1); err != nil {
			t.Fatalf("flap %d: %v", flap, err)
		}
	}
	w.run(20 * time.Millisecond)
	if err := w.check(0, 1); err != nil {
		t.Fatal(err)
	}
	for i, n := range w.n {
		st := n.conn.Stats()
		t.Logf("%s stats %+v", n.name, st)
		if st.SwitchBacks != 2 || st.BackupResets < 1 {
			t.Fatalf("%s: %+v, want two switch-backs and a purged backup", n.name, st)
		}
		if len(w.done[i]) != w.sent[i] || len(w.notifs[1-i]) != w.sent[i] {
			t.Fatalf("%s: %d sent, %d completed, %d received", n.name, w.sent[i], len(w.done[i]), len(w.notifs[1-i]))
		}
	}
}

// home reports whether both nodes' queues are back on their default QPs.
func (w *world) home() bool {
	for _, n := range w.n {
		if sq, rq := n.conn.State(); sq != fsm.SQDefault || rq != fsm.RQDefault {
			return false
		}
	}
	return true
}

// TestDefaultPathAllocatesNothing: a protected QP in its Default state
// posts and polls without allocating (the shadow ring records in place).
func TestDefaultPathAllocatesNothing(t *testing.T) {
	w := newWorld(t, 12)
	me, peer := w.n[0], w.n[1]
	wr := []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList:     []verbs.SGE{{Addr: me.outAddr(0), Length: slot, LKey: me.def.mr.LKey()}},
		RemoteAddr: peer.inAddr(0), RKey: peer.def.mr.RKey()}}
	wc := make([]verbs.WC, 4)
	step := func() {
		if _, err := me.conn.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		w.f.RunFor(5 * time.Microsecond)
		if n, err := me.conn.Poll(wc); err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("poll: %d %v %+v", n, err, wc[0])
		}
	}
	for i := 0; i < 100; i++ { // warm the queues up
		step()
	}
	if a := testing.AllocsPerRun(200, step); a != 0 {
		t.Fatalf("%.1f allocations per posted WR on the default path", a)
	}
}

// TestRefusedReceiveNotRecorded: a receive the backup QP cannot take (its
// memory has no backup registration) is refused, as ibv_post_recv would,
// and not kept in the receive ring: a later move of the receives must not
// post a receive the application was told failed.
func TestRefusedReceiveNotRecorded(t *testing.T) {
	w := newWorld(t, 14)
	w.run(300*time.Microsecond, 0)
	must(t, w.f.KillHCA(w.n[1].hca))
	w.run(2*time.Millisecond, 0)
	me := w.n[1]
	if _, rq := me.conn.State(); rq != fsm.RQFallback {
		t.Fatalf("node1's receives %v, want fallback", rq)
	}
	before := len(me.conn.Outstanding().Recvs)
	bad := verbs.RecvWR{WRID: 77, SGList: []verbs.SGE{{Addr: me.inAddr(0), Length: slot, LKey: me.def.mr.LKey() ^ 0x5a5a00}}}
	if _, err := me.conn.PostRecv([]verbs.RecvWR{bad}); err == nil {
		t.Fatal("a receive with no backup lkey was accepted")
	}
	if got := me.conn.Outstanding().Recvs; len(got) != before || slices.ContainsFunc(got, func(r verbs.RecvWR) bool { return r.WRID == 77 }) {
		t.Fatalf("%d receives outstanding after the refused one (%d before)", len(got), before)
	}
}
