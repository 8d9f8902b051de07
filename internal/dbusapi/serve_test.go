package dbusapi

import (
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

func nameHasOwner(t *testing.T, conn *dbus.Conn, name string) bool {
	t.Helper()
	var has bool
	if err := conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, name).Store(&has); err != nil {
		t.Fatalf("NameHasOwner: %v", err)
	}
	return has
}

func TestNameIsRequestedOnlyAfterExport(t *testing.T) {
	addr := startBus(t, "bus.conf")
	client := dial(t, addr)
	hooked := false
	opts := Options{beforeRequestName: func(conn *dbus.Conn) {
		hooked = true
		if nameHasOwner(t, client, BusName) {
			t.Errorf("%s is owned before Serve requested it", BusName)
		}
		// Everything must already answer on the unique name.
		obj := client.Object(conn.Names()[0], Path)
		var data string
		if err := obj.Call(ifaceIntrospection+".Introspect", 0).Store(&data); err != nil || !strings.Contains(data, `name="PortStateChanged"`) {
			t.Errorf("Introspect before RequestName: %v\n%s", err, data)
		}
		if v, err := obj.GetProperty(Interface + "." + PropNode); err != nil {
			t.Errorf("Get Node before RequestName: %v", err)
		} else if v.Value() != "node1" {
			t.Errorf("Get Node before RequestName = %v, want node1", v.Value())
		}
		var js string
		if err := obj.Call(Interface+".Status", 0).Store(&js); err != nil {
			t.Errorf("Status before RequestName: %v", err)
		}
	}}
	s := serve(t, addr, newFake(), opts)
	if !hooked {
		t.Fatal("Serve never reached RequestName")
	}
	if !nameHasOwner(t, client, BusName) {
		t.Fatalf("%s not owned after Serve", BusName)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if nameHasOwner(t, client, BusName) {
		t.Errorf("%s still owned after Close", BusName)
	}
}

func TestServeFailsWhenTheNameIsTaken(t *testing.T) {
	addr := startBus(t, "bus.conf")
	other := dial(t, addr)
	if reply, err := other.RequestName(BusName, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName by the other connection: %v %v", reply, err)
	}
	f := newFake()
	s, err := Serve(Options{Bus: addr}, f, testLogger(t))
	if err == nil {
		s.Close()
		t.Fatal("Serve succeeded although another connection owns the name")
	}
	if !strings.Contains(err.Error(), "owned by another connection") || !strings.Contains(err.Error(), BusName) {
		t.Errorf("Serve error %q does not say the name is taken", err)
	}
	if n := f.subscribers(); n != 0 {
		t.Errorf("failed Serve left %d subscriptions", n)
	}
	// The other owner keeps the name and no queue entry waits for it.
	var queue []string
	if err := other.BusObject().Call("org.freedesktop.DBus.ListQueuedOwners", 0, BusName).Store(&queue); err != nil {
		t.Fatalf("ListQueuedOwners: %v", err)
	}
	if len(queue) != 1 || queue[0] != other.Names()[0] {
		t.Errorf("queued owners %v, want only %s", queue, other.Names()[0])
	}
}

func TestCloseStopsSignalsAndUnsubscribes(t *testing.T) {
	addr := startBus(t, "bus.conf")
	f := newFake()
	s := serve(t, addr, f, Options{Refresh: 10 * time.Millisecond})
	if n := f.subscribers(); n != 1 {
		t.Fatalf("%d subscriptions after Serve, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := f.subscribers(); n != 0 {
		t.Errorf("%d subscriptions after Close, want 0", n)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestServeReportsAnUnreachableBus(t *testing.T) {
	_, err := Serve(Options{Bus: "unix:path=" + t.TempDir() + "/none"}, newFake(), testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "connect to the") {
		t.Fatalf("Serve on a missing bus: %v", err)
	}
}
