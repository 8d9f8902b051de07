package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
)

// hostileSays is what the hostile owner child reports: the error of
// each publication ("" when it was taken).
type hostileSays struct {
	OthersKey, OtherRoute, OwnKey, ForeignMR, OwnMR string
}

// hostileOwner is a local process of any user that attaches as an owner
// and tries to pose as another process's QP (the child role
// "hostile-owner"): it reports the victim's QP 0x1c3 on mlx5_1 and a QP
// of ibpathd's simulated workload, publishes under the victim's QP and
// under a route of no port of this node, and sends events it cannot
// produce; then, for comparison, it reports, publishes and signals what
// is its own. It prints what it was told and stays attached until stdin
// closes.
func hostileOwner(socket string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inc, err := ownerproto.StartTime(os.Getpid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := ownerproto.Dial(ctx, socket, ownerproto.Hello{PID: os.Getpid(), Incarnation: inc, Comm: "hostile"}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	errOf := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	var out hostileSays
	b := store.QPBackup{Device: "mlx5_0", Port: 2, LID: 4, QPN: 0x5a6}
	s.ReportQP(status.QP{Device: "mlx5_1", QPN: 0x1c3, Port: 1}) // the victim's
	s.ReportQP(status.QP{Device: "mlx5_0", QPN: 0x100, Port: 1}) // the simulated workload's
	s.ReportQP(status.QP{Device: "mlx5_0", QPN: 0x5a5, Port: 1}) // its own
	s.ReportQP(status.QP{Device: "mlx5_9", QPN: 0x5a7, Port: 1}) // its own, on no device of this node
	out.OthersKey = errOf(s.PublishQP(ctx, ownerproto.PublishQP{Key: store.QPKey{LID: 6, QPN: 0x1c3}, Backup: b}))
	out.OtherRoute = errOf(s.PublishQP(ctx, ownerproto.PublishQP{Key: store.QPKey{LID: 0x63, QPN: 0x5a7}, Backup: b}))
	out.OwnKey = errOf(s.PublishQP(ctx, ownerproto.PublishQP{Key: store.QPKey{LID: 2, QPN: 0x5a5}, Backup: b}))
	out.ForeignMR = errOf(s.PublishMR(ctx, ownerproto.PublishMR{Key: store.MRKey{LID: 0x63, RKey: 7}, Backup: store.MRBackup{RKey: 8}}))
	out.OwnMR = errOf(s.PublishMR(ctx, ownerproto.PublishMR{Key: store.MRKey{LID: 2, RKey: 7}, Backup: store.MRBackup{RKey: 8}}))
	s.Event(status.Event{Kind: status.EvPortStateChanged, Device: "mlx5_0", Port: 1, To: "DOWN"})
	s.Event(status.Event{Kind: status.EvFailover, Device: "mlx5_1", QPN: 0x1c3})
	s.Event(status.Event{Kind: status.EvFailover, Device: "mlx5_0", QPN: 0x5a5}) // its own: counted
	json.NewEncoder(os.Stdout).Encode(out)
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestOwnerCannotPoseAsAnother: what a hostile local process says is
// checked against what it owns (docs/SECURITY.md, "Owner sessions"). Its
// report of another process's QP, or of the simulated workload's, is
// refused, so actions on that QP still go to its real owner; its
// publications under another's QP, or a route of no port of this node,
// are refused and leave the store as it was; its events other than
// about its own QPs are dropped. What is its own goes through.
func TestOwnerCannotPoseAsAnother(t *testing.T) {
	d, c := testDaemon(t, nil)
	ctx := context.Background()
	victim := &fakeShim{}
	s, err := ownerproto.Dial(ctx, d.cfg.Socket, selfHello(t), victim.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ReportQP(status.QP{Device: "mlx5_1", QPN: 0x1c3, Port: 1, Layer: status.LayerAPM, APM: "armed"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the victim's QP in status", func() bool { n, _ := c.Status(ctx); return len(n.QPs) == 3 })

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=hostile-owner", "IBPATHD_TEST_SOCKET="+d.cfg.Socket)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("hostile owner: %v", err)
	}
	var said hostileSays
	if err := json.Unmarshal([]byte(line), &said); err != nil {
		t.Fatalf("hostile owner said %q: %v", line, err)
	}
	for what, e := range map[string]string{"another's QP key": said.OthersKey, "a route of no port here": said.OtherRoute, "a region of no port here": said.ForeignMR} {
		if !strings.Contains(e, "refused") {
			t.Errorf("publication under %s: %q, want a refusal", what, e)
		}
	}
	if said.OwnKey != "" || said.OwnMR != "" {
		t.Fatalf("its own publications refused: %+v", said)
	}
	var n status.Node
	// the refusals (the other's failover event among them: it was sent
	// first) and the owner's own failover, sent last
	eventually(t, "the refusals and the owner's own failover counted", func() bool {
		n, _ = c.Status(ctx)
		return n.Totals.OwnerRefusals == 7 && n.Totals.Failovers >= 1
	})
	owners := map[uint32]int{}
	for _, q := range n.QPs {
		owners[q.QPN] = q.OwnerPID
	}
	if owners[0x1c3] != os.Getpid() || owners[0x100] != 0 || owners[0x5a5] != cmd.Process.Pid || len(n.QPs) != 5 {
		t.Fatalf("QPs and their owners: %+v", n.QPs)
	}
	if n.Totals.Failovers != 1 {
		t.Fatalf("%d failovers counted; only the hostile owner's own one is", n.Totals.Failovers)
	}
	qps, err := c.StoreQPs(ctx, "")
	if err != nil || len(qps) != 1 || qps[0].QPN != 0x5a5 {
		t.Fatalf("store QPs %+v %v: only the hostile owner's own entry", qps, err)
	}
	// The victim's QP is still the victim's: its migrate is relayed to it.
	res, err := c.Migrate(ctx, api.Target{Device: "mlx5_1", QPN: 0x1c3}, false)
	if err != nil || len(res.Results) != 1 || !res.Results[0].OK || res.Results[0].OwnerPID != os.Getpid() {
		t.Fatalf("migrate of the victim's QP: %+v %v", res, err)
	}
	victim.mu.Lock()
	got := len(victim.cmds)
	victim.mu.Unlock()
	if got != 1 {
		t.Fatalf("the victim got %d commands", got)
	}
}
