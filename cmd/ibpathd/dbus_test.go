package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

// privateSystemBus starts a dbus-daemon with the system bus's default
// policy plus contrib's ibpath policy, and returns its address.
func privateSystemBus(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon not found on PATH (Debian package dbus-daemon; .ci/run installs it)")
	}
	cfg, err := filepath.Abs(filepath.Join("..", "..", "internal", "dbusapi", "testdata", "system.conf"))
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "bus")
	cmd := exec.Command(bin, "--config-file="+cfg, "--address=unix:path="+sock, "--nofork", "--nopidfile", "--print-address")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case a := <-line:
		if a == "" {
			t.Fatalf("dbus-daemon printed no address: %s", stderr.String())
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("dbus-daemon did not start: %s", stderr.String())
	}
	return ""
}

// TestDBusFacadeOfTheDaemon runs ibpathd against a private bus with the
// real bus policy: Status answers, Migrate moves a workload QP, and the
// PathMigrated signal follows.
func TestDBusFacadeOfTheDaemon(t *testing.T) {
	addr := privateSystemBus(t)
	p := startDaemon(t, "node0", t.TempDir(), "--fabric", "sim", "--no-replication", "--sim-qps", "1", "--dbus", addr)
	eventually(t, 10*time.Second, "the workload QP armed", func() bool { return p.status().Totals.ArmedQPs == 1 })
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	obj := conn.Object("org.ibpath.Daemon1", "/org/ibpath/Daemon1")
	eventually(t, 10*time.Second, "the bus name owned", func() bool {
		var js string
		return obj.Call("org.ibpath.Daemon1.Status", 0).Store(&js) == nil
	})
	var js string
	if err := obj.Call("org.ibpath.Daemon1.Status", 0).Store(&js); err != nil {
		t.Fatal(err)
	}
	var n status.Node
	if err := json.Unmarshal([]byte(js), &n); err != nil || n.Node != "node0" || len(n.QPs) != 1 {
		t.Fatalf("Status over D-Bus: %v %+v", err, n)
	}
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.ibpath.Daemon1"), dbus.WithMatchMember("PathMigrated")); err != nil {
		t.Fatal(err)
	}
	sig := make(chan *dbus.Signal, 8)
	conn.Signal(sig)
	q := n.QPs[0]
	var res string
	if err := obj.Call("org.ibpath.Daemon1.Migrate", 0, q.Device, q.QPN, uint8(0), false, false).Store(&res); err != nil {
		t.Fatalf("Migrate over D-Bus: %v", err)
	}
	var ar api.ActionResult
	if err := json.Unmarshal([]byte(res), &ar); err != nil || len(ar.Results) != 1 || !ar.Results[0].OK {
		t.Fatalf("Migrate result %s: %v", res, err)
	}
	for {
		select {
		case s := <-sig:
			if s.Name != "org.ibpath.Daemon1.PathMigrated" {
				continue
			}
			if len(s.Body) < 4 || s.Body[0] != q.Device || s.Body[1] != q.QPN || s.Body[2] != "port 1" || s.Body[3] != "port 2" {
				t.Fatalf("PathMigrated %v", s.Body)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("no PathMigrated signal")
		}
	}
}
