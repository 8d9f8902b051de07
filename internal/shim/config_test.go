package shim

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/version"
	"github.com/ibpath/ibpath/pathsel"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil || c.Disabled || !c.APM || !c.Record || c.Backup != "auto" || c.Socket != "/run/ibpath/ibpathd.sock" || c.Log != slog.LevelWarn {
		t.Fatalf("defaults %+v %v", c, err)
	}
	c, err = FromEnv(env(map[string]string{EnvDisable: "1", EnvAPM: "off", EnvRecord: "no", EnvBackup: "mlx5_1", EnvSocket: "off", EnvLog: "debug", EnvSingle: "1", EnvPoller: "on"}))
	if err != nil || !c.Disabled || c.APM || c.Record || c.Backup != "mlx5_1" || c.Socket != "off" || c.Log != slog.LevelDebug || !c.SinglePoster || !c.SinglePoller {
		t.Fatalf("set %+v %v", c, err)
	}
	for k, v := range map[string]string{EnvDisable: "2", EnvAPM: "maybe", EnvRecord: "x", EnvLog: "loud", EnvSingle: "many", EnvPoller: "2"} {
		if _, err := FromEnv(env(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v, want an error naming it", k, v, err)
		}
	}
	if b := (Config{Disabled: true}).Banner(7); !strings.Contains(b, "pid 7") || !strings.Contains(b, "disabled") {
		t.Errorf("banner %q", b)
	}
	if b := (Config{Record: true, Socket: "off", Backup: "auto"}).Banner(7); !strings.Contains(b, "layer 2 (cross-NIC) failover on") {
		t.Errorf("banner %q", b)
	}
	for _, k := range []struct {
		c    Config
		want string
	}{
		{Config{Record: true, SinglePoster: true}, "shadow rings on (single poster per QP);"},
		{Config{Record: true, SinglePoller: true}, "shadow rings on (single poller per CQ);"},
		{Config{Record: true, SinglePoster: true, SinglePoller: true}, "shadow rings on (single poster per QP, single poller per CQ);"},
		{Config{Record: true}, "shadow rings on;"},
	} {
		if b := k.c.Banner(7); !strings.Contains(b, k.want) {
			t.Errorf("%+v: banner %q, want %q", k.c, b, k.want)
		}
	}
	if b := (Config{APM: true, Socket: "off", Backup: "auto"}).Banner(7); !strings.Contains(b, "layer 1 (APM) on") || !strings.Contains(b, "shadow rings off") || !strings.Contains(b, "failover off") || !strings.Contains(b, "ibpathd not used") {
		t.Errorf("banner %q", b)
	}
}

// TestFromEnvLayer2Switches checks the on/off knobs of layer 2: each has
// its default, reads the usual spellings, refuses others naming the
// variable, and shows in the banner.
func TestFromEnvLayer2Switches(t *testing.T) {
	for _, k := range []struct {
		name   string
		get    func(Config) bool
		def    bool
		banner string // as the banner shows it, without " on" / " off"
	}{
		{EnvExpress, func(c Config) bool { return c.Express }, true, "express lane"},
		{EnvChannels, func(c Config) bool { return c.Channels }, true, "completion channels"},
		{EnvSwitch, func(c Config) bool { return c.SwitchBack }, false, "switch back"},
	} {
		for v, want := range map[string]bool{"": k.def, "on": true, "1": true, "off": false, "0": false, "OFF": false} {
			c, err := FromEnv(env(map[string]string{k.name: v}))
			if err != nil || k.get(c) != want {
				t.Errorf("%s=%q: %v, %v; want %v", k.name, v, k.get(c), err, want)
			}
			if b := c.Banner(7); !strings.Contains(b, k.banner+map[bool]string{true: " on", false: " off"}[want]) {
				t.Errorf("%s=%q: banner %q", k.name, v, b)
			}
		}
		if _, err := FromEnv(env(map[string]string{k.name: "maybe"})); err == nil || !strings.Contains(err.Error(), k.name) {
			t.Errorf("%s=maybe: %v, want an error naming it", k.name, err)
		}
	}
	// Without the shadow rings there is no failover, hence none of them.
	if b := (Config{Express: true, SwitchBack: true, Channels: true, Socket: "off", Backup: "auto"}).Banner(7); !strings.Contains(b, "failover off (switch back off, express lane off, completion channels off)") {
		t.Errorf("banner %q", b)
	}
}

// TestFromEnvCQHeadroom: IBPATH_CQ_HEADROOM defaults to 64 with the switch
// back on and to 0 without it, takes a count, and refuses what is not one,
// and, with the switch back on, less than one QP's share.
func TestFromEnvCQHeadroom(t *testing.T) {
	for _, c := range []struct {
		sw, v string
		want  int
	}{{"", "", 0}, {"on", "", defaultCQHeadroom}, {"on", "4", 4}, {"on", "1000", 1000}, {"off", "0", 0}, {"off", "8", 8}} {
		got, err := FromEnv(env(map[string]string{EnvSwitch: c.sw, EnvHeadroom: c.v}))
		if err != nil || got.CQHeadroom != c.want {
			t.Errorf("%s=%q %s=%q: %d, %v; want %d", EnvSwitch, c.sw, EnvHeadroom, c.v, got.CQHeadroom, err, c.want)
		}
	}
	for _, c := range []struct{ sw, v, say string }{
		{"on", "3", "at least 4"}, {"on", "0", "at least 4"}, {"", "-1", "from 0 to"}, {"", "many", "from 0 to"}, {"on", "70000", "from 0 to"},
	} {
		_, err := FromEnv(env(map[string]string{EnvSwitch: c.sw, EnvHeadroom: c.v}))
		if err == nil || !strings.Contains(err.Error(), EnvHeadroom) || !strings.Contains(err.Error(), c.say) {
			t.Errorf("%s=%q %s=%q: %v, want an error naming it and saying %q", EnvSwitch, c.sw, EnvHeadroom, c.v, err, c.say)
		}
	}
	c, _ := FromEnv(env(map[string]string{EnvSwitch: "on"}))
	if b := c.Banner(7); !strings.Contains(b, "switch back on, 64 CQ entries of headroom") {
		t.Errorf("banner %q", b)
	}
}

// TestFromEnvHandshake: IBPATH_HANDSHAKE_TIMEOUT defaults to 5 s, takes a
// Go duration within its bounds, refuses anything else naming the
// variable and the bounds, and shows in the banner while layer 2 is on.
func TestFromEnvHandshake(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 5 * time.Second, "50ms": 50 * time.Millisecond, "2s": 2 * time.Second, "10m": 10 * time.Minute, "10ms": 10 * time.Millisecond} {
		c, err := FromEnv(env(map[string]string{EnvHandshake: v}))
		if err != nil || c.Handshake != want || c.handshake() != want {
			t.Errorf("%s=%q: %v, %v; want %v", EnvHandshake, v, c.Handshake, err, want)
		}
		if b := c.Banner(7); !strings.Contains(b, "completion channels on, handshake timeout "+want.String()+")") {
			t.Errorf("%s=%q: banner %q", EnvHandshake, v, b)
		}
	}
	for _, v := range []string{"5", "fast", "9ms", "0s", "-1s", "11m", "1h"} {
		_, err := FromEnv(env(map[string]string{EnvHandshake: v}))
		if err == nil || !strings.Contains(err.Error(), EnvHandshake) || !strings.Contains(err.Error(), "from 10ms to 10m0s") {
			t.Errorf("%s=%q: %v, want an error naming it and its bounds", EnvHandshake, v, err)
		}
	}
	if (Config{}).handshake() != defaultHandshake {
		t.Errorf("a Config without Handshake bounds the handshake by %v, want the default %v", (Config{}).handshake(), defaultHandshake)
	}
}

// TestFromEnvNudge: IBPATH_NUDGE is on by default, reads the usual
// spellings, refuses others naming the variable; layer 1 nudges only
// with the shadow rings and their send queue lock, and the banner says
// whether, and why not.
func TestFromEnvNudge(t *testing.T) {
	for v, want := range map[string]bool{"": true, "on": true, "1": true, "off": false, "0": false} {
		c, err := FromEnv(env(map[string]string{EnvNudge: v}))
		if err != nil || c.Nudge != want || c.nudges() != want {
			t.Errorf("%s=%q: %v (nudges %v), %v; want %v", EnvNudge, v, c.Nudge, c.nudges(), err, want)
		}
	}
	if _, err := FromEnv(env(map[string]string{EnvNudge: "sometimes"})); err == nil || !strings.Contains(err.Error(), EnvNudge) {
		t.Errorf("%s=sometimes: %v, want an error naming it", EnvNudge, err)
	}
	for _, k := range []struct {
		c      Config
		nudges bool
		banner string
	}{
		{Config{APM: true, Nudge: true, Record: true}, true, "(RoCE has none), nudged after each migration, flap damping half-life=30s,"},
		{Config{APM: true, Record: true}, false, "(RoCE has none), not nudged (IBPATH_NUDGE=off), flap damping "},
		{Config{APM: true, Nudge: true}, false, "(RoCE has none), not nudged (no shadow rings), flap damping "},
		{Config{APM: true, Nudge: true, Record: true, SinglePoster: true}, false, "(RoCE has none), not nudged (single poster per QP), flap damping "},
		{Config{Nudge: true, Record: true}, false, "layer 1 (APM) off for InfiniBand RC QPs (RoCE has none); shadow"},
	} {
		if k.c.nudges() != k.nudges {
			t.Errorf("%+v: nudges %v, want %v", k.c, k.c.nudges(), k.nudges)
		}
		if b := k.c.Banner(7); !strings.Contains(b, k.banner) {
			t.Errorf("%+v: banner %q, want %q", k.c, b, k.banner)
		}
	}
}

// TestFromEnvDamping: IBPATH_DAMPING is on by default with
// pathsel.DefaultDamping, off or tuned; anything else is refused naming
// the variable. The banner says which, and layer 1's manager runs with it.
func TestFromEnvDamping(t *testing.T) {
	for v, want := range map[string]pathsel.DampingConfig{"": pathsel.DefaultDamping, "on": pathsel.DefaultDamping,
		"off":                        {Off: true, Penalty: 1000, Suppress: 1500, Reuse: 750, HalfLife: 30 * time.Second, MaxSuppress: 300 * time.Second},
		"half-life=7s,suppress=1800": {Penalty: 1000, Suppress: 1800, Reuse: 750, HalfLife: 7 * time.Second, MaxSuppress: 300 * time.Second}} {
		c, err := FromEnv(env(map[string]string{EnvDamping: v}))
		if err != nil || c.Damping != want {
			t.Errorf("%s=%q: %+v, %v; want %+v", EnvDamping, v, c.Damping, err, want)
		}
	}
	for _, v := range []string{"sometimes", "half-life=0s", "reuse=2000"} {
		if _, err := FromEnv(env(map[string]string{EnvDamping: v})); err == nil || !strings.Contains(err.Error(), EnvDamping) {
			t.Errorf("%s=%q: %v, want an error naming it", EnvDamping, v, err)
		}
	}
	c, _ := FromEnv(env(map[string]string{EnvDamping: "off"}))
	if b := c.Banner(7); !strings.Contains(b, ", no flap damping (IBPATH_DAMPING=off);") {
		t.Errorf("banner %q", b)
	}
	c, _ = FromEnv(env(map[string]string{EnvDamping: "half-life=7s", EnvSocket: "off"}))
	if b := c.Banner(7); !strings.Contains(b, ", flap damping half-life=7s,suppress=1500,reuse=750,penalty=1000,max-suppress=5m0s;") {
		t.Errorf("banner %q", b)
	}
	rt := NewRuntime(c, nil)
	defer rt.Close()
	if rt.l1 == nil || rt.l1.mgr.DampingConfig() != c.Damping {
		t.Fatalf("layer 1 runs with damping %+v, want %+v", rt.l1.mgr.DampingConfig(), c.Damping)
	}
}

// TestFromEnvGoMaxProcs: IBPATH_GOMAXPROCS defaults to 2, takes a count
// from 1 to 64, and refuses anything else naming the variable.
func TestFromEnvGoMaxProcs(t *testing.T) {
	for v, want := range map[string]int{"": 2, "1": 1, "8": 8, "64": 64} {
		c, err := FromEnv(env(map[string]string{EnvGoProcs: v}))
		if err != nil || c.GoMaxProcs != want {
			t.Errorf("%s=%q: %d, %v; want %d", EnvGoProcs, v, c.GoMaxProcs, err, want)
		}
	}
	for _, v := range []string{"0", "-1", "65", "many", "2.5"} {
		if _, err := FromEnv(env(map[string]string{EnvGoProcs: v})); err == nil || !strings.Contains(err.Error(), EnvGoProcs) {
			t.Errorf("%s=%q: %v, want an error naming it", EnvGoProcs, v, err)
		}
	}
}

// TestFromEnvDlopen: IBPATH_DLOPEN is on by default and reads the usual
// words; anything else is an error naming it (the C side, which reads it
// first, passes the dlopen through then); the banner says which.
func TestFromEnvDlopen(t *testing.T) {
	for v, want := range map[string]bool{"": true, "on": true, "1": true, "off": false, "no": false} {
		c, err := FromEnv(env(map[string]string{EnvDlopen: v}))
		if err != nil || c.Dlopen != want {
			t.Errorf("%s=%q: %v, %v; want %v", EnvDlopen, v, c.Dlopen, err, want)
		}
		if b := c.Banner(1); !strings.HasSuffix(b, map[bool]string{true: "with dlopen: the shim's verbs", false: "with dlopen: passed through (IBPATH_DLOPEN=off)"}[want]) {
			t.Errorf("%s=%q: banner %q", EnvDlopen, v, b)
		}
	}
	if _, err := FromEnv(env(map[string]string{EnvDlopen: "maybe"})); err == nil || !strings.Contains(err.Error(), EnvDlopen) {
		t.Errorf("%s=maybe: %v, want an error naming it", EnvDlopen, err)
	}
}

// TestBannerVersion: both banners, the shim's on and disabled, name the
// build (internal/version).
func TestBannerVersion(t *testing.T) {
	want := ", version " + version.Get().String()
	for _, c := range []Config{{Disabled: true}, {APM: true, Record: true, Socket: "off", Backup: "auto"}} {
		if b := c.Banner(7); !strings.HasPrefix(b, "libibpath: loaded in pid 7"+want+":") && !strings.HasPrefix(b, "libibpath: loaded in pid 7"+want+", disabled") {
			t.Errorf("%+v: banner %q lacks %q after the pid", c, b, want)
		}
	}
}
