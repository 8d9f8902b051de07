package dbusapi

import (
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/ibpath/ibpath/internal/status"
)

func TestGetAndGetAllProperties(t *testing.T) {
	addr := startBus(t, "bus.conf")
	f := newFake()
	serve(t, addr, f, Options{})
	obj := dial(t, addr).Object(BusName, Path)

	want := map[string]any{
		PropNode:            "node1",
		PropFabric:          status.FabricSim,
		PropVersion:         "1.2.3",
		PropArmedQPs:        uint32(2),
		PropQPs:             uint32(2),
		PropMigrations:      uint64(3),
		PropFailovers:       uint64(1),
		PropSwitchbacks:     uint64(1),
		PropPeers:           uint32(1),
		PropSuppressedPorts: uint32(1),
		PropDegradedPorts:   uint32(0),
	}
	var all map[string]dbus.Variant
	if err := obj.Call(ifaceProperties+".GetAll", 0, Interface).Store(&all); err != nil {
		t.Fatalf("GetAll: %v", err)
	}
	if len(all) != len(want) {
		t.Errorf("GetAll returned %d properties, want %d: %v", len(all), len(want), all)
	}
	for name, v := range want {
		got, ok := all[name]
		if !ok || got.Value() != v {
			t.Errorf("GetAll[%s] = %v, want %#v (%T)", name, got, v, v)
		}
		one, err := obj.GetProperty(Interface + "." + name)
		if err != nil {
			t.Errorf("Get %s: %v", name, err)
		} else if one.Value() != v {
			t.Errorf("Get %s = %v, want %#v (%T)", name, one, v, v)
		}
	}
	err := obj.SetProperty(Interface+"."+PropNode, dbus.MakeVariant("other"))
	if de, ok := dbusError(err); !ok || de.Name != "org.freedesktop.DBus.Properties.Error.ReadOnly" {
		t.Errorf("Set Node: error %v, want ReadOnly", err)
	}
}

// changes subscribes to PropertiesChanged of the facade.
func changes(t *testing.T, conn *dbus.Conn) <-chan *dbus.Signal {
	t.Helper()
	if err := conn.AddMatchSignal(dbus.WithMatchSender(BusName), dbus.WithMatchObjectPath(Path),
		dbus.WithMatchInterface(ifaceProperties), dbus.WithMatchMember("PropertiesChanged")); err != nil {
		t.Fatalf("AddMatchSignal: %v", err)
	}
	ch := make(chan *dbus.Signal, 64)
	conn.Signal(ch)
	return ch
}

// changedProps collects the properties changed by PropertiesChanged
// signals on ch until want are all seen or the time is up.
func changedProps(t *testing.T, ch <-chan *dbus.Signal, want map[string]any, within time.Duration) map[string]any {
	t.Helper()
	got := map[string]any{}
	timeout := time.After(within)
	for {
		done := true
		for k, v := range want {
			if got[k] != v {
				done = false
			}
		}
		if done {
			return got
		}
		select {
		case s := <-ch:
			if s.Name != ifaceProperties+".PropertiesChanged" {
				continue
			}
			if len(s.Body) != 3 || s.Body[0] != Interface {
				t.Fatalf("PropertiesChanged body %v", s.Body)
			}
			for k, v := range s.Body[1].(map[string]dbus.Variant) {
				got[k] = v.Value()
			}
		case <-timeout:
			t.Fatalf("PropertiesChanged: got %v within %v, want %v", got, within, want)
		}
	}
}

func TestEventRefreshesChangedPropertiesOnly(t *testing.T) {
	addr := startBus(t, "bus.conf")
	f := newFake()
	// No tick during the test: the event alone must refresh.
	serve(t, addr, f, Options{Refresh: time.Hour})
	conn := dial(t, addr)
	ch := changes(t, conn)

	f.update(func(n *status.Node) {
		n.Totals.Migrations = 4
		n.Totals.ArmedQPs = 1
	})
	f.emit(status.Event{Kind: status.EvPathMigrated, Device: "mlx5_0", QPN: 0x11, From: "port 1", To: "port 2"})
	want := map[string]any{PropMigrations: uint64(4), PropArmedQPs: uint32(1)}
	got := changedProps(t, ch, want, 3*time.Second)

	// Nothing else changed, so nothing else may be announced: a
	// further change proves the earlier signals were all delivered.
	f.update(func(n *status.Node) { n.Totals.Failovers = 2 })
	f.emit(status.Event{Kind: status.EvFailover, Device: "mlx5_0", QPN: 0x11})
	got2 := changedProps(t, ch, map[string]any{PropFailovers: uint64(2)}, 3*time.Second)
	for k := range got2 {
		got[k] = got2[k]
	}
	if len(got) != 3 {
		t.Errorf("PropertiesChanged announced %v, want only Migrations, ArmedQPs, Failovers", got)
	}
	v, err := conn.Object(BusName, Path).GetProperty(Interface + "." + PropMigrations)
	if err != nil || v.Value() != uint64(4) {
		t.Errorf("Get Migrations after the event = %v, %v; want 4", v, err)
	}
}

func TestTickerRefreshesProperties(t *testing.T) {
	addr := startBus(t, "bus.conf")
	f := newFake()
	serve(t, addr, f, Options{Refresh: 20 * time.Millisecond})
	ch := changes(t, dial(t, addr))

	f.update(func(n *status.Node) {
		n.Peers = append(n.Peers, status.Peer{Name: "node3"})
		n.Node = "renamed"
		n.Totals.SuppressedPorts = 2
	})
	changedProps(t, ch, map[string]any{PropPeers: uint32(2), PropNode: "renamed", PropSuppressedPorts: uint32(2)}, 3*time.Second)
}
