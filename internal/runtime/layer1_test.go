package runtime

import (
	"sync"
	"testing"
	"time"

	"github.com/ibpath/ibpath/apm"
	"github.com/ibpath/ibpath/asyncev"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// qpOn creates an RC QP on ctx.
func qpOn(t *testing.T, ctx verbs.Context) verbs.QP {
	pd, err := ctx.AllocPD()
	must(t, err)
	cq, err := ctx.CreateCQ(64, nil, 0)
	must(t, err)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	return qp
}

func connect(t *testing.T, mgr *apm.Manager, ctx verbs.Context, qp verbs.QP, peer verbs.Context, peerQP verbs.QP) {
	pa, err := peer.QueryPort(1)
	must(t, err)
	c := verbs.RCConnect{AH: verbs.AHAttr{DLID: pa.LID, PortNum: 1}, Access: verbs.AccessRemoteWrite,
		PathMTU: verbs.MTU1024, DestQPN: peerQP.QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 1,
		Timeout: 10, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1}
	must(t, c.Apply(func(a *verbs.QPAttr, m verbs.QPAttrMask) error { return mgr.ModifyQP(ctx, qp, a, m) }))
}

// TestLayer1UnderGoroutines runs the manager from real event pumps and the
// poller goroutine while the test advances the simulated fabric: the QP
// arms, migrates at PORT_ERR and every event is forwarded.
func TestLayer1UnderGoroutines(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Hosts: 2, HCAsPerHost: 1, PortsPerHCA: 2, LMC: 1})
	must(t, err)
	h0, h1 := f.Host("node0"), f.Host("node1")
	c0, err := h0.Open("mlx5_0")
	must(t, err)
	c1, err := h1.Open("mlx5_0")
	must(t, err)
	cat := &pathsel.Catalog{}
	cat.Add(func() (pathsel.HCA, error) { return pathsel.Describe(c0) })
	cat.Add(func() (pathsel.HCA, error) { return pathsel.Describe(c1) })
	m0, err := apm.New(f, apm.Config{}, cat, nil)
	must(t, err)
	m1, err := apm.New(f, apm.Config{}, cat, nil)
	must(t, err)
	q0, q1 := qpOn(t, c0), qpOn(t, c1)
	connect(t, m0, c0, q0, c1, q1)
	connect(t, m1, c1, q1, c0, q0)

	var mu sync.Mutex
	var forwarded []string
	l0 := StartLayer1(m0, []verbs.Context{c0}, nil, func(ev asyncev.Event) {
		mu.Lock()
		forwarded = append(forwarded, ev.String())
		mu.Unlock()
	})
	defer l0.Close()
	l1 := StartLayer1(m1, []verbs.Context{c1}, nil, nil)
	defer l1.Close()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			f.RunFor(10 * time.Microsecond)
			time.Sleep(100 * time.Microsecond)
		}
	}
	state := func(l *Layer1, qp verbs.QP) (s apm.QPStatus) {
		l.Do(func(m *apm.Manager) { s, _ = m.QPStatus(qp) })
		return s
	}
	// REARM -> ARMED needs a packet each way from the re-armed peer: a
	// zero-length unsignaled WRITE and its ACK.
	f.RunFor(50 * time.Microsecond)
	if _, err := q0.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite}}); err != nil {
		t.Fatal(err)
	}
	waitFor("both sides armed", func() bool {
		return state(l0, q0).State == fsm.APMArmed && state(l1, q1).State == fsm.APMArmed
	})
	must(t, f.SetLink(h0.HCA("mlx5_0").Port(1), false))
	waitFor("proactive migration", func() bool { return state(l0, q0).Primary.Port == 2 })
	// With traffic the peer follows and both ends re-arm on what is left
	// (the LMC path of port 2).
	waitFor("re-armed on port 2", func() bool {
		_, _ = q0.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite}}) // ENOMEM when full: fine
		s := state(l0, q0)
		return s.State == fsm.APMArmed && s.Alternate == (fsm.PathRef{Port: 2, Bits: 1})
	})
	waitFor("PORT_ERR forwarded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range forwarded {
			if s == "mlx5_0 PORT_ERR port 1" {
				return true
			}
		}
		return false
	})
	l0.Close()
	l0.Close() // idempotent
}
