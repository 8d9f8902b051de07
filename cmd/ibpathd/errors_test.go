package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondDaemonOnStateDir: a second ibpathd on a state directory
// another one holds says which ibpathd holds it and what to do, instead
// of the store's timeout.
func TestSecondDaemonOnStateDir(t *testing.T) {
	dir := t.TempDir()
	first := startDaemon(t, "first", dir, "--fabric", "sim", "--no-replication")
	out, err := runOnce(t, "--socket", filepath.Join(dir, "second.sock"), "--state-dir", dir, "--dbus", "off",
		"--fabric", "sim", "--no-replication", "--config", filepath.Join(dir, "none.conf"))
	if err == nil {
		t.Fatalf("a second ibpathd started on the same state directory:\n%s", out)
	}
	mustContain(t, "the second ibpathd's error", out,
		fmt.Sprintf("ibpathd: store %s is in use: another ibpathd (pid %d) holds its lock", filepath.Join(dir, "store.db"), first.cmd.Process.Pid),
		"stop it first, or give this ibpathd a state directory of its own (--state-dir, now "+dir+")")
	if strings.Contains(out, "store: store:") || strings.Contains(out, ": timeout") {
		t.Fatalf("the error repeats the store's own words:\n%s", out)
	}
}

// TestUnprivilegedDaemonSaysWhatToDo: an ibpathd that may not write its
// state directory or its socket's names the path and says to give it
// paths it may write (--state-dir, --socket) or to run it as root. As
// root, the test runs ibpathd as nobody.
func TestUnprivilegedDaemonSaysWhatToDo(t *testing.T) {
	base, err := os.MkdirTemp("", "ibpathd-perm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	closed := filepath.Join(base, "closed") // nobody but root may write here
	open := filepath.Join(base, "open")
	for d, mode := range map[string]os.FileMode{base: 0o755, closed: 0o555, open: 0o777} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "none.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := os.Args[0]
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// nobody must reach and run the binary: a copy beside the paths
		bin = filepath.Join(base, "ibpathd")
		copyFile(t, os.Args[0], bin, 0o755)
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	for _, c := range []struct {
		name          string
		state, socket string
		want          []string
	}{
		{"state directory", filepath.Join(closed, "state"), filepath.Join(open, "s.sock"),
			[]string{"mkdir " + filepath.Join(closed, "state") + ": permission denied", "run ibpathd as root", "--state-dir DIR (and --socket PATH)"}},
		{"socket", filepath.Join(open, "state"), filepath.Join(closed, "run", "ibpathd.sock"),
			[]string{"mkdir " + filepath.Join(closed, "run") + ": permission denied", "run ibpathd as root", "--socket PATH (and --state-dir DIR)"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, bin, "--state-dir", c.state, "--socket", c.socket, "--dbus", "off", "--fabric", "sim",
			"--no-replication", "--config", filepath.Join(base, "none.conf"))
		cmd.Env = append(os.Environ(), asMainEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		b, err := cmd.CombinedOutput()
		cancel()
		out := string(b)
		if err == nil {
			t.Fatalf("%s: ibpathd started without the right to write it:\n%s", c.name, out)
		}
		mustContain(t, c.name+": the error", out, c.want...)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
