package shim

import (
	"log/slog"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil || c.Disabled || !c.APM || !c.Record || c.Backup != "auto" || c.Socket != "/run/ibpath/ibpathd.sock" || c.Log != slog.LevelWarn {
		t.Fatalf("defaults %+v %v", c, err)
	}
	c, err = FromEnv(env(map[string]string{EnvDisable: "1", EnvAPM: "off", EnvRecord: "no", EnvBackup: "mlx5_1", EnvSocket: "off", EnvLog: "debug", EnvSingle: "1"}))
	if err != nil || !c.Disabled || c.APM || c.Record || c.Backup != "mlx5_1" || c.Socket != "off" || c.Log != slog.LevelDebug || !c.SinglePoster {
		t.Fatalf("set %+v %v", c, err)
	}
	for k, v := range map[string]string{EnvDisable: "2", EnvAPM: "maybe", EnvRecord: "x", EnvLog: "loud", EnvSingle: "many"} {
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
	if b := (Config{APM: true, Socket: "off", Backup: "auto"}).Banner(7); !strings.Contains(b, "layer 1 (APM) on") || !strings.Contains(b, "shadow rings off") || !strings.Contains(b, "failover off") || !strings.Contains(b, "ibpathd not used") {
		t.Errorf("banner %q", b)
	}
}

func TestFromEnvExpress(t *testing.T) {
	for v, want := range map[string]bool{"": true, "on": true, "1": true, "off": false, "0": false, "OFF": false} {
		c, err := FromEnv(env(map[string]string{EnvExpress: v}))
		if err != nil || c.Express != want {
			t.Errorf("%s=%q: express %v, %v; want %v", EnvExpress, v, c.Express, err, want)
		}
	}
	if _, err := FromEnv(env(map[string]string{EnvExpress: "fast"})); err == nil || !strings.Contains(err.Error(), EnvExpress) {
		t.Errorf("%s=fast: %v, want an error naming it", EnvExpress, err)
	}
	on, _ := FromEnv(env(nil))
	off, _ := FromEnv(env(map[string]string{EnvExpress: "off"}))
	if b := on.Banner(7); !strings.Contains(b, "failover on (express lane on,") {
		t.Errorf("banner %q", b)
	}
	if b := off.Banner(7); !strings.Contains(b, "failover on (express lane off,") {
		t.Errorf("banner %q", b)
	}
	// Without the shadow rings there is no failover, hence no lane.
	if b := (Config{Express: true, Socket: "off", Backup: "auto"}).Banner(7); !strings.Contains(b, "failover off (express lane off,") {
		t.Errorf("banner %q", b)
	}
}

func TestFromEnvChannels(t *testing.T) {
	for v, want := range map[string]bool{"": true, "on": true, "off": false, "0": false} {
		c, err := FromEnv(env(map[string]string{EnvChannels: v}))
		if err != nil || c.Channels != want {
			t.Errorf("%s=%q: channels %v, %v; want %v", EnvChannels, v, c.Channels, err, want)
		}
	}
	if _, err := FromEnv(env(map[string]string{EnvChannels: "maybe"})); err == nil || !strings.Contains(err.Error(), EnvChannels) {
		t.Errorf("%s=maybe: %v, want an error naming it", EnvChannels, err)
	}
	on, _ := FromEnv(env(nil))
	off, _ := FromEnv(env(map[string]string{EnvChannels: "off"}))
	if b := on.Banner(7); !strings.Contains(b, "completion channels on") {
		t.Errorf("banner %q", b)
	}
	if b := off.Banner(7); !strings.Contains(b, "completion channels off") {
		t.Errorf("banner %q", b)
	}
}
