package dbusapi

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const policyFile = "../../contrib/dbus/org.ibpath.Daemon1.conf"

type busconfig struct {
	Policies []policy `xml:"policy"`
}

type policy struct {
	Context string `xml:"context,attr"`
	User    string `xml:"user,attr"`
	Group   string `xml:"group,attr"`
	Allow   []rule `xml:"allow"`
	Deny    []rule `xml:"deny"`
}

type rule struct {
	Own           string `xml:"own,attr"`
	SendDest      string `xml:"send_destination,attr"`
	SendInterface string `xml:"send_interface,attr"`
	SendMember    string `xml:"send_member,attr"`
	ReceiveSender string `xml:"receive_sender,attr"`
	ReceiveType   string `xml:"receive_type,attr"`
}

func readPolicy(t *testing.T) busconfig {
	t.Helper()
	b, err := os.ReadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	var c busconfig
	d := xml.NewDecoder(strings.NewReader(string(b)))
	d.Strict = true
	if err := d.Decode(&c); err != nil {
		t.Fatalf("%s is not well-formed: %v", policyFile, err)
	}
	return c
}

// allows reports whether p allows sending member of iface to the daemon
// (a rule for the whole interface, or for the whole destination, also
// counts).
func (p policy) allows(iface, member string) bool {
	for _, r := range p.Allow {
		if r.SendDest == BusName && (r.SendInterface == iface || r.SendInterface == "") &&
			(r.SendMember == member || r.SendMember == "") {
			return true
		}
	}
	return false
}

func TestPolicyFileRules(t *testing.T) {
	c := readPolicy(t)
	var def, root, group *policy
	for i, p := range c.Policies {
		switch {
		case p.Context == "default":
			def = &c.Policies[i]
		case p.User == "root":
			root = &c.Policies[i]
		case p.Group == "ibpath":
			group = &c.Policies[i]
		}
		for _, r := range p.Allow {
			if r.Own != "" && (p.User != "root" || r.Own != BusName) {
				t.Errorf("policy %+v allows owning %q: only root may own %s", p, r.Own, BusName)
			}
			if r.SendDest != "" && r.SendDest != BusName {
				t.Errorf("policy %+v opens %q, not ibpathd's name", p, r.SendDest)
			}
		}
	}
	if def == nil || root == nil || group == nil {
		t.Fatalf("want policies for the default context, user root and group ibpath; have %+v", c.Policies)
	}

	ownedByRoot := false
	for _, r := range root.Allow {
		ownedByRoot = ownedByRoot || r.Own == BusName
	}
	if !ownedByRoot {
		t.Errorf("root may not own %s", BusName)
	}
	deniedOwn := false
	for _, r := range def.Deny {
		deniedOwn = deniedOwn || r.Own == BusName
	}
	if !deniedOwn {
		t.Errorf("the default context does not deny owning %s", BusName)
	}

	for _, m := range []struct{ iface, member string }{
		{Interface, "Status"},
		{ifaceIntrospection, "Introspect"},
		{ifaceProperties, "Get"},
		{ifaceProperties, "GetAll"},
		// The documented choice: everyone may send Arm and Migrate,
		// the daemon decides per QP.
		{Interface, "Arm"},
		{Interface, "Migrate"},
	} {
		if !def.allows(m.iface, m.member) {
			t.Errorf("everyone should be allowed %s.%s", m.iface, m.member)
		}
	}
	if def.allows(ifaceProperties, "Set") {
		t.Error("the default context allows Properties.Set")
	}
	receives := false
	for _, r := range def.Allow {
		receives = receives || (r.ReceiveSender == BusName && r.ReceiveType == "signal")
	}
	if !receives {
		t.Error("the default context does not allow receiving the signals")
	}
	for _, who := range []*policy{root, group} {
		if !who.allows(Interface, "Arm") || !who.allows(Interface, "Migrate") {
			t.Errorf("policy %+v does not allow Arm and Migrate", *who)
		}
	}
}

// TestPolicyFileOnASystemBus runs a dbus-daemon with the system bus's
// default policy and the policy file included: dbus-daemon refuses to
// start on a file it cannot parse. Root then owns the name and anyone may
// call Status; any other user may not own it.
func TestPolicyFileOnASystemBus(t *testing.T) {
	addr := startBus(t, "system.conf")
	f := newFake()
	s, err := Serve(Options{Bus: addr}, f, testLogger(t))
	if os.Geteuid() != 0 {
		if err == nil {
			s.Close()
			t.Fatalf("uid %d owns %s on a bus with the ibpath policy", os.Geteuid(), BusName)
		}
		if !strings.Contains(err.Error(), "AccessDenied") {
			t.Errorf("Serve as uid %d: %v, want AccessDenied", os.Geteuid(), err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Serve as root: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	var js string
	obj := dial(t, addr).Object(BusName, Path)
	if err := obj.Call(Interface+".Status", 0).Store(&js); err != nil {
		t.Errorf("Status: %v", err)
	}
	if _, err := obj.GetProperty(Interface + "." + PropVersion); err != nil {
		t.Errorf("Get Version: %v", err)
	}
}

// TestBrokenPolicyFileIsRefused proves the test above can fail: the same
// system bus configuration with a malformed policy file does not start.
func TestBrokenPolicyFileIsRefused(t *testing.T) {
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon not found on PATH (Debian/Ubuntu package dbus-daemon)")
	}
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join("testdata", "system.conf"))
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(good), `send_member="Status"`, `send_membr="Status"`, 1)
	if broken == string(good) {
		t.Fatal("could not break the policy file")
	}
	if err := os.MkdirAll(filepath.Join(dir, "a", "b", "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "contrib", "dbus"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "b", "c", "system.conf"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "contrib", "dbus", filepath.Base(policyFile)), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if addr, err := runBus(t, bin, filepath.Join(dir, "a", "b", "c", "system.conf")); err == nil {
		t.Fatalf("dbus-daemon started (%s) with a malformed policy file", addr)
	}
}
