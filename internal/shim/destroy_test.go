package shim

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// TestFailoverDestroyRefused: the provider refuses the application's
// ibv_destroy_qp (EBUSY). The QP is still the application's, and layer 2
// carries it as it did before: an armed QP keeps its backup and fails
// over at the next fault, one whose port died while the destroy was
// under way (layer 2 left it alone then) fails over once its error
// completion comes, and one already on the backup carries on there.
func TestFailoverDestroyRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		diverted bool // the destroy comes after the failover
		cutWhile bool // the port dies while the destroy is under way
		peerCut  bool // the peer fails over while the destroy is under way
		polled   bool // the QP's WRs in flight complete and are polled while the destroy is under way
		reason   string
	}{
		{name: "armed", reason: `reason="completion error`},
		{name: "port dies meanwhile", cutWhile: true, reason: `reason="completion error`},
		{name: "peer fails over meanwhile", peerCut: true, reason: `reason="the peer's fallback notification on the backup QP"`},
		{name: "on the backup", diverted: true, reason: `reason="completion error`},
		// the successes polled meanwhile are retired in the hot path's
		// rings (lip_qp_destroying): the failover after the refusal
		// replays none of them, and no SEND completes twice
		{name: "completions polled meanwhile", polled: true, reason: `reason="completion error`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := railFabric(t, 47)
			c := shimtest.NewCluster()
			a, b := newL2Host(t, f, "node0", 0, c, l2opts{noWatch: true}), newL2Host(t, f, "node1", 1, c, l2opts{noWatch: true})
			qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
			connectPair(t, qa, qb)
			waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
			hosts := []*l2host{a, b}
			qa.total = 40
			drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 })
			cut := func() {
				if err := f.SetLink(a.port, false); err != nil {
					t.Fatal(err)
				}
			}
			if tc.diverted {
				cut()
				drive(t, f, hosts, 10*time.Microsecond, func() bool { return qa.diverted() && len(qa.sendDone) >= 20 })
			}
			qa.refuseDestroy(func() {
				if tc.peerCut {
					// B's link dies; B fails over and its notification
					// reaches A's backup while A's destroy is under way
					if err := f.SetLink(b.port, false); err != nil {
						t.Fatal(err)
					}
					qb.total = 20
					drive(t, f, []*l2host{b}, 10*time.Microsecond, qb.diverted)
					waitFor(t, "A's runtime read the peer's notification", func() bool {
						a.rt.fo.mu.Lock()
						defer a.rt.fo.mu.Unlock()
						return !a.rt.fo.qps[qpKey{a.id, qa.qp.QPN()}].heldEventAt.IsZero()
					})
					if qa.diverted() {
						t.Fatal("layer 2 diverted a QP the application is destroying")
					}
					return
				}
				if tc.polled {
					inFlight := qa.sent - len(qa.sendDone)
					if inFlight == 0 {
						t.Fatal("nothing of A's in flight when the destroy starts")
					}
					for i := 0; i < 200 && qa.sent != len(qa.sendDone); i++ {
						f.RunFor(10 * time.Microsecond)
						a.poll(t)
						b.poll(t)
					}
					if qa.sent != len(qa.sendDone) {
						t.Fatalf("A's %d WRs in flight did not complete during the destroy", inFlight)
					}
					return
				}
				if !tc.cutWhile {
					return
				}
				cut()
				// the runtime sees PORT_ERR while the destroy is under way
				a.rt.portEvent(a.rt.shadows[a.id].dev, verbs.AsyncEvent{Type: verbs.EventPortErr, Port: 1})
				if qa.diverted() {
					t.Fatal("layer 2 diverted a QP the application is destroying")
				}
			})
			if _, _, ok := a.rt.shadows[a.id].sh.BackupOf(qa.qp); !ok {
				t.Fatal("the backup went with the refused destroy")
			}
			if s := qa.status(); s.Layer != status.LayerCrossNIC {
				t.Fatalf("status after the refused destroy: %+v", s)
			}
			if !tc.diverted && !tc.cutWhile && !tc.peerCut {
				if !qa.armed() || qa.diverted() {
					t.Fatalf("armed %v, diverted %v after the refused destroy", qa.armed(), qa.diverted())
				}
				cut()
			}
			drive(t, f, hosts, 10*time.Microsecond, finished(qa, qb))
			eachSignaledOnce(t, qa)
			checkFailedOver(t, qa, tc.reason)
			if tc.peerCut {
				checkFailedOver(t, qb, `reason="completion error`)
			} else {
				checkFailedOver(t, qb, `reason="the peer's fallback notification on the backup QP"`)
			}
			if l := a.logLine("ibv_destroy_qp failed; the QP stays protected", "errno="); l == "" {
				t.Fatalf("no line for the refused destroy in the log:\n%s", a.log)
			}
		})
	}
}
