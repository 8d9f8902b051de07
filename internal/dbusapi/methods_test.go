package dbusapi

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

func TestStatusReturnsNodeJSON(t *testing.T) {
	addr := startBus(t, "bus.conf")
	f := newFake()
	serve(t, addr, f, Options{})
	obj := dial(t, addr).Object(BusName, Path)

	var js string
	if err := obj.Call(Interface+".Status", 0).Store(&js); err != nil {
		t.Fatalf("Status: %v", err)
	}
	var n status.Node
	if err := json.Unmarshal([]byte(js), &n); err != nil {
		t.Fatalf("Status returned no status.Node: %v\n%s", err, js)
	}
	want := f.Status()
	if n.Node != want.Node || n.Version != want.Version || len(n.QPs) != len(want.QPs) || n.Totals != want.Totals {
		t.Errorf("Status = %+v, want %+v", n, want)
	}
}

func TestArmAndMigrateReachTheBackendWithTheCaller(t *testing.T) {
	addr := startBus(t, "bus.conf")
	f := newFake()
	f.setResult(api.ActionResult{Results: []api.QPResult{
		{Device: "mlx5_0", QPN: 0x11, OwnerPID: 42, OK: true, Before: status.QPState{APM: "armed", Primary: status.Path{Device: "mlx5_0", Port: 1}},
			After: status.QPState{APM: "rearm", Primary: status.Path{Device: "mlx5_0", Port: 2}}},
	}}, nil)
	serve(t, addr, f, Options{})
	obj := dial(t, addr).Object(BusName, Path)

	var js string
	if err := obj.Call(Interface+".Arm", 0, "mlx5_0", uint32(0x11), uint8(0), false).Store(&js); err != nil {
		t.Fatalf("Arm: %v", err)
	}
	var r api.ActionResult
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("Arm returned no ActionResult: %v\n%s", err, js)
	}
	if r.Action != "arm" || len(r.Results) != 1 || r.Results[0].After != (status.QPState{APM: "rearm", Primary: status.Path{Device: "mlx5_0", Port: 2}}) {
		t.Errorf("Arm result = %+v", r)
	}
	if err := obj.Call(Interface+".Migrate", 0, "mlx5_0", uint32(0), uint8(2), false, true).Store(&js); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("Migrate returned no ActionResult: %v\n%s", err, js)
	}
	if r.Action != "migrate" || !r.DryRun || r.Target.Port != 2 {
		t.Errorf("Migrate result = %+v", r)
	}
	if err := obj.Call(Interface+".Migrate", 0, "", uint32(0), uint8(0), true, false).Store(&js); err != nil {
		t.Fatalf("Migrate all: %v", err)
	}

	calls := f.recorded()
	want := []fakeCall{
		{action: "arm", req: api.ActionRequest{Target: api.Target{Device: "mlx5_0", QPN: 0x11}}},
		{action: "migrate", req: api.ActionRequest{Target: api.Target{Device: "mlx5_0", Port: 2}, DryRun: true}},
		{action: "migrate", req: api.ActionRequest{Target: api.Target{All: true}}},
	}
	if len(calls) != len(want) {
		t.Fatalf("backend got %d calls, want %d: %+v", len(calls), len(want), calls)
	}
	for i, c := range calls {
		if c.action != want[i].action || c.req != want[i].req {
			t.Errorf("call %d = %s %+v, want %s %+v", i, c.action, c.req, want[i].action, want[i].req)
		}
		// The client connection is this process: the bus must report
		// its credentials.
		if c.caller.UID != uint32(os.Getuid()) || c.caller.PID != os.Getpid() || c.caller.GID != uint32(os.Getegid()) {
			t.Errorf("call %d caller = %+v, want uid %d pid %d gid %d", i, c.caller, os.Getuid(), os.Getpid(), os.Getegid())
		}
	}
}

func TestBadTargetIsRefusedBeforeTheBackend(t *testing.T) {
	addr := startBus(t, "bus.conf")
	f := newFake()
	serve(t, addr, f, Options{})
	obj := dial(t, addr).Object(BusName, Path)

	for _, tc := range []struct {
		method string
		args   []any
	}{
		{"Arm", []any{"", uint32(0), uint8(0), false}},                 // nothing
		{"Arm", []any{"mlx5_0", uint32(0x11), uint8(1), false}},        // QPN and port
		{"Migrate", []any{"mlx5_0", uint32(0), uint8(0), true, false}}, // all and a device
		{"Migrate", []any{"mlx5_0", uint32(0), uint8(0), false, true}}, // device alone
	} {
		err := obj.Call(Interface+"."+tc.method, 0, tc.args...).Err
		de, ok := dbusError(err)
		if !ok || de.Name != ErrBadRequest {
			t.Errorf("%s%v: error %v, want %s", tc.method, tc.args, err, ErrBadRequest)
			continue
		}
		if len(de.Body) != 1 || de.Body[0] == "" {
			t.Errorf("%s%v: error body %v, want the message", tc.method, tc.args, de.Body)
		}
	}
	if n := len(f.recorded()); n != 0 {
		t.Errorf("backend called %d times for invalid targets", n)
	}
}

func TestBackendErrorsBecomeDBusErrorNames(t *testing.T) {
	addr := startBus(t, "bus.conf")
	f := newFake()
	serve(t, addr, f, Options{})
	obj := dial(t, addr).Object(BusName, Path)

	codes := map[string]string{
		api.CodeBadRequest:   "org.ibpath.Error.BadRequest",
		api.CodeForbidden:    "org.ibpath.Error.Forbidden",
		api.CodeNotFound:     "org.ibpath.Error.NotFound",
		api.CodeConflict:     "org.ibpath.Error.Conflict",
		api.CodeOwnerGone:    "org.ibpath.Error.OwnerGone",
		api.CodeOwnerTimeout: "org.ibpath.Error.OwnerTimeout",
		api.CodeInternal:     "org.ibpath.Error.Internal",
	}
	for code, name := range codes {
		msg := "refused: " + code
		f.setResult(api.ActionResult{}, &api.Error{Code: code, Message: msg})
		for _, call := range []struct {
			method string
			args   []any
		}{
			{"Arm", []any{"mlx5_0", uint32(0x11), uint8(0), false}},
			{"Migrate", []any{"mlx5_0", uint32(0x11), uint8(0), false, false}},
		} {
			err := obj.Call(Interface+"."+call.method, 0, call.args...).Err
			de, ok := dbusError(err)
			if !ok || de.Name != name {
				t.Errorf("%s with backend code %s: error %v, want %s", call.method, code, err, name)
				continue
			}
			if len(de.Body) != 1 || de.Body[0] != msg {
				t.Errorf("%s with backend code %s: body %v, want [%q]", call.method, code, de.Body, msg)
			}
		}
	}
}
