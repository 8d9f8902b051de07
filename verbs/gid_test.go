package verbs

import (
	"encoding/json"
	"testing"
)

func TestGIDText(t *testing.T) {
	for _, s := range []string{"fe80::248:caff:fe00:101", "fe80:0000:0000:0000:0248:caff:fe00:0101", "::ffff:10.0.0.1", "10.0.0.1", "::"} {
		g, err := ParseGID(s)
		if err != nil {
			t.Fatalf("ParseGID(%q): %v", s, err)
		}
		b, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		var back GID
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if back != g {
			t.Fatalf("%q: round trip %s gave %v, want %v", s, b, back, g)
		}
	}
	g, _ := ParseGID("10.0.0.1")
	if want := (GID{10: 0xff, 11: 0xff, 12: 10, 15: 1}); g != want {
		t.Fatalf("IPv4 GID = %x, want %x", g, want)
	}
	for _, bad := range []string{"", "fe80::zz", "1.2.3", "hello"} {
		if _, err := ParseGID(bad); err == nil {
			t.Errorf("ParseGID(%q) accepted", bad)
		}
	}
	var g2 GID
	if err := json.Unmarshal([]byte(`"nope"`), &g2); err == nil {
		t.Error("unmarshal of a bad GID accepted")
	}
}
