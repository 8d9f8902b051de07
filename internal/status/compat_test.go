package status

import (
	"encoding/json"
	"testing"
)

// TestProtocol1Strings: the strings a protocol-1 shim wrote decode into
// the objects; the objects still decode strictly; strings no shim wrote
// are errors.
func TestProtocol1Strings(t *testing.T) {
	var q QP
	legacy := `{"device":"mlx5_0","qpn":451,"port":2,"layer":"apm","apm":"armed","primary":"port 2",
		"alternate":"port 2+1","home":"port 1","backup":"mlx5_1 qpn 0x1c3 (connecting)",
		"remote":"lid 33 qpn 0x1e2"}`
	if err := json.Unmarshal([]byte(legacy), &q); err != nil {
		t.Fatal(err)
	}
	if q.Primary != (Path{Port: 2}) || q.Alternate != (Path{Port: 2, PathBits: 1}) || q.Home != (Path{Port: 1}) ||
		q.Backup != (Backup{Device: "mlx5_1", QPN: 0x1c3}) || q.Remote != (Remote{LID: 33, QPN: 0x1e2}) {
		t.Fatalf("decoded %+v", q)
	}
	if err := json.Unmarshal([]byte(`{"alternate":"-","home":"mlx5_1 (backup, express lane)","backup":"rxe1 qpn 0x11","remote":"::ffff:10.77.0.2 qpn 0x11"}`), &q); err != nil {
		t.Fatal(err)
	}
	if q.Alternate != (Path{}) || q.Home != (Path{}) || !q.Backup.Connected || q.Remote.GID != "::ffff:10.77.0.2" {
		t.Fatalf("decoded %+v", q)
	}
	var s QPState
	for in, want := range map[string]QPState{
		`"armed port 1"`:         {APM: "armed", Primary: Path{Port: 1}},
		`"migrated port 2+1"`:    {APM: "migrated", Primary: Path{Port: 2, PathBits: 1}},
		`"would move to port 2"`: {Primary: Path{Port: 2}},
		`"unsupported"`:          {APM: "unsupported"},
		`{"apm":"armed","primary":{"device":"mlx5_0","port":1,"path_bits":0}}`: {APM: "armed", Primary: Path{Device: "mlx5_0", Port: 1}},
	} {
		if err := json.Unmarshal([]byte(in), &s); err != nil || s != want {
			t.Errorf("%s: %+v %v, want %+v", in, s, err, want)
		}
	}
	for _, bad := range []string{`{"primary":"port x"}`, `{"primary":"lane 1"}`, `{"backup":"mlx5_1"}`,
		`{"remote":"lid 33"}`, `{"primary":{"port":1,"colour":"red"}}`, `{"remote":{"qpn":1,"x":2}}`} {
		if err := json.Unmarshal([]byte(bad), &q); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	// They write objects.
	b, _ := json.Marshal(QP{Primary: Path{Port: 1}})
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if _, ok := back["primary"].(map[string]any); !ok {
		t.Fatalf("primary written as %T", back["primary"])
	}
}
