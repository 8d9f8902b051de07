package daemon

import (
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

func TestWriteMetrics(t *testing.T) {
	n := status.Node{Fabric: status.Fabric{Kind: status.FabricSim},
		HCAs: []status.HCA{{Name: "mlx5_0", Ports: []status.Port{{Num: 1, State: "ACTIVE"},
			{Num: 2, State: "DOWN", Damping: &status.PortDamping{Penalty: 1500.5, Flaps: 2, Suppressed: true},
				Health: &status.PortHealth{State: status.HealthDegraded, OutOfService: true, SeqErrorsPerSecond: 12.5, LinkErrorsPerSecond: 0.25, CongestionPerSecond: 64}}}}},
		QPs:    []status.QP{{Layer: status.LayerAPM}, {Layer: status.LayerAPM}, {Layer: status.LayerCrossNIC}},
		Layers: map[string]int{status.LayerAPM: 2, status.LayerCrossNIC: 1},
		Peers:  []status.Peer{{State: status.PeerAlive}, {State: status.PeerSuspect}},
		Store:  status.Store{QPs: 5, MRs: 7, Tombstones: 1},
		Totals: status.Totals{Migrations: 3, Failovers: 2, Switchbacks: 1, ArmedQPs: 2, ReplicationLagP50Seconds: 0.002, ReplicationLagP99Seconds: 0.015, PeersRefused: 4}}
	var b strings.Builder
	if err := WriteMetrics(&b, n); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"# TYPE ibpath_migrations_total counter\nibpath_migrations_total 3\n",
		"ibpath_failovers_total 2\n", "ibpath_switchbacks_total 1\n", "ibpath_armed_qps 2\n",
		`ibpath_qps{layer="apm"} 2`, `ibpath_qps{layer="crossnic"} 1`, `ibpath_qps{layer="none"} 0`,
		`ibpath_port_up{device="mlx5_0",port="1"} 1`, `ibpath_port_up{device="mlx5_0",port="2"} 0`,
		`ibpath_port_flap_penalty{device="mlx5_0",port="1"} 0`, `ibpath_port_flap_penalty{device="mlx5_0",port="2"} 1500.5`,
		`ibpath_port_suppressed{device="mlx5_0",port="1"} 0`, `ibpath_port_suppressed{device="mlx5_0",port="2"} 1`,
		`ibpath_port_out_of_service{device="mlx5_0",port="2"} 1`, `ibpath_port_seq_errors_per_second{device="mlx5_0",port="2"} 12.5`,
		`ibpath_port_link_errors_per_second{device="mlx5_0",port="2"} 0.25`, `ibpath_port_congestion_per_second{device="mlx5_0",port="2"} 64`,
		`ibpath_peers{state="alive"} 1`, `ibpath_peers{state="suspect"} 1`, `ibpath_peers{state="dead"} 0`,
		`ibpath_store_entries{kind="mr"} 7`, `ibpath_replication_lag_seconds{quantile="0.99"} 0.015`,
		"ibpath_peers_refused_total 4\n", "ibpath_fabric_simulated 1\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Every sample line belongs to a family declared just before.
	declared := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			declared[strings.Fields(f)[0]] = true
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		name := strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]
		if !declared[name] {
			t.Errorf("sample %q before its # TYPE", line)
		}
	}
}

func TestNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	if err := Notify("READY=1\nSTATUS=serving"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := ln.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1\nSTATUS=serving" {
		t.Fatalf("got %q, %v", buf[:n], err)
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody-listens"))
	if err := Notify("READY=1"); err == nil {
		t.Fatal("a dead notify socket was not reported")
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := Notify("READY=1"); err != nil {
		t.Fatalf("without systemd: %v", err)
	}
}

func TestParseConfigFile(t *testing.T) {
	in := `# ibpathd.conf
socket = /run/ibpath/x.sock
operator = alice, @ibpath   # two at once
operator = bob
node = "n 1"

fabric=sim
`
	got, err := ParseConfigFile(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Setting{{2, "socket", "/run/ibpath/x.sock"}, {3, "operator", "alice, @ibpath"}, {4, "operator", "bob"}, {5, "node", "n 1"}, {7, "fabric", "sim"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("setting %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"socket /x\n", " = x\n"} {
		if _, err := ParseConfigFile(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v, want an error naming line 1", bad, err)
		}
	}
}

func TestDecodeActionRequest(t *testing.T) {
	req, err := DecodeActionRequest([]byte(`{"target":{"device":"mlx5_0","port":1},"dry_run":true}`))
	if err != nil || req.Target.Device != "mlx5_0" || req.Target.Port != 1 || !req.DryRun {
		t.Fatalf("%+v %v", req, err)
	}
	for _, bad := range []string{``, `{}`, `{"target":{}}`, `{"target":{"all":true,"qpn":1}}`, `{"target":{"all":true},"x":1}`, `[1]`, `{"target":{"device":"d","qpn":-1}}`} {
		_, err := DecodeActionRequest([]byte(bad))
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeBadRequest {
			t.Errorf("%q: %v, want bad-request", bad, err)
		}
	}
}

func FuzzDecodeActionRequest(f *testing.F) {
	f.Add([]byte(`{"target":{"device":"mlx5_0","qpn":451}}`))
	f.Add([]byte(`{"target":{"all":true},"dry_run":true}`))
	f.Add([]byte(`{"target":{"device":"mlx5_0","port":2}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeActionRequest(b)
		if err != nil {
			var e *api.Error
			if !errors.As(err, &e) || e.Code != api.CodeBadRequest {
				t.Fatalf("error %v is not a bad-request api.Error", err)
			}
			return
		}
		if err := req.Target.Validate(); err != nil {
			t.Fatalf("accepted an invalid target: %v", err)
		}
	})
}

func TestStatusHasNoNilLists(t *testing.T) {
	d, _ := testDaemon(t, func(cfg *Config) { cfg.Sim.QPs = 0 })
	b, err := json.Marshal(d.Status())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"qps":[]`, `"owners":[]`, `"peers":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("status JSON lacks %s: %s", want, b)
		}
	}
}

// TestMetricsHostileLabels: label values a device name can carry are
// escaped as the text format wants (Go's %q wrote \x01, which
// Prometheus rejects), and a QP layer a process reports that nobody knows
// counts under "other" instead of adding a series per distinct report.
func TestMetricsHostileLabels(t *testing.T) {
	sample := regexp.MustCompile(`^[a-z_]+(\{([a-z_]+="([^"\\\n]|\\[\\"n])*",?)*\})? \S+$`)
	valid := func(out string) {
		t.Helper()
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			if !sample.MatchString(l) || !utf8.ValidString(l) {
				t.Errorf("not a valid sample line: %q", l)
			}
		}
	}
	var b strings.Builder
	if err := WriteMetrics(&b, status.Node{HCAs: []status.HCA{{Name: "mlx5_\"0\"\n\x01", Ports: []status.Port{{Num: 1, State: "ACTIVE"}}}}}); err != nil {
		t.Fatal(err)
	}
	valid(b.String())
	if want := `ibpath_port_up{device="mlx5_\"0\"\n` + "\x01" + `",port="1"} 1`; !strings.Contains(b.String(), want) {
		t.Errorf("missing %q in:\n%s", want, b.String())
	}
	// a device name that is not UTF-8 (sysfs names are bytes) and a
	// drained port's: written with U+FFFD, not refused
	b.Reset()
	bad := "mlx5_\xff"
	if err := WriteMetrics(&b, status.Node{HCAs: []status.HCA{{Name: bad, Ports: []status.Port{{Num: 1, State: "ACTIVE"}}}},
		Drains: []status.Drain{{Device: bad, Port: 1}}}); err != nil {
		t.Fatal(err)
	}
	valid(b.String())
	for _, want := range []string{"ibpath_port_up{device=\"mlx5_\uFFFD\",port=\"1\"} 1", "ibpath_drained_port_qps{device=\"mlx5_\uFFFD\",port=\"1\"} 0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
	d, c := testDaemon(t, nil)
	ctx, s := dialOwner(t, d)
	for i, l := range []string{"\x01evil", "evil2", status.LayerAPM} {
		if err := s.ReportQP(status.QP{Device: "mlx5_1", QPN: uint32(0x600 + i), Port: 1, Layer: l}); err != nil {
			t.Fatal(err)
		}
	}
	var out string
	eventually(t, "the reported QPs counted: 2 of layer other, 3 of apm (the embedded fabric's 2 and the one reported)", func() bool {
		out, _ = c.Metrics(ctx)
		return strings.Contains(out, `ibpath_qps{layer="other"} 2`) && strings.Contains(out, `ibpath_qps{layer="apm"} 3`)
	})
	valid(out)
	if strings.Contains(out, "evil") {
		t.Errorf("a reported layer became a label, or the counts are off:\n%s", out)
	}
}

// TestRecoveryHistograms: the times processes report with their events
// (a migration from the port's error, a failover from the fault) fill
// ibpath_migration_seconds and ibpath_failover_seconds; a time that is
// not positive or longer than an hour is left out.
func TestRecoveryHistograms(t *testing.T) {
	d, c := testDaemon(t, nil)
	ctx, s := dialOwner(t, d)
	if err := s.ReportQP(status.QP{Device: "mlx5_1", QPN: 0x610, Port: 1}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []status.Event{
		{Kind: status.EvFailover, Took: 250 * time.Millisecond},
		{Kind: status.EvFailover, Took: 2 * time.Hour},
		{Kind: status.EvFailover, Took: -time.Second},
		{Kind: status.EvPathMigrated, Took: 5 * time.Millisecond},
		{Kind: status.EvPathMigrated},
	} {
		e.Device, e.QPN = "mlx5_1", 0x610
		if err := s.Event(e); err != nil {
			t.Fatal(err)
		}
	}
	var out string
	eventually(t, "the events counted", func() bool {
		n, _ := c.Status(ctx)
		return n.Totals.Failovers == 3 && n.Totals.Migrations == 2
	})
	out, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ibpath_failover_seconds_count 1\n", `ibpath_failover_seconds_bucket{le="0.256"} 1`,
		`ibpath_failover_seconds_bucket{le="0.128"} 0`, "ibpath_migration_seconds_count 1\n", `ibpath_migration_seconds_bucket{le="0.008"} 1`} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}
