package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
)

// Child roles: the test binary re-executed as another process (an owner
// that dies, or a client of another user).
const roleEnv = "IBPATHD_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "dying-owner":
		os.Exit(dyingOwner(os.Getenv("IBPATHD_TEST_SOCKET")))
	case "leaving-owner":
		os.Exit(leavingOwner(os.Getenv("IBPATHD_TEST_SOCKET")))
	case "user":
		os.Exit(userClient(os.Getenv("IBPATHD_TEST_SOCKET"), os.Stdout))
	case "steady-owner":
		os.Exit(steadyOwner(os.Getenv("IBPATHD_TEST_SOCKET")))
	case "hostile-owner":
		os.Exit(hostileOwner(os.Getenv("IBPATHD_TEST_SOCKET")))
	default:
		fmt.Fprintln(os.Stderr, "unknown role", os.Getenv(roleEnv))
		os.Exit(2)
	}
}

// attachAndPublish opens an owner session of this process and publishes
// one QP entry through it.
func attachAndPublish(ctx context.Context, socket string, qpn uint32) (*ownerproto.Session, error) {
	inc, err := ownerproto.StartTime(os.Getpid())
	if err != nil {
		return nil, err
	}
	s, err := ownerproto.Dial(ctx, socket, ownerproto.Hello{PID: os.Getpid(), Incarnation: inc}, nil)
	if err != nil {
		return nil, err
	}
	// the QP first (a process publishes only its own QPs' entries),
	// on mlx5_0 port 1 (LID 2)
	if err := s.ReportQP(status.QP{Device: "mlx5_0", QPN: qpn, Port: 1}); err != nil {
		return s, err
	}
	err = s.PublishQP(ctx, ownerproto.PublishQP{Key: store.QPKey{LID: 2, QPN: qpn}, Backup: store.QPBackup{Device: "mlx5_1", Port: 1, LID: 6, QPN: qpn + 1}})
	return s, err
}

// dyingOwner attaches, publishes an entry, says so and exits without
// closing its session.
func dyingOwner(socket string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := attachAndPublish(ctx, socket, 0x999); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("published")
	return 0
}

// leavingOwner publishes, closes its session, lives on a while (as a
// process whose connection dropped), then exits.
func leavingOwner(socket string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := attachAndPublish(ctx, socket, 0x777)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.Close()
	fmt.Println("detached")
	time.Sleep(700 * time.Millisecond)
	return 0
}

// userOutcome is what a client of another user could do.
type userOutcome struct {
	Status     string `json:"status"`
	OwnQP      string `json:"own_qp"`
	OthersQP   string `json:"others_qp"`
	Port       string `json:"port"`
	All        string `json:"all"`
	OwnQPError string `json:"own_qp_error,omitempty"`
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, api.ErrDenied):
		return "denied"
	}
	return "error: " + err.Error()
}

// userClient attaches as an owner with one QP, then tries every kind of
// action, and prints what happened as JSON.
func userClient(socket string, out io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inc, err := ownerproto.StartTime(os.Getpid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := ownerproto.Dial(ctx, socket, ownerproto.Hello{PID: os.Getpid(), Incarnation: inc}, func(ownerproto.Command) ownerproto.Result {
		return ownerproto.Result{OK: true, After: status.QPState{APM: "rearming", Primary: status.Path{Device: "mlx5_1", Port: 2}}}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	if err := s.ReportQP(status.QP{Device: "mlx5_0", QPN: 0x4242, Port: 1}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c := api.NewClient(socket, 10*time.Second)
	var o userOutcome
	for i := 0; ; i++ { // wait for the daemon to record the QP
		n, err := c.Status(ctx)
		o.Status = outcome(err)
		if err != nil || len(n.QPs) == 3 || i > 500 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err = c.Migrate(ctx, api.Target{Device: "mlx5_0", QPN: 0x4242}, false)
	o.OwnQP = outcome(err)
	n, _ := c.Status(ctx)
	var others uint32
	for _, q := range n.QPs {
		if q.OwnerPID == 0 {
			others = q.QPN
		}
	}
	_, err = c.Migrate(ctx, api.Target{Device: "mlx5_0", QPN: others}, true)
	o.OthersQP = outcome(err)
	_, err = c.Arm(ctx, api.Target{Device: "mlx5_0", Port: 1})
	o.Port = outcome(err)
	_, err = c.Arm(ctx, api.Target{All: true})
	o.All = outcome(err)
	json.NewEncoder(out).Encode(o)
	return 0
}

func TestDeadOwnerEntriesRemoved(t *testing.T) {
	d, c := testDaemon(t, nil)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=dying-owner", "IBPATHD_TEST_SOCKET="+d.cfg.Socket)
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "published\n" {
		t.Fatalf("owner child: %v: %s", err, out)
	}
	ctx := context.Background()
	eventually(t, "the dead owner's entry removed", func() bool {
		qps, err := c.StoreQPs(ctx, "")
		return err == nil && len(qps) == 0
	})
	n, _ := c.Status(ctx)
	if len(n.Owners) != 0 {
		t.Fatalf("owners %+v", n.Owners)
	}
}

// TestOwnerThatDetachesThenDies: a process that closed its session while
// alive keeps its entries while it lives, and loses them when it ends.
func TestOwnerThatDetachesThenDies(t *testing.T) {
	d, c := testDaemon(t, nil)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=leaving-owner", "IBPATHD_TEST_SOCKET="+d.cfg.Socket)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if string(buf[:n]) != "detached\n" {
		t.Fatalf("child said %q", buf[:n])
	}
	ctx := context.Background()
	time.Sleep(200 * time.Millisecond) // the child lives on, detached
	if qps, err := c.StoreQPs(ctx, ""); err != nil || len(qps) != 1 {
		t.Fatalf("the entry of a live, detached owner: %+v %v", qps, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the entry removed once the process ended", func() bool {
		qps, err := c.StoreQPs(ctx, "")
		return err == nil && len(qps) == 0
	})
}

// copyExecutable puts the test binary where another user can run it.
func copyExecutable(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "daemon.test")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPermissionMatrixRealCredentials runs clients as another user
// (nobody, uid 65534) against a daemon run by root: the daemon sees the
// uid through SO_PEERCRED. Needs root to switch users.
func TestPermissionMatrixRealCredentials(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user; TestPolicyMatrix covers the rules")
	}
	// t.TempDir's parent is private to root: make a directory nobody
	// can reach.
	dir, err := os.MkdirTemp("", "ibpathd-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := copyExecutable(t, dir)
	for _, tc := range []struct {
		name      string
		operators []string
		want      userOutcome
	}{
		{"other user", nil, userOutcome{Status: "ok", OwnQP: "ok", OthersQP: "denied", Port: "denied", All: "denied"}},
		{"operator", []string{"65534"}, userOutcome{Status: "ok", OwnQP: "ok", OthersQP: "ok", Port: "ok", All: "ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(dir, tc.name[:5]+".sock")
			d, _ := testDaemon(t, func(cfg *Config) { cfg.Socket = sock; cfg.Operators = tc.operators })
			eventually(t, "armed", func() bool { return d.Status().Totals.ArmedQPs == 2 })
			cmd := exec.Command(bin, "-test.run=^$")
			cmd.Env = append(os.Environ(), roleEnv+"=user", "IBPATHD_TEST_SOCKET="+sock)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			cmd.Dir = dir
			out, err := cmd.Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("client as uid 65534: %v: %s", err, ee.Stderr)
				}
				t.Fatalf("client as uid 65534: %v", err)
			}
			var got userOutcome
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("client output %q: %v", out, err)
			}
			if got != tc.want {
				t.Fatalf("uid 65534 (%s): got %+v, want %+v", tc.name, got, tc.want)
			}
		})
	}
}
