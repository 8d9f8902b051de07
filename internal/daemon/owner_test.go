package daemon

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
)

func selfHello(t testing.TB) ownerproto.Hello {
	t.Helper()
	inc, err := ownerproto.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return ownerproto.Hello{PID: os.Getpid(), Incarnation: inc, Comm: "daemon.test"}
}

// fakeShim answers commands like the shim would, recording them.
type fakeShim struct {
	mu    sync.Mutex
	cmds  []ownerproto.Command
	delay time.Duration
}

func (f *fakeShim) handle(c ownerproto.Command) ownerproto.Result {
	f.mu.Lock()
	f.cmds = append(f.cmds, c)
	delay := f.delay
	f.mu.Unlock()
	time.Sleep(delay)
	if c.QPN == 0x77 {
		return ownerproto.Result{Error: "ibv_modify_qp: Invalid argument", Before: status.QPState{APM: "unprotected", Primary: status.Path{Device: c.Device, Port: 1}}}
	}
	return ownerproto.Result{OK: true, Before: status.QPState{APM: "armed", Primary: status.Path{Device: c.Device, Port: 1}},
		After: status.QPState{APM: "rearming", Primary: status.Path{Device: c.Device, Port: 2}}}
}

func TestOwnerSessionRelayAndPublish(t *testing.T) {
	d, c := testDaemon(t, nil)
	ctx := context.Background()
	shim := &fakeShim{}
	s, err := ownerproto.Dial(ctx, d.cfg.Socket, selfHello(t), shim.handle)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer s.Close()
	if s.Node() != "node0" {
		t.Fatalf("welcome node %q", s.Node())
	}
	for _, qpn := range []uint32{0x1c3, 0x77} {
		if err := s.ReportQP(status.QP{Device: "mlx5_1", QPN: qpn, Port: 1, Layer: status.LayerAPM, APM: "armed", Primary: status.Path{Device: "mlx5_1", Port: 1, LID: 999, PortState: "DOWN"}, Alternate: status.Path{Device: "mlx5_1", Port: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	var n status.Node
	eventually(t, "the owner's QPs in status", func() bool {
		n, _ = c.Status(ctx)
		return len(n.QPs) == 4
	})
	if len(n.Owners) != 1 || n.Owners[0].PID != os.Getpid() || n.Owners[0].QPs != 2 || n.Owners[0].Comm != "daemon.test" {
		t.Fatalf("owners %+v", n.Owners)
	}
	// The paths show this node's view of their ports, not the owner's.
	lids := map[uint8]uint16{}
	for _, h := range n.HCAs {
		for _, p := range h.Ports {
			if h.Name == "mlx5_1" {
				lids[p.Num] = p.LID
			}
		}
	}
	for _, q := range n.QPs {
		if q.OwnerPID != os.Getpid() {
			continue
		}
		if q.Primary.LID != lids[1] || q.Primary.PortState != "ACTIVE" || q.Alternate.LID != lids[2] || q.Alternate.PortState != "ACTIVE" ||
			lids[1] == 0 || q.Primary.GID != "" {
			t.Fatalf("owner's QP %#x: primary %+v, alternate %+v; want the LIDs %v of this node's ports, ACTIVE", q.QPN, q.Primary, q.Alternate, lids)
		}
	}
	res, err := c.Migrate(ctx, api.Target{Device: "mlx5_1", QPN: 0x1c3}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 1 || !res.Results[0].OK || res.Results[0].OwnerPID != os.Getpid() || res.Results[0].After.String() != "rearming port 2" {
		t.Fatalf("relayed migrate %+v", res)
	}
	shim.mu.Lock()
	got := append([]ownerproto.Command(nil), shim.cmds...)
	shim.mu.Unlock()
	if len(got) != 1 || got[0] != (ownerproto.Command{Op: ownerproto.OpMigrate, Device: "mlx5_1", QPN: 0x1c3}) {
		t.Fatalf("the shim got %+v", got)
	}
	// A port target reaches the owner's QPs on that port and the
	// workload's: the failing one is reported, the call is a 207.
	res, err = c.Arm(ctx, api.Target{Device: "mlx5_1", Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 3 || res.Failed() != 1 {
		t.Fatalf("arm port: %+v", res)
	}
	for _, r := range res.Results {
		if r.QPN == 0x77 && (r.OK || !strings.Contains(r.Error, "Invalid argument")) {
			t.Fatalf("the failing QP: %+v", r)
		}
	}
	// Publications are durable in the store and listed.
	k := store.QPKey{LID: 6, QPN: 0x1c3} // mlx5_1 port 1, the reported QP's
	if err := s.PublishQP(ctx, ownerproto.PublishQP{Key: k, Backup: store.QPBackup{Device: "mlx5_1", Port: 1, LID: 6, QPN: 0x2c3}, Remote: ownerproto.Route{LID: 10}}); err != nil {
		t.Fatalf("PublishQP: %v", err)
	}
	if err := s.PublishMR(ctx, ownerproto.PublishMR{Key: store.MRKey{LID: 6, RKey: 0x100}, Backup: store.MRBackup{RKey: 0x200, Addr: 0x1000, Length: 4096}}); err != nil {
		t.Fatalf("PublishMR: %v", err)
	}
	if v, err := s.LookupQP(ctx, k); err != nil || v.QPN != 0x2c3 {
		t.Fatalf("LookupQP of a published entry: %+v %v", v, err)
	}
	if v, err := s.LookupMR(ctx, store.MRKey{LID: 6, RKey: 0x100}); err != nil || v.RKey != 0x200 {
		t.Fatalf("LookupMR: %+v %v", v, err)
	}
	// The MR entries of a route, listed from a mark on.
	page, err := s.LookupMRs(ctx, []ownerproto.Route{{LID: 6}, {LID: 77}}, 0)
	if err != nil || len(page.MRs) != 1 || page.MRs[0].Key.RKey != 0x100 || page.MRs[0].Backup.RKey != 0x200 || page.More || page.Next == 0 {
		t.Fatalf("LookupMRs: %+v %v", page, err)
	}
	if again, err := s.LookupMRs(ctx, []ownerproto.Route{{LID: 6}}, page.Next); err != nil || len(again.MRs) != 0 || again.Next != page.Next {
		t.Fatalf("LookupMRs from the last mark: %+v %v", again, err)
	}
	if other, err := s.LookupMRs(ctx, []ownerproto.Route{{LID: 7}}, 0); err != nil || len(other.MRs) != 0 {
		t.Fatalf("LookupMRs of another route: %+v %v", other, err)
	}
	if _, err := s.LookupQP(ctx, store.QPKey{LID: 99, QPN: 1}); !errors.Is(err, ownerproto.ErrNotFound) {
		t.Fatalf("LookupQP of nothing: %v", err)
	}
	qps, err := c.StoreQPs(ctx, "node0")
	if err != nil {
		t.Fatal(err)
	}
	if len(qps) != 1 || qps[0].BQPN != 0x2c3 || !strings.HasPrefix(qps[0].Owner, "node0/") {
		t.Fatalf("store QPs %+v", qps)
	}
	if other, _ := c.StoreQPs(ctx, "node9"); len(other) != 0 {
		t.Fatalf("node filter: %+v", other)
	}
	mrs, err := c.StoreMRs(ctx, "")
	if err != nil || len(mrs) != 1 || mrs[0].BRKey != 0x200 {
		t.Fatalf("store MRs %+v %v", mrs, err)
	}
	if err := s.QPGone("mlx5_1", 0x77); err != nil {
		t.Fatal(err)
	}
	eventually(t, "QP gone", func() bool { n, _ := c.Status(ctx); return len(n.QPs) == 3 })
	// The process lives: closing its session keeps its entries.
	s.Close()
	eventually(t, "owner detached", func() bool { n, _ := c.Status(ctx); return len(n.Owners) == 0 && len(n.QPs) == 2 })
	if q, _ := d.repl.Store().Entries(); q != 1 {
		t.Fatalf("a live owner's entries were removed: %d QPs left", q)
	}
	// A command to a QP whose owner left is not found any more.
	if _, err := c.Arm(ctx, api.Target{Device: "mlx5_1", QPN: 0x1c3}); err == nil {
		t.Fatal("arm of a detached owner's QP succeeded")
	}
}

func TestOwnerHelloChecked(t *testing.T) {
	d, _ := testDaemon(t, nil)
	ctx := context.Background()
	good := selfHello(t)
	for _, tc := range []struct {
		name  string
		hello ownerproto.Hello
		want  string
	}{
		{"another pid", ownerproto.Hello{PID: 1, Incarnation: good.Incarnation}, "belongs to pid"},
		{"another incarnation", ownerproto.Hello{PID: good.PID, Incarnation: good.Incarnation + 1}, "is not the start time"},
		{"future protocol", ownerproto.Hello{Proto: 9, PID: good.PID, Incarnation: good.Incarnation}, "protocol 9"},
	} {
		_, err := ownerproto.Dial(ctx, d.cfg.Socket, tc.hello, nil)
		if !errors.Is(err, ownerproto.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want refusal containing %q", tc.name, err, tc.want)
		}
	}
	s, err := ownerproto.Dial(ctx, d.cfg.Socket, good, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := ownerproto.Dial(ctx, d.cfg.Socket, good, nil); err == nil || !strings.Contains(err.Error(), "already has a session") {
		t.Fatalf("second session of one pid: %v", err)
	}
}

func TestOwnerTimeout(t *testing.T) {
	d, c := testDaemon(t, func(cfg *Config) { cfg.CommandTimeout = 100 * time.Millisecond })
	ctx := context.Background()
	shim := &fakeShim{delay: 500 * time.Millisecond}
	s, err := ownerproto.Dial(ctx, d.cfg.Socket, selfHello(t), shim.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.ReportQP(status.QP{Device: "mlx5_0", QPN: 0x500, Port: 2})
	eventually(t, "QP reported", func() bool { n, _ := c.Status(ctx); return len(n.QPs) == 3 })
	res, err := c.Arm(ctx, api.Target{Device: "mlx5_0", QPN: 0x500})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed() != 1 || !strings.Contains(res.Results[0].Error, "did not answer") {
		t.Fatalf("slow owner: %+v", res)
	}
}

func TestOwnerSessionWithoutHandler(t *testing.T) {
	d, c := testDaemon(t, nil)
	ctx := context.Background()
	s, err := ownerproto.Dial(ctx, d.cfg.Socket, selfHello(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.ReportQP(status.QP{Device: "mlx5_0", QPN: 0x600, Port: 1})
	eventually(t, "QP reported", func() bool { n, _ := c.Status(ctx); return len(n.QPs) == 3 })
	res, err := c.Migrate(ctx, api.Target{Device: "mlx5_0", QPN: 0x600}, false)
	if err != nil || res.Failed() != 1 || !strings.Contains(res.Results[0].Error, "does not take commands") {
		t.Fatalf("%+v %v", res, err)
	}
}
