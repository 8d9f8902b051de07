package sim_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

func resPortEvents(t testing.TB, ctx verbs.Context) []verbs.AsyncEvent {
	t.Helper()
	return epEventsOf(t, ctx)
}

func resWantOnly(t testing.TB, what string, evs []verbs.AsyncEvent, typ verbs.EventType, port uint8) {
	t.Helper()
	if len(evs) != 1 || evs[0].Type != typ || evs[0].Port != port {
		t.Fatalf("%s: events = %+v, want one %v on port %d", what, evs, typ, port)
	}
}

func TestResPortEventsReachEveryContextOfTheDevice(t *testing.T) {
	f, err := sim.NewRailFabric(defaults(connOpts{}).spec)
	must(t, err)
	h := f.Host("node0")
	c1, err := h.Open("mlx5_0")
	must(t, err)
	c2, err := h.Open("mlx5_0")
	must(t, err)
	other, err := h.Open("mlx5_1")
	must(t, err)
	for _, c := range []verbs.Context{c1, c2, other} {
		if _, err := c.GetAsyncEvent(); !errors.Is(err, verbs.EAGAIN) {
			t.Fatalf("empty get_async_event: err = %v, want EAGAIN", err)
		}
	}
	p := h.HCA("mlx5_0").Port(1)
	must(t, f.SetLink(p, false))
	resWantOnly(t, "ctx 1 after pull", resPortEvents(t, c1), verbs.EventPortErr, 1)
	resWantOnly(t, "ctx 2 after pull", resPortEvents(t, c2), verbs.EventPortErr, 1)
	if evs := resPortEvents(t, other); len(evs) != 0 {
		t.Fatalf("other device got %+v", evs)
	}
	if pa, err := c1.QueryPort(1); err != nil || pa.State != verbs.PortDown {
		t.Fatalf("port after pull: %v %v", pa.State, err)
	}
	if pa, err := c1.QueryPort(2); err != nil || pa.State != verbs.PortActive {
		t.Fatalf("port 2 after pulling port 1: %v %v", pa.State, err)
	}
	must(t, f.SetLink(p, true))
	if pa, _ := c1.QueryPort(1); pa.State == verbs.PortActive {
		t.Fatal("port ACTIVE at once after plugging, before the SM sweep")
	}
	if evs := resPortEvents(t, c1); len(evs) != 0 {
		t.Fatalf("events right after plugging: %+v", evs)
	}
	f.RunFor(3 * time.Millisecond)
	resWantOnly(t, "ctx 1 after plug", resPortEvents(t, c1), verbs.EventPortActive, 1)
	resWantOnly(t, "ctx 2 after plug", resPortEvents(t, c2), verbs.EventPortActive, 1)
	if evs := resPortEvents(t, other); len(evs) != 0 {
		t.Fatalf("other device got %+v", evs)
	}
	if pa, err := c1.QueryPort(1); err != nil || pa.State != verbs.PortActive {
		t.Fatalf("port after plug: %v %v", pa.State, err)
	}
	// A closed context gets nothing more.
	must(t, c2.Close())
	must(t, f.SetLink(p, false))
	resWantOnly(t, "ctx 1 second pull", resPortEvents(t, c1), verbs.EventPortErr, 1)
	if _, err := c2.GetAsyncEvent(); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("get_async_event on closed context: %v, want EINVAL", err)
	}
}

func TestResUnackedQPEventBlocksDestroy(t *testing.T) {
	c := newConn(t, connOpts{})
	armAlt(t, c.a, c.b, 2, 0)
	armAlt(t, c.b, c.a, 2, 0)
	c.handshake(t)
	must(t, c.a.qp.Modify(&verbs.QPAttr{PathMigState: verbs.MigMigrated}, verbs.QPAttrPathMigState))
	ev, err := c.a.ctx.GetAsyncEvent()
	must(t, err)
	if ev.Type != verbs.EventPathMig || ev.QP != c.a.qp {
		t.Fatalf("event = %+v, want PATH_MIG on the QP", ev)
	}
	// Outstanding WRs do not prevent destruction; the unacked event does.
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	if err := c.a.qp.Destroy(); !errors.Is(err, verbs.EBUSY) {
		t.Fatalf("destroy with an unacked event: %v, want EBUSY", err)
	}
	if c.a.qp.State() != verbs.QPSRTS {
		t.Fatalf("failed destroy changed state to %v", c.a.qp.State())
	}
	c.a.ctx.AckAsyncEvent(ev)
	must(t, c.a.qp.Destroy())
	if err := c.a.qp.Destroy(); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("second destroy: %v, want EINVAL", err)
	}
	c.run(time.Millisecond)
	if w := c.a.poll(t); len(w) != 0 {
		t.Fatalf("destroyed QP produced completions: %+v", w)
	}
}

func TestResDestroyOrdering(t *testing.T) {
	o := defaults(connOpts{})
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	e, ch := openEndCQ(t, f.Host("node0"), o, 16, true)
	if err := e.cq.Destroy(); !errors.Is(err, verbs.EBUSY) {
		t.Fatalf("destroy CQ with QP: %v, want EBUSY", err)
	}
	if err := ch.Destroy(); !errors.Is(err, verbs.EBUSY) {
		t.Fatalf("destroy channel with CQ: %v, want EBUSY", err)
	}
	if err := e.pd.Dealloc(); !errors.Is(err, verbs.EBUSY) {
		t.Fatalf("dealloc PD with MR and QP: %v, want EBUSY", err)
	}
	must(t, e.qp.Destroy())
	if err := e.pd.Dealloc(); !errors.Is(err, verbs.EBUSY) {
		t.Fatalf("dealloc PD with MR: %v, want EBUSY", err)
	}
	must(t, e.mr.Dereg())
	must(t, e.cq.Destroy())
	must(t, e.pd.Dealloc())
	must(t, ch.Destroy())
	for what, err := range map[string]error{
		"qp":      e.qp.Destroy(),
		"mr":      e.mr.Dereg(),
		"cq":      e.cq.Destroy(),
		"pd":      e.pd.Dealloc(),
		"channel": ch.Destroy(),
	} {
		if !errors.Is(err, verbs.EINVAL) {
			t.Errorf("second destroy of %s: %v, want EINVAL", what, err)
		}
	}
	// Dead objects cannot be used to build new ones.
	if _, err := e.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite); !errors.Is(err, verbs.EINVAL) {
		t.Errorf("reg_mr on a deallocated PD: %v, want EINVAL", err)
	}
	if _, err := e.cq.Poll(make([]verbs.WC, 1)); !errors.Is(err, verbs.EINVAL) {
		t.Errorf("poll on a destroyed CQ: %v, want EINVAL", err)
	}
}

func TestResCompletionChannel(t *testing.T) {
	o := defaults(connOpts{})
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	a := openEnd(t, f.Host("node0"), o)
	b, ch := openEndCQ(t, f.Host("node1"), o, 64, true)
	connectRC(t, a, b, o)
	connectRC(t, b, a, o)
	c := &conn{f: f, a: a, b: b}
	send := func(id uint64, flags verbs.SendFlags) {
		t.Helper()
		b.recv(t, id, 0, 64)
		a.post(t, verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled | flags,
			SGList: []verbs.SGE{a.sge(0, 16)}})
		c.run(time.Millisecond)
		epExpect(t, "receive", b.poll(t), epWC{id, verbs.WCSuccess})
	}
	noEvent := func(what string) {
		t.Helper()
		if cq, err := ch.GetCQEvent(); !errors.Is(err, verbs.EAGAIN) {
			t.Fatalf("%s: get_cq_event = %v, %v, want EAGAIN", what, cq, err)
		}
	}
	oneEvent := func(what string) {
		t.Helper()
		cq, err := ch.GetCQEvent()
		if err != nil || cq != b.cq {
			t.Fatalf("%s: get_cq_event = %v, %v, want the CQ", what, cq, err)
		}
		noEvent(what + " (second call)")
	}

	noEvent("unarmed, empty")
	send(1, 0)
	noEvent("unarmed completion")
	must(t, b.cq.ReqNotify(false))
	noEvent("armed, nothing new")
	send(2, 0)
	oneEvent("armed completion")
	send(3, 0)
	noEvent("completion after the event, not re-armed")

	must(t, b.cq.ReqNotify(true))
	send(4, 0)
	noEvent("solicited-only, unsolicited receive")
	send(5, verbs.SendSolicited)
	oneEvent("solicited-only, solicited receive")

	// Error completions wake a solicited-only CQ too.
	must(t, b.cq.ReqNotify(true))
	must(t, b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState))
	b.recv(t, 6, 0, 64)
	epExpect(t, "flushed receive", b.poll(t), epWC{6, verbs.WCWRFlushErr})
	oneEvent("solicited-only, error completion")

	must(t, b.qp.Destroy())
	if err := b.cq.Destroy(); !errors.Is(err, verbs.EBUSY) {
		t.Fatalf("destroy CQ with 2 unacked events: %v, want EBUSY", err)
	}
	ch.AckCQEvents(b.cq, 1)
	if err := b.cq.Destroy(); !errors.Is(err, verbs.EBUSY) {
		t.Fatalf("destroy CQ with 1 unacked event: %v, want EBUSY", err)
	}
	ch.AckCQEvents(b.cq, 2)
	must(t, b.cq.Destroy())
	must(t, ch.Destroy())

	// A CQ without a channel cannot be armed.
	if err := a.cq.ReqNotify(false); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("req_notify without channel: %v, want EINVAL", err)
	}
}

func TestResCQOverrun(t *testing.T) {
	o := defaults(connOpts{})
	f, err := sim.NewRailFabric(o.spec)
	must(t, err)
	a, _ := openEndCQ(t, f.Host("node0"), o, 3, false)
	b := openEnd(t, f.Host("node1"), o)
	connectRC(t, a, b, o)
	connectRC(t, b, a, o)
	if a.cq.CQE() != 3 {
		t.Fatalf("cqe 3 rounded to %d, want 3", a.cq.CQE())
	}
	for i := range 5 {
		a.post(t, write(uint64(i+1), a.sge(0, 8), b.mr.Addr(), b.mr.RKey()))
	}
	f.RunFor(time.Millisecond)
	evs := epEventsOf(t, a.ctx)
	if len(evs) == 0 || evs[0].Type != verbs.EventCQErr || evs[0].CQ != a.cq {
		t.Fatalf("events = %+v, want CQ_ERR on the CQ first", evs)
	}
	// The QPs completing into the overrun CQ may fail too (QP_FATAL), as
	// hardware does; nothing else may be raised.
	for _, ev := range evs[1:] {
		if ev.Type != verbs.EventQPFatal || ev.QP != a.qp {
			t.Fatalf("events = %+v: unexpected %v", evs, ev.Type)
		}
	}
	wc := make([]verbs.WC, 16)
	n, err := a.cq.Poll(wc)
	if err != nil || n != 3 {
		t.Fatalf("first poll after overrun: n=%d err=%v, want the 3 stored", n, err)
	}
	epExpect(t, "stored", wc[:n], epWC{1, verbs.WCSuccess}, epWC{2, verbs.WCSuccess}, epWC{3, verbs.WCSuccess})
	if n, err := a.cq.Poll(wc); n != 0 || !errors.Is(err, verbs.EIO) {
		t.Fatalf("poll after draining an overrun CQ: n=%d err=%v, want EIO", n, err)
	}
}

func TestResKillHCA(t *testing.T) {
	for _, prof := range sim.Profiles {
		t.Run(string(prof), func(t *testing.T) {
			c := newConn(t, connOpts{profile: prof})
			node0 := c.a.host
			c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()),
				write(2, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()),
				verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SGList: []verbs.SGE{c.a.sge(0, 8)}})
			c.a.recv(t, 4, 0, 64)
			must(t, c.f.KillHCA(c.a.hca))

			evs := epEventsOf(t, c.a.ctx)
			if len(evs) != 1 || evs[0].Type != verbs.EventDeviceFatal {
				t.Fatalf("events on the dead device = %+v, want DEVICE_FATAL", evs)
			}
			wcs := c.a.poll(t)
			var sends, recvs []verbs.WC
			for _, w := range wcs {
				if w.WRID == 4 {
					recvs = append(recvs, w)
				} else {
					sends = append(sends, w)
				}
			}
			if fatalFlushes(prof) {
				epExpect(t, "flushed sends", sends, epWC{1, verbs.WCWRFlushErr}, epWC{2, verbs.WCWRFlushErr}, epWC{3, verbs.WCWRFlushErr})
				epExpect(t, "flushed receive", recvs, epWC{4, verbs.WCWRFlushErr})
			} else {
				// libmlx5 only marks the context fatal; no completion is made.
				epExpect(t, "sends", sends)
				epExpect(t, "receives", recvs)
			}
			if c.a.qp.State() != verbs.QPSErr {
				t.Fatalf("QP state on dead HCA = %v, want ERR", c.a.qp.State())
			}
			if _, err := c.a.qp.PostSend([]verbs.SendWR{write(5, c.a.sge(0, 8), 0, 0)}); !errors.Is(err, verbs.EIO) {
				t.Fatalf("post_send on dead HCA: %v, want EIO", err)
			}
			if _, err := c.a.ctx.QueryPort(1); !errors.Is(err, verbs.EIO) {
				t.Fatalf("query_port on dead HCA: %v, want EIO", err)
			}
			if _, err := c.a.ctx.AllocPD(); !errors.Is(err, verbs.EIO) {
				t.Fatalf("alloc_pd on dead HCA: %v, want EIO", err)
			}
			devs, err := node0.Devices()
			must(t, err)
			if slices.ContainsFunc(devs, func(d verbs.DeviceInfo) bool { return d.Name == "mlx5_0" }) || len(devs) != 1 {
				t.Fatalf("devices with mlx5_0 dead = %+v", devs)
			}
			if _, err := node0.Open("mlx5_0"); !errors.Is(err, verbs.ENODEV) {
				t.Fatalf("open dead device: %v, want ENODEV", err)
			}

			// The peer hears nothing and times out.
			start := c.f.Now()
			c.b.post(t, write(11, c.b.sge(0, 8), c.a.mr.Addr(), c.a.mr.RKey()),
				write(12, c.b.sge(0, 8), c.a.mr.Addr(), c.a.mr.RKey()))
			to := verbs.TimeoutDuration(10)
			got, errAt := c.pollFor(t, c.b, start, 6*to, 100*time.Microsecond)
			epExpect(t, "peer", got, epWC{11, verbs.WCRetryExcErr}, epWC{12, verbs.WCWRFlushErr})
			if errAt-start < 4*to {
				t.Fatalf("peer failed after %v, before 4 timeouts (%v)", errAt-start, 4*to)
			}
			if evs := epEventsOf(t, c.b.ctx); len(evs) != 0 {
				t.Fatalf("peer events = %+v, want none", evs)
			}

			// Revive: the device is listed again and a new context works; the old
			// one stays dead.
			must(t, c.f.ReviveHCA(c.a.hca))
			devs, err = node0.Devices()
			must(t, err)
			if !slices.ContainsFunc(devs, func(d verbs.DeviceInfo) bool { return d.Name == "mlx5_0" }) {
				t.Fatalf("devices after revive = %+v", devs)
			}
			nctx, err := node0.Open("mlx5_0")
			must(t, err)
			c.run(3 * time.Millisecond)
			nevs := epEventsOf(t, nctx)
			if !slices.ContainsFunc(nevs, func(e verbs.AsyncEvent) bool { return e.Type == verbs.EventPortActive && e.Port == 1 }) {
				t.Fatalf("new context events = %+v, want PORT_ACTIVE on port 1", nevs)
			}
			for _, e := range nevs {
				if e.Type != verbs.EventPortActive {
					t.Fatalf("new context got %+v", e)
				}
			}
			if pa, err := nctx.QueryPort(1); err != nil || pa.State != verbs.PortActive {
				t.Fatalf("new context port 1: %v %v", pa.State, err)
			}
			if _, err := c.a.ctx.AllocPD(); !errors.Is(err, verbs.EIO) {
				t.Fatalf("alloc_pd on the old context after revive: %v, want EIO", err)
			}
			if _, err := c.a.ctx.QueryPort(1); !errors.Is(err, verbs.EIO) {
				t.Fatalf("query_port on the old context after revive: %v, want EIO", err)
			}
			if evs := epEventsOf(t, c.a.ctx); len(evs) != 0 {
				t.Fatalf("old context got events after revive: %+v", evs)
			}
			// Resources of the dead context can still be released.
			must(t, c.a.qp.Destroy())
			must(t, c.a.mr.Dereg())
			must(t, c.a.cq.Destroy())
			must(t, c.a.pd.Dealloc())
			must(t, c.a.ctx.Close())

			// A new end on the revived HCA connects to the peer (reset) and works.
			o := defaults(connOpts{})
			na := openEnd(t, node0, o)
			must(t, c.b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState))
			connectRC(t, na, c.b, o)
			connectRC(t, c.b, na, o)
			fill(na.buf[:32], 5)
			na.post(t, write(21, na.sge(0, 32), c.b.mr.Addr()+512, c.b.mr.RKey()))
			c.run(time.Millisecond)
			epExpect(t, "after revive", na.poll(t), epWC{21, verbs.WCSuccess})
			if string(c.b.buf[512:544]) != string(na.buf[:32]) {
				t.Fatal("WRITE through the revived HCA did not land")
			}
		})
	}
}

// hostPDs opens both HCAs of node0 of a fabric of spec and gives a PD on
// each.
func hostPDs(t *testing.T, spec sim.RailSpec) []verbs.PD {
	t.Helper()
	f, err := sim.NewRailFabric(spec)
	must(t, err)
	h := f.Host("node0")
	var pds []verbs.PD
	for _, dev := range []string{"mlx5_0", "mlx5_1"} {
		ctx, err := h.Open(dev)
		must(t, err)
		pd, err := ctx.AllocPD()
		must(t, err)
		pds = append(pds, pd)
	}
	return pds
}

func TestResShadowRegistration(t *testing.T) {
	pds := hostPDs(t, defaults(connOpts{}).spec)
	var err error
	buf := make([]byte, 1<<16)
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	m0, err := pds[0].RegMR(buf, acc)
	must(t, err)
	m1, err := pds[1].RegMR(buf, acc)
	must(t, err)
	if m0.Addr() != m1.Addr() || m0.Addr() == 0 {
		t.Fatalf("same buffer on two HCAs: addrs %#x and %#x, want equal", m0.Addr(), m1.Addr())
	}
	sub, err := pds[1].RegMR(buf[100:300], acc)
	must(t, err)
	if sub.Addr() != m0.Addr()+100 || sub.Len() != 200 {
		t.Fatalf("sub-slice: addr %#x len %d, want %#x len 200", sub.Addr(), sub.Len(), m0.Addr()+100)
	}
	sub0, err := pds[0].RegMR(buf[4096:], verbs.AccessLocalWrite)
	must(t, err)
	if sub0.Addr() != m0.Addr()+4096 {
		t.Fatalf("tail sub-slice addr %#x, want %#x", sub0.Addr(), m0.Addr()+4096)
	}
	other, err := pds[0].RegMR(make([]byte, 4096), acc)
	must(t, err)
	if o := other.Addr(); o >= m0.Addr() && o < m0.Addr()+uint64(len(buf)) {
		t.Fatalf("distinct buffer got an address inside the first one: %#x", o)
	}
	for _, bad := range []verbs.AccessFlags{verbs.AccessRemoteWrite, verbs.AccessRemoteAtomic,
		verbs.AccessRemoteWrite | verbs.AccessRemoteRead} {
		if _, err := pds[0].RegMR(buf, bad); !errors.Is(err, verbs.EINVAL) {
			t.Fatalf("reg_mr access %#x without LOCAL_WRITE: %v, want EINVAL", uint32(bad), err)
		}
	}
	if _, err := pds[0].RegMR(buf, verbs.AccessRemoteRead); err != nil {
		t.Fatalf("reg_mr REMOTE_READ only: %v", err)
	}
}

// TestResStrictMem: with Config.StrictMem, RegMR takes memory from
// AllocMem (of any PD of the host, whole or a part) and refuses any other
// buffer, as verbs/ibv refuses the Go heap; FreeMem takes back only what
// AllocMem gave. Without it, any buffer registers.
func TestResStrictMem(t *testing.T) {
	spec := defaults(connOpts{}).spec
	spec.Config.StrictMem = true
	pds := hostPDs(t, spec)
	alloc := pds[0].(verbs.MemAllocator)
	buf, err := alloc.AllocMem(8192)
	must(t, err)
	if len(buf) != 8192 {
		t.Fatalf("AllocMem gave %d bytes", len(buf))
	}
	m, err := pds[1].RegMR(buf[4096:], verbs.AccessLocalWrite)
	must(t, err)
	if _, err := pds[0].RegMR(make([]byte, 4096), verbs.AccessLocalWrite); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("RegMR of Go-heap memory under StrictMem: %v, want EINVAL", err)
	}
	if _, err := alloc.AllocMem(0); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("AllocMem(0): %v, want EINVAL", err)
	}
	if err := alloc.FreeMem(make([]byte, 16)); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("FreeMem of memory not from AllocMem: %v, want EINVAL", err)
	}
	must(t, m.Dereg())
	must(t, pds[1].(verbs.MemAllocator).FreeMem(buf))
	if _, err := pds[0].RegMR(buf, verbs.AccessLocalWrite); !errors.Is(err, verbs.EINVAL) {
		t.Fatalf("RegMR of freed memory under StrictMem: %v, want EINVAL", err)
	}

	loose := hostPDs(t, defaults(connOpts{}).spec)
	if _, err := loose[0].RegMR(make([]byte, 4096), verbs.AccessLocalWrite); err != nil {
		t.Fatalf("RegMR of Go-heap memory without StrictMem: %v", err)
	}
}

func TestResLeafDeathRaisesPortErr(t *testing.T) {
	c := newConn(t, connOpts{})
	side, err := c.a.host.Open("mlx5_1")
	must(t, err)
	must(t, c.f.FailSwitch(c.f.Leaf("rail0-p1")))
	resWantOnly(t, "node0 mlx5_0", epEventsOf(t, c.a.ctx), verbs.EventPortErr, 1)
	resWantOnly(t, "node1 mlx5_0", epEventsOf(t, c.b.ctx), verbs.EventPortErr, 1)
	if evs := epEventsOf(t, side); len(evs) != 0 {
		t.Fatalf("mlx5_1 (other leaf) got %+v", evs)
	}
	must(t, c.f.ReviveSwitch(c.f.Leaf("rail0-p1")))
	c.run(3 * time.Millisecond)
	resWantOnly(t, "node0 mlx5_0 revived", epEventsOf(t, c.a.ctx), verbs.EventPortActive, 1)
	resWantOnly(t, "node1 mlx5_0 revived", epEventsOf(t, c.b.ctx), verbs.EventPortActive, 1)
}

func TestResSpineDeathIsSilentAndSpareSameLeaf(t *testing.T) {
	c := newConn(t, connOpts{})
	must(t, c.f.FailSwitch(c.f.Spine(0)))
	must(t, c.f.FailSwitch(c.f.Spine(1)))
	if evs := epEventsOf(t, c.a.ctx); len(evs) != 0 {
		t.Fatalf("spine death raised %+v on node0", evs)
	}
	if evs := epEventsOf(t, c.b.ctx); len(evs) != 0 {
		t.Fatalf("spine death raised %+v on node1", evs)
	}
	// node0 and node1 mlx5_0 port 1 share leaf rail0-p1: no spine on the path.
	c.a.post(t, write(1, c.a.sge(0, 8), c.b.mr.Addr(), c.b.mr.RKey()))
	c.run(time.Millisecond)
	epExpect(t, "same leaf, spines dead", c.a.poll(t), epWC{1, verbs.WCSuccess})
}

func TestResSpineDeathBreaksCrossLeafPaths(t *testing.T) {
	for dead := range 2 {
		o := defaults(connOpts{})
		f, err := sim.NewRailFabric(o.spec)
		must(t, err)
		oa, ob := o, o
		oa.dev, ob.dev = "mlx5_0", "mlx5_1"
		a := openEnd(t, f.Host("node0"), oa)
		b := openEnd(t, f.Host("node1"), ob)
		connectRC(t, a, b, o)
		connectRC(t, b, a, o)
		if a.hca.Port(1).Leaf() == b.hca.Port(1).Leaf() {
			t.Fatal("setup: both ends on one leaf")
		}
		reqSpine, respSpine := int(b.hca.Port(1).LID())%2, int(a.hca.Port(1).LID())%2
		if reqSpine != respSpine {
			t.Fatalf("setup: request (LID %d) and response (LID %d) hash to different spines",
				b.hca.Port(1).LID(), a.hca.Port(1).LID())
		}
		c := &conn{f: f, a: a, b: b}
		// Cross-leaf traffic works with both spines up.
		a.post(t, write(1, a.sge(0, 8), b.mr.Addr(), b.mr.RKey()))
		c.run(time.Millisecond)
		epExpect(t, "both spines up", a.poll(t), epWC{1, verbs.WCSuccess})

		must(t, f.FailSwitch(f.Spine(dead)))
		a.post(t, write(2, a.sge(0, 8), b.mr.Addr(), b.mr.RKey()))
		c.run(30 * time.Millisecond)
		if dead == reqSpine {
			epExpect(t, "spine on the path dead", a.poll(t), epWC{2, verbs.WCRetryExcErr})
		} else {
			epExpect(t, "other spine dead", a.poll(t), epWC{2, verbs.WCSuccess})
		}
		if evs := epEventsOf(t, a.ctx); len(evs) != 0 {
			t.Fatalf("spine %d death raised %+v", dead, evs)
		}
	}
}
