package main

import (
	"os"
	"path/filepath"
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
