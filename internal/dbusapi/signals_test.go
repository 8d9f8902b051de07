package dbusapi

import (
	"reflect"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/ibpath/ibpath/internal/status"
)

func TestEventsBecomeSignals(t *testing.T) {
	addr := startBus(t, "bus.conf")
	f := newFake()
	serve(t, addr, f, Options{Refresh: time.Hour})
	conn := dial(t, addr)
	if err := conn.AddMatchSignal(dbus.WithMatchSender(BusName), dbus.WithMatchObjectPath(Path),
		dbus.WithMatchInterface(Interface)); err != nil {
		t.Fatalf("AddMatchSignal: %v", err)
	}
	ch := make(chan *dbus.Signal, 16)
	conn.Signal(ch)

	now := time.Now()
	cases := []struct {
		ev   status.Event
		body []any
	}{
		{status.Event{Kind: status.EvPathMigrated, At: now, Device: "mlx5_0", QPN: 0x11, From: "port 1", To: "port 2", Reason: "PORT_ERR"},
			[]any{"mlx5_0", uint32(0x11), "port 1", "port 2", "PORT_ERR"}},
		{status.Event{Kind: status.EvFailover, At: now, Device: "mlx5_0", QPN: 0x12, From: "mlx5_0 0x12", To: "mlx5_1 0x1c3", Reason: "retry exceeded"},
			[]any{"mlx5_0", uint32(0x12), "mlx5_0 0x12", "mlx5_1 0x1c3", "retry exceeded"}},
		{status.Event{Kind: status.EvSwitchback, At: now, Device: "mlx5_0", QPN: 0x12, From: "mlx5_1 0x1c3", To: "mlx5_0 0x12", Reason: "default path recovered"},
			[]any{"mlx5_0", uint32(0x12), "mlx5_1 0x1c3", "mlx5_0 0x12", "default path recovered"}},
		{status.Event{Kind: status.EvPortStateChanged, At: now, Device: "mlx5_1", Port: 2, From: "ACTIVE", To: "DOWN"},
			[]any{"mlx5_1", uint8(2), "ACTIVE", "DOWN"}},
	}
	// An event of a kind without a signal is dropped, not sent.
	f.emit(status.Event{Kind: "SomethingElse", Device: "mlx5_0"})
	for _, c := range cases {
		f.emit(c.ev)
	}
	// Signals keep the order of the events, and the first one of the
	// interface must be PathMigrated (the unknown kind sent nothing).
	for _, c := range cases {
		s := nextSignal(t, ch, Interface+".")
		if s.Name != Interface+"."+c.ev.Kind {
			t.Fatalf("signal %s, want %s", s.Name, c.ev.Kind)
		}
		if s.Path != Path {
			t.Errorf("%s on path %s, want %s", c.ev.Kind, s.Path, Path)
		}
		if !reflect.DeepEqual(s.Body, c.body) {
			t.Errorf("%s body = %#v, want %#v", c.ev.Kind, s.Body, c.body)
		}
	}
}
