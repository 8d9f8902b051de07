package shim

import (
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/verbs"
)

// noChannelProvider opens devices whose contexts refuse to create a
// completion channel on one device.
type noChannelProvider struct {
	verbs.Provider
	dev string
}

func (p noChannelProvider) Open(name string) (verbs.Context, error) {
	c, err := p.Provider.Open(name)
	if err != nil || name != p.dev {
		return c, err
	}
	return noChannelCtx{c}, nil
}

type noChannelCtx struct{ verbs.Context }

func (noChannelCtx) CreateCompChannel() (verbs.CompChannel, error) {
	return nil, verbs.Errorf("ibv_create_comp_channel", verbs.ENOMEM, "refused by the test")
}

// TestFallbackHandshakeBounded: B's shim gets no completion channel on
// its backup device, so it follows the peer's failover only on a fault of
// its own, and B only receives: after A's cable is pulled nothing on B
// ever answers A's fallback notification. With switching back off, A's
// wait is bounded by IBPATH_HANDSHAKE_TIMEOUT: once it has passed on the
// fabric's clock the error surfaces, A's application gets error
// completions, and A's status and log say why. With a bound far away, A
// is still waiting, without an error, long after the first bound would
// have ended it.
func TestFallbackHandshakeBounded(t *testing.T) {
	for _, tc := range []struct {
		bound    string
		surfaces bool
	}{
		{"50ms", true},
		{"10m", false},
	} {
		t.Run(tc.bound, func(t *testing.T) {
			f := railFabric(t, 91)
			c := shimtest.NewCluster()
			env := map[string]string{EnvSwitch: "off", EnvHandshake: tc.bound}
			a := newL2Host(t, f, "node0", 0, c, l2opts{env: env})
			b := newL2Host(t, f, "node1", 1, c, l2opts{env: env,
				wrapProv: func(p verbs.Provider) verbs.Provider { return noChannelProvider{p, "mlx5_1"} }})
			qa, qb := a.addQP(t, qpOpts{}), b.addQP(t, qpOpts{})
			connectPair(t, qa, qb)
			waitFor(t, "both QPs armed", func() bool { return qa.armed() && qb.armed() })
			if b.logLine("no completion channel on the backup device") == "" {
				t.Fatalf("B's log:\n%s", b.log)
			}
			hosts := []*l2host{a, b}
			qa.total, qb.total = 300, 0
			drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.sendDone) >= 10 })
			if err := f.SetLink(a.port, false); err != nil {
				t.Fatal(err)
			}
			cut := f.Now()
			waitFor(t, "A diverted on PORT_ERR", qa.diverted)
			if !tc.surfaces {
				drive(t, f, hosts, 5*time.Microsecond, func() bool { return f.Now()-cut > 120*time.Millisecond })
				sq := qa.connState()
				if sq != fsm.SQAwaitAck || len(qa.errs) != 0 {
					t.Fatalf("A %v with errors %v, want still waiting for B", sq, qa.errs)
				}
				return
			}
			drive(t, f, hosts, 5*time.Microsecond, func() bool { return len(qa.errs) > 0 || f.Now()-cut > 120*time.Millisecond })
			switch waited := f.Now() - cut; {
			case len(qa.errs) == 0:
				t.Fatalf("A: no error %v after the cut (state %v), with a bound of 50ms", waited, qa.connState())
			case waited < 50*time.Millisecond:
				t.Fatalf("A's error after %v of the fabric's time, before the 50ms bound", waited)
			}
			want := "the peer did not answer the fallback notification within 50ms"
			if s := qa.status(); !strings.Contains(s.Reason, want) || qa.connState() != fsm.SQSurfaced {
				t.Fatalf("A: state %v, status %+v: want surfaced, %q", qa.connState(), s, want)
			}
			if a.logLine("layer 2 failover failed; the error reaches the application", want) == "" {
				t.Fatalf("A's log:\n%s", a.log)
			}
			if qb.diverted() {
				t.Fatal("B failed over, though nothing told it to")
			}
		})
	}
}
