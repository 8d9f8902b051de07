package shim

import (
	"log/slog"
	"testing"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/verbs/sim"
)

// TestBackupChoiceFollowsViews: layer 2's backup device is chosen in
// rail order from the rail after the application's (wrapping around),
// with ibpathd's views of the ports (port_view commands) and the drains:
// the least congested calm device, the first in that order among equals;
// a port ibpathd says is suppressed, or a drained one, is not calm; with
// none calm, the first with an ACTIVE port. An empty view forgets the
// last one.
func TestBackupChoiceFollowsViews(t *testing.T) {
	f, err := sim.NewRailFabric(sim.RailSpec{Config: sim.Config{Seed: 5}, Hosts: 2, HCAsPerHost: 4, PortsPerHCA: 1})
	if err != nil {
		t.Fatal(err)
	}
	view := func(dev string, v ownerproto.PortView) ownerproto.Command {
		return ownerproto.Command{Op: ownerproto.OpPortView, Device: dev, Port: 1, View: &v}
	}
	drain := func(dev string) ownerproto.Command {
		return ownerproto.Command{Op: ownerproto.OpDrain, Device: dev, Port: 1}
	}
	busy := func(n float64) ownerproto.PortView { return ownerproto.PortView{Congestion: n} }
	for _, c := range []struct {
		name string
		cmds []ownerproto.Command
		want string
		said string // a log line the choice must write
		dev  string // the application's device, mlx5_0 if not set
	}{
		{"no view", nil, "mlx5_1", "", ""},
		{"the next rail", nil, "mlx5_3", "", "mlx5_2"},
		{"the next rail, wrapping around", nil, "mlx5_0", "", "mlx5_3"},
		{"the next calm rail, wrapping around", []ownerproto.Command{drain("mlx5_0")}, "mlx5_1", "", "mlx5_3"},
		{"the least congested after the rail", []ownerproto.Command{view("mlx5_3", busy(8)), view("mlx5_0", busy(4)), view("mlx5_1", busy(4))}, "mlx5_0", "backup chosen for congestion", "mlx5_2"},
		{"the first congested", []ownerproto.Command{view("mlx5_1", busy(512))}, "mlx5_2", "backup chosen for congestion", ""},
		{"the least congested", []ownerproto.Command{view("mlx5_1", busy(512)), view("mlx5_2", busy(1024)), view("mlx5_3", busy(2048))}, "mlx5_1", "", ""},
		{"the idle one", []ownerproto.Command{view("mlx5_1", busy(4)), view("mlx5_2", busy(2))}, "mlx5_3", "backup chosen for congestion", ""},
		{"a view forgotten", []ownerproto.Command{view("mlx5_1", busy(512)), view("mlx5_1", ownerproto.PortView{})}, "mlx5_1", "", ""},
		{"suppressed by ibpathd", []ownerproto.Command{view("mlx5_1", ownerproto.PortView{Suppressed: true})}, "mlx5_2", "", ""},
		{"drained", []ownerproto.Command{drain("mlx5_1")}, "mlx5_2", "", ""},
		{"a calm one congested before quiet ones suppressed", []ownerproto.Command{view("mlx5_1", ownerproto.PortView{Suppressed: true}), view("mlx5_2", busy(64)),
			view("mlx5_3", ownerproto.PortView{Suppressed: true})}, "mlx5_2", "", ""},
		{"none calm", []ownerproto.Command{view("mlx5_1", ownerproto.PortView{Suppressed: true}), drain("mlx5_2"), view("mlx5_3", ownerproto.PortView{Suppressed: true, Congestion: 1})},
			"mlx5_1", "every other device's ACTIVE ports are drained or suppressed", ""},
	} {
		r, lb := node0Runtime(t, f, nil)
		for _, cmd := range c.cmds {
			if res := r.Command(cmd); !res.OK {
				t.Fatalf("%s: %+v: %+v", c.name, cmd, res)
			}
		}
		dev := c.dev
		if dev == "" {
			dev = "mlx5_0"
		}
		name, ctx, err := r.chooseBackup(dev)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ctx.Close()
		if name != c.want {
			t.Errorf("%s: backup %s, want %s\n%s", c.name, name, c.want, lb)
		}
		if c.said != "" && (&l2host{log: lb}).logLine(c.said) == "" {
			t.Errorf("%s: no log line %q:\n%s", c.name, c.said, lb)
		}
	}
	cfg, _ := FromEnv(env(nil))
	r := NewRuntime(cfg, slog.New(slog.DiscardHandler))
	defer r.Close()
	if res := r.Command(ownerproto.Command{Op: ownerproto.OpPortView, Device: "mlx5_1", Port: 1}); res.OK || res.Error == "" {
		t.Fatalf("a port view without its view: %+v", res)
	}
}
