package shim

import (
	"fmt"
	"testing"
)

// TestSwitchBackUnsignaled: the applications signal one SEND in four,
// as libfabric's verbs provider (MPI's ofi_rxm) and UCX do: a signaled
// completion completes the unsignaled SENDs before it. A's cable is
// pulled and put back twice, on the Go data path and on the express
// lane, under several seeds: every message arrives once, in order,
// every signaled SEND completes once and no unsignaled one does, and
// each switch back collects exactly what the peer notified.
func TestSwitchBackUnsignaled(t *testing.T) {
	for _, express := range []bool{false, true} {
		for seed := uint64(81); seed <= 84; seed++ {
			t.Run(fmt.Sprintf("express=%v/seed=%d", express, seed), func(t *testing.T) {
				o := l2opts{}
				if express {
					o = l2opts{express: true, env: map[string]string{EnvSwitch: "on"}}
				}
				f, hosts, qa, qb := expressWorld(t, seed, o)
				qa.unsig, qb.unsig = 4, 4
				for round := 1; round <= 2; round++ {
					if round == 2 {
						if err := f.SetLink(hosts[0].port, false); err != nil {
							t.Fatal(err)
						}
					}
					failedOverBoth(t, f, hosts, qa, qb, round)
					sendMoreClean(t, f, hosts, qa, qb, 20) // on the backup (the lane with express)
					if express != qa.onLane() {
						t.Fatalf("round %d: A's QP on the lane %v", round, qa.onLane())
					}
					if err := f.SetLink(hosts[0].port, true); err != nil {
						t.Fatal(err)
					}
					homeAgain(t, f, hosts, qa, qb)
					switchCounted(t, round, qa, qb)
					sendMoreClean(t, f, hosts, qa, qb, 50)
					for _, q := range []*appQP{qa, qb} {
						if unsig := q.sent - q.signaled(); unsig < q.sent/2 {
							t.Fatalf("round %d, %s: %d of %d SENDs unsignaled", round, q.x.name, unsig, q.sent)
						}
						if s := q.status(); s.Switchbacks != round || s.CrossNIC != "default" {
							t.Fatalf("round %d, %s: status %+v\nlog:\n%s", round, q.x.name, s, q.x.log)
						}
					}
				}
			})
		}
	}
}
