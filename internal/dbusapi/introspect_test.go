package dbusapi

import (
	"encoding/xml"
	"slices"
	"testing"

	"github.com/godbus/dbus/v5/introspect"
)

func introspectNode(t *testing.T, addr string, dest string, path string) introspect.Node {
	t.Helper()
	var data string
	if err := dial(t, addr).Object(dest, dbusPath(path)).Call(ifaceIntrospection+".Introspect", 0).Store(&data); err != nil {
		t.Fatalf("Introspect %s: %v", path, err)
	}
	var n introspect.Node
	if err := xml.Unmarshal([]byte(data), &n); err != nil {
		t.Fatalf("introspection data of %s is no XML: %v\n%s", path, err, data)
	}
	return n
}

func TestIntrospectionListsMethodsPropertiesAndSignals(t *testing.T) {
	addr := startBus(t, "bus.conf")
	serve(t, addr, newFake(), Options{})
	n := introspectNode(t, addr, BusName, string(Path))

	var iface *introspect.Interface
	var names []string
	for i := range n.Interfaces {
		names = append(names, n.Interfaces[i].Name)
		if n.Interfaces[i].Name == Interface {
			iface = &n.Interfaces[i]
		}
	}
	for _, want := range []string{Interface, ifaceProperties, ifaceIntrospection} {
		if !slices.Contains(names, want) {
			t.Errorf("interfaces %v lack %s", names, want)
		}
	}
	if iface == nil {
		t.FailNow()
	}

	type arg struct{ name, typ, dir string }
	args := func(as []introspect.Arg) []arg {
		var out []arg
		for _, a := range as {
			out = append(out, arg{a.Name, a.Type, a.Direction})
		}
		return out
	}
	wantMethods := map[string][]arg{
		"Status":  {{"json", "s", "out"}},
		"Arm":     {{"device", "s", "in"}, {"qpn", "u", "in"}, {"port", "y", "in"}, {"all", "b", "in"}, {"result_json", "s", "out"}},
		"Migrate": {{"device", "s", "in"}, {"qpn", "u", "in"}, {"port", "y", "in"}, {"all", "b", "in"}, {"dry_run", "b", "in"}, {"result_json", "s", "out"}},
	}
	if len(iface.Methods) != len(wantMethods) {
		t.Errorf("%d methods, want %d", len(iface.Methods), len(wantMethods))
	}
	for _, m := range iface.Methods {
		if !slices.Equal(args(m.Args), wantMethods[m.Name]) {
			t.Errorf("method %s args %v, want %v", m.Name, args(m.Args), wantMethods[m.Name])
		}
	}

	path := []arg{{"device", "s", ""}, {"qpn", "u", ""}, {"from", "s", ""}, {"to", "s", ""}, {"reason", "s", ""}}
	wantSignals := map[string][]arg{
		"PathMigrated":     path,
		"Failover":         path,
		"Switchback":       path,
		"PortStateChanged": {{"device", "s", ""}, {"port", "y", ""}, {"from", "s", ""}, {"to", "s", ""}},
	}
	if len(iface.Signals) != len(wantSignals) {
		t.Errorf("%d signals, want %d", len(iface.Signals), len(wantSignals))
	}
	for _, s := range iface.Signals {
		if !slices.Equal(args(s.Args), wantSignals[s.Name]) {
			t.Errorf("signal %s args %v, want %v", s.Name, args(s.Args), wantSignals[s.Name])
		}
	}

	wantProps := []string{"Node s", "Fabric s", "Version s", "ArmedQPs u", "QPs u",
		"Migrations t", "Failovers t", "Switchbacks t", "Peers u", "SuppressedPorts u", "DegradedPorts u"}
	var props []string
	for _, p := range iface.Properties {
		props = append(props, p.Name+" "+p.Type)
		if p.Access != "read" {
			t.Errorf("property %s access %q, want read", p.Name, p.Access)
		}
	}
	if !slices.Equal(props, wantProps) {
		t.Errorf("properties %v, want %v", props, wantProps)
	}
}

func TestParentsIntrospectTheirChild(t *testing.T) {
	addr := startBus(t, "bus.conf")
	serve(t, addr, newFake(), Options{})
	for path, child := range map[string]string{"/": "org", "/org": "ibpath", "/org/ibpath": "Daemon1"} {
		n := introspectNode(t, addr, BusName, path)
		if len(n.Children) != 1 || n.Children[0].Name != child {
			t.Errorf("%s children %+v, want %s", path, n.Children, child)
		}
	}
}
