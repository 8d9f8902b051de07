package main

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/daemon"
	"github.com/ibpath/ibpath/internal/status"
)

// TestContribConfigIsValid checks that every key of the example
// configuration is a flag, and that the systemd unit starts ibpathd with
// readiness notification.
func TestContribConfigIsValid(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "contrib", "ibpathd.conf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sets, err := daemon.ParseConfigFile(f)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]cli.Flag{}
	for _, fl := range flags() {
		known[fl.Names()[0]] = fl
	}
	if len(sets) == 0 {
		t.Fatal("the example sets nothing")
	}
	for _, s := range sets {
		if known[s.Key] == nil {
			t.Errorf("contrib/ibpathd.conf line %d: %q is not a flag", s.Line, s.Key)
		}
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "contrib", "systemd", "ibpathd.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "ExecStart=/usr/sbin/ibpathd --config /etc/ibpath/ibpathd.conf", "RuntimeDirectory=ibpath", "StateDirectory=ibpath",
		"Documentation=man:ibpathd(8) file:///usr/share/doc/ibpath/DAEMON.md"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
}

// TestUnitSecurityExposure: `systemd-analyze security` rates the shipped
// unit "OK" (an exposure of 4.0 or less; it was 8.9, "EXPOSED"), where a
// systemd-analyze with --offline (systemd 250+) is installed.
func TestUnitSecurityExposure(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	unit, err := filepath.Abs(filepath.Join("..", "..", "contrib", "systemd", "ibpathd.service"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "security", "--offline=true", unit).CombinedOutput()
	if err != nil && strings.Contains(string(out), "offline") {
		t.Skipf("systemd-analyze without --offline: %s", out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	score, perr := strconv.ParseFloat(string(m[1]), 64)
	if perr != nil || score > 4.0 {
		t.Fatalf("the unit's exposure is %s %s, want 4.0 or less:\n%s", m[1], m[2], out)
	}
	t.Logf("exposure %s %s", m[1], m[2])
}

// operatorGroup is the group the packages create for operators
// (packaging/scripts/postinstall.sh), which the shipped configuration and
// the D-Bus policy name.
const operatorGroup = "ibpath"

// TestContribConfigStarts: ibpathd starts with the shipped configuration
// as the packages install it, standalone, and the operators' group it
// names is the one the packages create and the D-Bus policy grants. The
// group is the only thing the package adds: here the test puts the group
// of gid 0 in its place, which every machine has.
func TestContribConfigStarts(t *testing.T) {
	read := func(path ...string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(append([]string{"..", ".."}, path...)...))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	conf := read("contrib", "ibpathd.conf")
	line := "\noperator = @" + operatorGroup + "\n"
	if !strings.Contains(conf, line) {
		t.Fatalf("contrib/ibpathd.conf lacks %q", strings.TrimSpace(line))
	}
	if post := read("packaging", "scripts", "postinstall.sh"); !strings.Contains(post, "groupadd --system "+operatorGroup+"\n") {
		t.Errorf("packaging/scripts/postinstall.sh does not create the group %s", operatorGroup)
	}
	if policy := read("contrib", "dbus", "org.ibpath.Daemon1.conf"); !strings.Contains(policy, `<policy group="`+operatorGroup+`">`) {
		t.Errorf("the D-Bus policy does not name the group %s", operatorGroup)
	}
	root, err := user.LookupGroupId("0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ibpathd.conf")
	if err := os.WriteFile(path, []byte(strings.Replace(conf, line, "\noperator = @"+root.Name+"\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// the later --config wins over startDaemon's empty one; the fabric
	// is the simulated one on a machine with HCAs too
	p := startDaemon(t, "node0", dir, "--config", path, "--fabric", "sim")
	n, err := p.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n.Repl.Mode != status.ReplOff {
		t.Errorf("replication %+v, want off (standalone) as shipped", n.Repl)
	}
}
