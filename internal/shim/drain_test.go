package shim

import (
	"slices"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/verbs"
)

// TestDrainHoldsUntilUndrain: an operator drains A's port under traffic
// (its link stays up). A's QP fails over to the backup device, and the
// traffic stays there through many probe intervals (no switch back onto
// the drained port); the undrain brings both QPs home. Every message
// arrives once, in order, and every signaled WR completes once.
func TestDrainHoldsUntilUndrain(t *testing.T) {
	f := railFabric(t, 91)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{}), newL2Host(t, f, "node1", 1, c, l2opts{})
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	connectPair(t, qa, qb)
	waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
	hosts := []*l2host{a, b}
	qa.total, qb.total = 200, 200
	drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 && len(qb.sendDone) >= 10 })

	drain := ownerproto.Command{Op: ownerproto.OpDrain, Device: "mlx5_0", Port: 1}
	if r := a.rt.Command(drain); !r.OK {
		t.Fatalf("drain: %+v", r)
	}
	if got := a.rt.Drained(); !slices.Equal(got, []string{"mlx5_0:1"}) {
		t.Fatalf("drained %v", got)
	}
	waitFor(t, "A diverted by the drain", qa.diverted)
	failedOverBoth(t, f, hosts, qa, qb, 1)
	// 40 probe intervals with the switch back ticking: still away.
	end := f.Now() + 40*switchTick
	for f.Now() < end {
		switchStep(t, f, hosts, qa, qb)
		if !qa.diverted() {
			t.Fatalf("A came back onto its drained port at %v:\n%s", f.Now(), a.log)
		}
	}
	if s := qa.status(); s.CrossNIC != "fallback" || s.Failovers != 1 || s.Switchbacks != 0 {
		t.Fatalf("A while drained: %+v", s)
	}
	if r := a.rt.Command(ownerproto.Command{Op: ownerproto.OpUndrain, Device: "mlx5_0", Port: 1}); !r.OK {
		t.Fatalf("undrain: %+v", r)
	}
	if got := a.rt.Drained(); len(got) != 0 {
		t.Fatalf("drained after the undrain: %v", got)
	}
	homeAgain(t, f, hosts, qa, qb)
	sendMoreClean(t, f, hosts, qa, qb, 50)
}

// TestDrainNewQPLeaves: a QP connected on a drained port fails over once
// the application took it to RTS, not before: layer 2 arms it at RTR
// (the shim reports the connect then), and moving it to ERR there failed
// the application's RTR->RTS (the lab's pingpong: "Failed to modify QP to
// RTS").
func TestDrainNewQPLeaves(t *testing.T) {
	f := railFabric(t, 92)
	c := shimtest.NewCluster()
	a, b := newL2Host(t, f, "node0", 0, c, l2opts{}), newL2Host(t, f, "node1", 1, c, l2opts{})
	if r := a.rt.Command(ownerproto.Command{Op: ownerproto.OpDrain, Device: "mlx5_0", Port: 1}); !r.OK {
		t.Fatalf("drain: %+v", r)
	}
	qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
	qa.peer, qb.peer = qb, qa
	steps := map[*appQP][]shimtest.ConnectStep{}
	for _, x := range []*appQP{qa, qb} {
		pa, err := x.peer.x.ctx.QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		steps[x] = shimtest.ConnectSteps(verbs.AHAttr{DLID: pa.LID, PortNum: 1}, x.peer.qp.QPN(),
			verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic, shimtest.Timeout)
	}
	modify := func(x *appQP, s shimtest.ConnectStep) {
		if err := x.qp.Modify(&s.Attr, s.Mask); err != nil {
			t.Fatalf("%s: the application's modify to %v: %v", x.x.name, s.Attr.QPState, err)
		}
		x.x.rt.Modified(x.x.id, Modify{QPN: x.qp.QPN(), Mask: s.Mask, State: s.Attr.QPState, Port: s.Attr.PortNum,
			DLID: s.Attr.AHAttr.DLID, DestQPN: s.Attr.DestQPN, Attr: s.Attr})
	}
	for _, x := range []*appQP{qa, qb} { // INIT, RTR, and the connect reported, as the C side does
		for _, s := range steps[x][:len(steps[x])-1] {
			modify(x, s)
		}
		x.x.rt.Connected(x.x.id, x.qp.QPN())
	}
	waitFor(t, "both QPs armed at RTR", func() bool { return qa.armed() && qb.armed() })
	if qa.diverted() {
		t.Fatal("A failed over before the application took it to RTS")
	}
	for _, x := range []*appQP{qa, qb} {
		modify(x, steps[x][len(steps[x])-1])
	}
	hosts := []*l2host{a, b}
	qa.total, qb.total = 100, 100
	waitFor(t, "A diverted once armed", qa.diverted)
	drive(t, f, hosts, 5*time.Microsecond, finished(qa, qb))
	settled(t, f, hosts...)
	for _, q := range []*appQP{qa, qb} {
		if len(q.errs) != 0 {
			t.Fatalf("%s: errors %+v", q.x.name, q.errs)
		}
		eachSignaledOnce(t, q)
	}
	if s := qa.status(); s.Failovers != 1 {
		t.Fatalf("A: %+v", s)
	}
}

// TestDrainCommandRefusesBadInput: the protocol refuses a drain without a
// port, or naming a QP.
func TestDrainCommandRefusesBadInput(t *testing.T) {
	for _, c := range []ownerproto.Command{
		{Op: ownerproto.OpDrain, Device: "mlx5_0"},
		{Op: ownerproto.OpDrain, Device: "mlx5_0", Port: 1, QPN: 5},
		{Op: ownerproto.OpUndrain, Port: 1},
		{Op: ownerproto.OpArm, Device: "mlx5_0", QPN: 5, Port: 1},
	} {
		if _, err := ownerproto.Encode(ownerproto.Msg{Type: ownerproto.TypeCommand, ID: 1, Command: &c}); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
