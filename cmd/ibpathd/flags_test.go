package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/status"
)

func TestBadInvocationsFailClearly(t *testing.T) {
	dir := t.TempDir()
	conf := func(body string) string {
		p := filepath.Join(t.TempDir(), "ibpathd.conf")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	loose := filepath.Join(dir, "loose.key")
	if err := os.WriteFile(loose, []byte(testKey), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", dir, "--dbus", "off"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad fabric", []string{"--fabric", "gpu", "--no-replication"}, `fabric "gpu"`},
		{"unknown config key", []string{"--config", conf("socket = /x\ncolour = red\n")}, `line 2: unknown setting "colour"`},
		{"config line without =", []string{"--config", conf("socket /x\n")}, "line 1"},
		{"missing named config", []string{"--config", filepath.Join(dir, "nope.conf")}, "nope.conf"},
		{"bad config value", []string{"--config", conf("sim-qps = many\n")}, "sim-qps"},
		{"no cluster key", []string{"--fabric", "sim", "--gossip-bind", "127.0.0.1:0", "--join", "127.0.0.1:1"}, "needs a cluster key"},
		{"key readable by others", []string{"--fabric", "sim", "--gossip-bind", "127.0.0.1:0", "--cluster-key-file", loose}, "chmod 600"},
		{"short key", []string{"--fabric", "sim", "--gossip-bind", "127.0.0.1:0", "--cluster-key-file", short}, "want 16, 24 or 32 bytes"},
		{"bad gossip address", []string{"--fabric", "sim", "--gossip-bind", "nowhere", "--insecure"}, `gossip bind "nowhere"`},
		{"unknown operator", []string{"--fabric", "sim", "--no-replication", "--operator", "no-such-user-ibpath"}, "no-such-user-ibpath"},
		{"bad log level", []string{"--log-level", "loud"}, "--log-level"},
		{"stray argument", []string{"start"}, `unexpected argument "start"`},
		{"sim index outside", []string{"--fabric", "sim", "--no-replication", "--sim-index", "5"}, "node index 5"},
		{"bad damping", []string{"--fabric", "sim", "--no-replication", "--damping", "half-life=soon"}, `damping "half-life=soon": half-life`},
		{"bad health", []string{"--fabric", "sim", "--no-replication", "--health", "seq-error-ratio=5"}, `health "seq-error-ratio=5": seq-error-ratio`},
		{"negative counter poll", []string{"--fabric", "sim", "--no-replication", "--counter-poll", "-1s"}, "counter poll -1s"},
		{"damping reuse above suppress", []string{"--fabric", "sim", "--no-replication", "--damping", "reuse=2000"}, "need 0 < reuse < suppress"},
	} {
		out, err := runOnce(t, append(append([]string{}, base...), tc.args...)...)
		if err == nil {
			t.Errorf("%s: ibpathd started:\n%s", tc.name, out)
			continue
		}
		if !strings.Contains(out, tc.want) || !strings.HasPrefix(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), "ibpathd: ") {
			t.Errorf("%s: output lacks %q or the ibpathd: prefix:\n%s", tc.name, tc.want, out)
		}
	}
}

func TestConfigFileAndFlags(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "ibpathd.conf")
	if err := os.WriteFile(conf, []byte("# test\nfabric = sim\nsim-qps = 3\nno-replication = true\nnode = from-file\ndamping = half-life=10s,suppress=2000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// startDaemon names its own (empty) config; a later --config wins.
	p := startDaemon(t, "from-flag", dir, "--config", conf, "--sim-qps", "1")
	n := p.status()
	if n.Node != "from-flag" || len(n.QPs) != 1 || n.Repl.Mode != status.ReplOff || n.Fabric.Kind != status.FabricSim {
		t.Fatalf("flags must win over the file, the file over defaults: node %q, %d QPs, repl %+v, fabric %+v", n.Node, len(n.QPs), n.Repl, n.Fabric)
	}
	if n.Damping != "half-life=10s,suppress=2000,reuse=750,penalty=1000,max-suppress=5m0s" {
		t.Fatalf("damping from the file: %q", n.Damping)
	}
	if n.Health != "window=10s,link-errors=3,min-seq-errors=20,seq-error-ratio=0.01,clear=30s" {
		t.Fatalf("port health by default: %q, want the default rule", n.Health)
	}
}

func TestReadinessAndCleanStop(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	p := startDaemon(t, "n", dir, "--fabric", "sim", "--no-replication")
	buf := make([]byte, 512)
	ln.SetReadDeadline(time.Now().Add(10 * time.Second))
	k, err := ln.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message: %v", err)
	}
	mustContain(t, "the readiness message", string(buf[:k]), "READY=1", "STATUS=serving on the sim fabric")
	p.stop()
	ln.SetReadDeadline(time.Now().Add(10 * time.Second))
	k, err = ln.Read(buf)
	if err != nil || string(buf[:k]) != "STOPPING=1" {
		t.Fatalf("stop notification %q %v", buf[:k], err)
	}
	if _, err := os.Stat(filepath.Join(dir, "store.db")); err != nil {
		t.Fatalf("store file: %v", err)
	}
}

func TestStandaloneByDefault(t *testing.T) {
	p := startDaemon(t, "solo", t.TempDir(), "--fabric", "sim")
	r := p.status().Repl
	if r.Mode != status.ReplOff || !strings.Contains(r.Reason, "standalone") {
		t.Fatalf("replication %+v: want off, saying the node is standalone", r)
	}
	mustContain(t, "the log", p.out.String(), "replication off", "--cluster-key-file")
}
