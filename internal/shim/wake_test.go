package shim

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/verbs"
)

// eventStep runs the applications as programs that sleep in
// ibv_get_cq_event: each keeps its receives posted and its sends going,
// and polls a CQ the hot path did not divert as usual (the kernel's
// events cover it) but a diverted one only after a wake-up since its
// last poll, then arms it (the lane's backup CQs with it) and polls it
// once more, the pattern verbs programs follow.
func eventStep(t *testing.T, hosts []*l2host, seen map[verbs.CQ]int) {
	t.Helper()
	postStep(t, hosts)
	for _, x := range hosts {
		for _, q := range x.qps {
			for _, cq := range []verbs.CQ{q.scq, q.rcq} {
				if !x.hp.DivertedCQ(cq) {
					x.drain(t, cq)
					continue
				}
				last, ok := seen[cq]
				w := x.hp.WakesOf(cq)
				if ok && w == last {
					continue // asleep
				}
				seen[cq] = w
				x.drain(t, cq)
				if err := x.hp.ArmLane(cq); err != nil {
					t.Fatal(err)
				}
				x.drain(t, cq)
			}
		}
	}
}

// TestWakeSleepingApplication: after the failover both applications
// sleep on their completion channels and poll a diverted CQ only when
// the runtime wakes it. Every message still arrives once, in order: the
// runtime wakes a CQ whenever it queued completions for it (the Go data
// path, B following A's notification while asleep) or a backup CQ on
// the express lane has some.
func TestWakeSleepingApplication(t *testing.T) {
	for _, express := range []bool{false, true} {
		name := map[bool]string{false: "go-path", true: "express-lane"}[express]
		t.Run(name, func(t *testing.T) {
			f, hosts, qa, qb := expressWorld(t, 61, l2opts{express: express})
			qa.total, qb.total = 120, 120
			seen := map[verbs.CQ]int{}
			deadline := time.Now().Add(60 * time.Second)
			for i := 0; !finished(qa, qb)(); i++ {
				if time.Now().After(deadline) {
					t.Fatalf("the sleeping applications stalled at virtual %v: %s", f.Now(), progress(hosts))
				}
				eventStep(t, hosts, seen)
				f.RunFor(5 * time.Microsecond)
				if i%8 == 0 {
					time.Sleep(100 * time.Microsecond)
				}
			}
			for _, q := range []*appQP{qa, qb} {
				if len(q.errs) > 0 {
					t.Fatalf("%s: errors %+v", q.x.name, q.errs)
				}
				if q.x.hp.WakesOf(q.rcq) == 0 {
					t.Errorf("%s: its receive CQ was never woken", q.x.name)
				}
			}
			if express && !(qa.onLane() && qb.onLane()) {
				t.Errorf("the QPs did not reach the lane")
			}
		})
	}
}

// TestWakeLaneLateBackupEvent: a backup CQ's event read while the QP was
// still on the Go data path, and handled once it is on the lane (the
// notifier reads the event, then waits for the failover lock the lane's
// hand-over holds), wakes the application for the QP's CQs: the lane
// polls that completion, and a program asleep on its channel would
// otherwise never poll it.
func TestWakeLaneLateBackupEvent(t *testing.T) {
	f, hosts, qa, qb := expressWorld(t, 62, l2opts{express: true})
	a := hosts[0]
	bothOnLane(t, f, hosts, qa, qb)
	before := a.hp.WakesOf(qa.scq) + a.hp.WakesOf(qa.rcq)
	a.rt.l2mu.Lock()
	s := a.rt.shadows[a.id]
	a.rt.l2mu.Unlock()
	a.rt.onBackupEvent(s, qa.qp, time.Now())
	if after := a.hp.WakesOf(qa.scq) + a.hp.WakesOf(qa.rcq); after < before+2 {
		t.Fatalf("wakes of the lane QP's CQs: %d before the late event, %d after; want both CQs woken", before, after)
	}
}
