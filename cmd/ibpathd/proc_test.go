package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/internal/syncbuf"
)

// The test binary runs as ibpathd itself when this is set, so the tests
// start real daemon processes without building anything.
const asMainEnv = "IBPATHD_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// daemonProc is one ibpathd process.
type daemonProc struct {
	t      testing.TB
	name   string
	args   []string
	socket string
	state  string
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	done   chan error
	client *api.Client
}

// start runs ibpathd with args plus a socket and state directory of its
// own, and waits until its API answers.
func startDaemon(t testing.TB, name, stateDir string, args ...string) *daemonProc {
	t.Helper()
	p := &daemonProc{t: t, name: name, state: stateDir, socket: filepath.Join(stateDir, "ibpathd.sock")}
	p.args = append([]string{"--node", name, "--socket", p.socket, "--state-dir", stateDir, "--dbus", "off", "--config", filepath.Join(stateDir, "none.conf")}, args...)
	if err := os.WriteFile(filepath.Join(stateDir, "none.conf"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p.client = api.NewClient(p.socket, 5*time.Second)
	p.run()
	t.Cleanup(p.stop)
	return p
}

func (p *daemonProc) run() {
	p.t.Helper()
	p.cmd = exec.Command(os.Args[0], p.args...)
	p.cmd.Env = append(os.Environ(), asMainEnv+"=1")
	p.out = &syncbuf.Buffer{}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.done = make(chan error, 1)
	go func(c *exec.Cmd, done chan error) { done <- c.Wait() }(p.cmd, p.done)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := p.client.Status(context.Background()); err == nil {
			return
		}
		select {
		case err := <-p.done:
			p.t.Fatalf("%s exited before serving: %v\n%s", p.name, err, p.out)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not serve within 20 s:\n%s", p.name, p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill9 kills the process with SIGKILL, as a crash would.
func (p *daemonProc) kill9() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.done = nil
}

// stop ends the process with SIGTERM and checks it exits cleanly.
func (p *daemonProc) stop() {
	if p.done == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Errorf("%s exited with %v after SIGTERM:\n%s", p.name, err, p.out)
		}
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		p.t.Errorf("%s did not exit within 15 s of SIGTERM", p.name)
	}
	p.done = nil
}

func (p *daemonProc) status() status.Node {
	p.t.Helper()
	n, err := p.client.Status(context.Background())
	if err != nil {
		p.t.Fatalf("%s status: %v\n%s", p.name, err, p.out)
	}
	return n
}

// eventually polls cond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runOnce runs ibpathd with args and returns its output and exit error.
func runOnce(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMainEnv+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func keyFile(t *testing.T, dir, hexKey string) string {
	t.Helper()
	p := filepath.Join(dir, "cluster.key")
	if err := os.WriteFile(p, []byte(hexKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

var _ = fmt.Sprint
