package status

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPathsRenderFromObjects: the tables' words ("port 2+1", "armed port
// 1", "mlx5_1 0x1c3 (connecting)") are made from the objects.
func TestPathsRenderFromObjects(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Path{Device: "mlx5_0", Port: 1}.String(), "port 1"},
		{Path{Device: "mlx5_0", Port: 2, PathBits: 1, LID: 22}.String(), "port 2+1"},
		{Path{}.String(), "-"},
		{QPState{APM: "armed", Primary: Path{Device: "mlx5_0", Port: 1}}.String(), "armed port 1"},
		{QPState{Primary: Path{Device: "mlx5_0", Port: 2}}.String(), "port 2"},
		{QPState{APM: "-"}.String(), "-"},
		{QPState{}.String(), "-"},
		{Backup{Device: "mlx5_1", QPN: 0x1c3, Connected: true}.String(), "mlx5_1 0x1c3"},
		{Backup{Device: "mlx5_1", QPN: 0x1c3}.String(), "mlx5_1 0x1c3 (connecting)"},
		{Backup{}.String(), "-"},
		{Remote{LID: 33, QPN: 0x1e2}.String(), "lid 33 qpn 0x1e2"},
		{Remote{GID: "fe80::1", QPN: 0x1e2}.String(), "fe80::1 qpn 0x1e2"},
		{Remote{}.String(), "-"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// TestQPJSONPaths: a QP's paths, backup and remote end are objects; one
// it does not have is absent, not an empty object or a "-".
func TestQPJSONPaths(t *testing.T) {
	q := QP{Device: "mlx5_0", QPN: 0x1c3, Port: 1, Layer: LayerAPM, APM: "armed",
		Primary: Path{Device: "mlx5_0", Port: 1, LID: 17, PortState: "ACTIVE"}, Home: Path{Device: "mlx5_0", Port: 1, LID: 17, PortState: "ACTIVE"}}
	b, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"primary":{"device":"mlx5_0","port":1,"path_bits":0,"lid":17,"port_state":"ACTIVE"}`, `"home":{`} {
		if !strings.Contains(s, want) {
			t.Errorf("%s lacks %s", s, want)
		}
	}
	for _, absent := range []string{`"alternate"`, `"backup"`, `"remote"`, `"gid"`, `"-"`} {
		if strings.Contains(s, absent) {
			t.Errorf("%s has %s", s, absent)
		}
	}
	var back QP
	if err := json.Unmarshal(b, &back); err != nil || back != q {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, q)
	}
}

// TestTotalsSayTheirUnit: the replication lag's fields name their unit.
func TestTotalsSayTheirUnit(t *testing.T) {
	b, err := json.Marshal(Totals{ReplicationLagP50Seconds: 0.001, ReplicationLagP99Seconds: 0.004})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"replication_lag_p50_seconds":0.001`) || !strings.Contains(string(b), `"replication_lag_p99_seconds":0.004`) {
		t.Errorf("%s: the lag's fields do not say seconds", b)
	}
}
