package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/daemon"
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
	for _, want := range []string{"Type=notify", "ExecStart=/usr/sbin/ibpathd --config /etc/ibpath/ibpathd.conf", "RuntimeDirectory=ibpath", "StateDirectory=ibpath"} {
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
