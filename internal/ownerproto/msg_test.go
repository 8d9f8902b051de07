package ownerproto

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	msgs := []Msg{
		{Type: TypeHello, Hello: &Hello{Proto: 1, PID: 42, Incarnation: 7, Comm: "osu_bw"}},
		{Type: TypeWelcome, Welcome: &Welcome{Proto: 1, Node: "node0"}},
		{Type: TypeError, Error: "pid mismatch"},
		{Type: TypeQP, QP: &status.QP{Device: "mlx5_0", QPN: 0x1c3, Layer: status.LayerAPM, APM: "armed",
			Primary: status.Path{Device: "mlx5_0", Port: 1, PathBits: 1}, Backup: status.Backup{Device: "mlx5_1", QPN: 0x1d0},
			Remote: status.Remote{LID: 9, QPN: 0x2a}}},
		{Type: TypeQPGone, QPGone: &QPRef{Device: "mlx5_0", QPN: 0x1c3}},
		{Type: TypeEvent, Event: &status.Event{Kind: status.EvPathMigrated, Device: "mlx5_0", QPN: 0x1c3, From: "port 1", To: "port 2"}},
		{Type: TypePublishQP, ID: 3, PublishQP: &PublishQP{Key: store.QPKey{LID: 5, QPN: 9}, Backup: store.QPBackup{Device: "mlx5_1", Port: 1, LID: 7, QPN: 11}, Remote: Route{LID: 8}}},
		{Type: TypePublishMR, ID: 4, PublishMR: &PublishMR{Key: store.MRKey{LID: 5, RKey: 0x100}, Backup: store.MRBackup{RKey: 0x200}}},
		{Type: TypeAck, ID: 4, Ack: &Ack{}},
		{Type: TypeLookupQP, ID: 6, Lookup: &Lookup{QP: &store.QPKey{LID: 9, QPN: 3}}},
		{Type: TypeLookupMR, ID: 7, Lookup: &Lookup{MR: &store.MRKey{LID: 9, RKey: 3}}},
		{Type: TypeFound, ID: 6, Found: &Found{QP: &store.QPBackup{Device: "mlx5_1", QPN: 4}}},
		{Type: TypeFound, ID: 7, Found: &Found{Error: "not found"}},
		{Type: TypeLookupHCA, ID: 8, Lookup: &Lookup{HCA: &Route{LID: 12}}},
		{Type: TypeLookupMRs, ID: 11, Lookup: &Lookup{MRs: &MRQuery{Routes: []Route{{LID: 12}, {GID: verbs.GID{0xfe, 0x80, 15: 2}}}, Since: 40}}},
		{Type: TypeFound, ID: 11, Found: &Found{MRs: &MRPage{Next: 44, More: true, MRs: []PeerMR{{Key: store.MRKey{LID: 12, RKey: 0x312}, Backup: store.MRBackup{RKey: 0x344}}}}}},
		{Type: TypeFound, ID: 12, Found: &Found{MRs: &MRPage{Next: 44}}},
		{Type: TypeFound, ID: 8, Found: &Found{HCA: &HCA{Name: "mlx5_0", GUID: 0x2c9, APM: true, Ports: []HCAPort{
			{Num: 1, State: verbs.PortActive, LinkLayer: verbs.LinkLayerInfiniBand, LID: 12, LMC: 1, GIDs: []verbs.GID{{0xfe, 0x80, 15: 1}}},
			{Num: 2, State: verbs.PortDown, LinkLayer: verbs.LinkLayerInfiniBand}}}}},
		{Type: TypeCommand, ID: 5, Command: &Command{Op: OpMigrate, Device: "mlx5_0", QPN: 0x1c3, DryRun: true}},
		{Type: TypeCommand, ID: 9, Command: &Command{Op: OpPortView, Device: "mlx5_1", Port: 1, View: &PortView{Suppressed: true, Congestion: 812.5}}},
		{Type: TypeCommand, ID: 10, Command: &Command{Op: OpPortView, Device: "mlx5_1", Port: 1, View: &PortView{}}},
		{Type: TypeResult, ID: 5, Result: &Result{OK: true, Before: status.QPState{APM: "armed", Primary: status.Path{Device: "mlx5_0", Port: 1}},
			After: status.QPState{APM: "rearm", Primary: status.Path{Device: "mlx5_0", Port: 2}}}},
	}
	for _, m := range msgs {
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode(%s): %v", m.Type, err)
		}
		if b[len(b)-1] != '\n' || strings.Count(string(b), "\n") != 1 {
			t.Fatalf("Encode(%s) = %q: want one line", m.Type, b)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(%q): %v", b, err)
		}
		again, _ := Encode(got)
		if string(again) != string(b) {
			t.Fatalf("round trip of %s: %q then %q", m.Type, b, again)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, line := range []string{
		``,
		`{}`,
		`{"type":"nope"}`,
		`{"type":"hello"}`,
		`{"type":"hello","hello":{"pid":0}}`,
		`{"type":"hello","hello":{"pid":1},"error":"x"}`,
		`{"type":"hello","hello":{"pid":1,"colour":"red"}}`,
		`{"type":"command","id":1,"command":{"op":"reboot","device":"d","qpn":1}}`,
		`{"type":"command","command":{"op":"arm","device":"d","qpn":1}}`,
		`{"type":"command","id":1,"command":{"op":"arm","device":"","qpn":1}}`,
		`{"type":"command","id":1,"command":{"op":"port_view","device":"d","port":1}}`,
		`{"type":"command","id":1,"command":{"op":"port_view","device":"d","view":{}}}`,
		`{"type":"command","id":1,"command":{"op":"port_view","device":"d","port":1,"qpn":3,"view":{}}}`,
		`{"type":"command","id":1,"command":{"op":"port_view","device":"d","port":1,"view":{"congestion_per_second":-1}}}`,
		`{"type":"command","id":1,"command":{"op":"drain","device":"d","port":1,"view":{}}}`,
		`{"type":"command","id":1,"command":{"op":"arm","device":"d","qpn":1,"view":{}}}`,
		`{"type":"publish_qp","id":1,"publish_qp":{"key":{"qpn":1},"backup":{"device":"d","qpn":0}}}`,
		`{"type":"qp","qp":{"device":"d","qpn":1}} {"type":"qp"}`,
		`{"type":"lookup_qp","id":1,"lookup":{"mr":{"rkey":1}}}`,
		`{"type":"lookup_qp","id":1,"lookup":{"qp":{"qpn":1},"mr":{"rkey":1}}}`,
		`{"type":"found","id":1,"found":{}}`,
		`{"type":"lookup_hca","id":1,"lookup":{"hca":{}}}`,
		`{"type":"lookup_hca","id":1,"lookup":{"hca":{"lid":1},"qp":{"qpn":1}}}`,
		`{"type":"lookup_hca","lookup":{"hca":{"lid":1}}}`,
		`{"type":"found","id":1,"found":{"hca":{"name":"m","ports":[]},"qp":{"qpn":1}}}`,
		`{"type":"found","id":1,"found":{"hca":{"name":"","ports":[]}}}`,
		`{"type":"found","id":1,"found":{"hca":{"name":"m","ports":[{"num":1},{"num":1}]}}}`,
		`{"type":"found","id":1,"found":{"hca":{"name":"m","ports":[{"num":0}]}}}`,
		`{"type":"found","id":1,"found":{"hca":{"name":"m","ports":[{"num":1,"lmc":8}]}}}`,
		`{"type":"found","id":1,"found":{"hca":{"name":"m","ports":[{"num":1,"gids":["nope"]}]}}}`,
		`{"type":"found","id":1,"found":{"hca":{"name":"m","ports":[{"num":1,"state":300}]}}}`,
		`{"type":"publish_qp","id":1,"publish_qp":{"key":{"gid":"zz","qpn":1},"backup":{"device":"d","qpn":2}}}`,
		`{"type":"ack","id":1,"ack":{}}` + strings.Repeat(" ", MaxLine),
		`{"type":"lookup_mrs","id":1,"lookup":{"mrs":{"routes":[]}}}`,
		`{"type":"lookup_mrs","id":1,"lookup":{"mrs":{"routes":[{}]}}}`,
		`{"type":"lookup_mrs","id":1,"lookup":{"mrs":{"routes":[{"lid":1}]},"qp":{"qpn":1}}}`,
		`{"type":"lookup_mr","id":1,"lookup":{"mr":{"rkey":1},"mrs":{"routes":[{"lid":1}]}}}`,
		`{"type":"lookup_mrs","id":1,"lookup":{"mrs":{"routes":[` + strings.Repeat(`{"lid":1},`, MaxQueryRoutes) + `{"lid":2}]}}}`,
		`{"type":"found","id":1,"found":{"mrs":{"next":1},"mr":{"rkey":1}}}`,
		`{"type":"found","id":1,"found":{"mrs":{"next":1,"mrs":[` + strings.Repeat(`{"key":{"lid":1},"backup":{}},`, MaxPageMRs) + `{"key":{"lid":1},"backup":{}}]}}}`,
	} {
		if _, err := Decode([]byte(line)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("Decode(%.80q) = %v, want ErrBadMessage", line, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"hello","hello":{"proto":1,"pid":42,"incarnation":7}}`))
	f.Add([]byte(`{"type":"command","id":5,"command":{"op":"migrate","device":"mlx5_0","qpn":451}}`))
	f.Add([]byte(`{"type":"publish_qp","id":1,"publish_qp":{"key":{"gid":"fe80::1","qpn":1},"backup":{"device":"d","qpn":2},"remote":{"gid":"::","lid":3}}}`))
	f.Add([]byte(`{"type":"qp","qp":{"device":"d","qpn":1,"layer":"apm"}}`))
	f.Add([]byte(`{"type":"lookup_mr","id":2,"lookup":{"mr":{"gid":"fe80::1","rkey":7}}}`))
	f.Add([]byte(`{"type":"found","id":2,"found":{"mr":{"rkey":8}}}`))
	f.Add([]byte(`{"type":"lookup_hca","id":3,"lookup":{"hca":{"gid":"fe80::2","lid":4}}}`))
	f.Add([]byte(`{"type":"lookup_mrs","id":4,"lookup":{"mrs":{"routes":[{"gid":"fe80::2"}],"since":3}}}`))
	f.Add([]byte(`{"type":"found","id":4,"found":{"mrs":{"mrs":[{"key":{"lid":1,"rkey":2},"backup":{"rkey":3}}],"next":5}}}`))
	f.Add([]byte(`{"type":"found","id":3,"found":{"hca":{"name":"mlx5_0","guid":7,"apm":true,"ports":[{"num":1,"state":4,"link_layer":1,"lid":4,"lmc":1,"gids":["fe80::2"]}]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("Decode error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		enc, err := Encode(m)
		if err != nil {
			t.Fatalf("a decoded message does not encode: %v", err)
		}
		if _, err := Decode(enc); err != nil {
			t.Fatalf("re-decoding %q: %v", enc, err)
		}
	})
}

// A full page of MR entries, every field at its widest, fits one line.
func TestFullMRPageFitsALine(t *testing.T) {
	p := &MRPage{Next: ^uint64(0), More: true}
	for range MaxPageMRs {
		g := verbs.GID{0xfe, 0x80, 2: 0xab, 3: 0xcd, 4: 0xef, 5: 0x12, 6: 0x34, 7: 0x56, 8: 0x78, 9: 0x9a, 10: 0xbc, 11: 0xde, 12: 0xf1, 13: 0x23, 14: 0x45, 15: 0x67}
		p.MRs = append(p.MRs, PeerMR{Key: store.MRKey{GID: g, LID: 0xffff, RKey: ^uint32(0)},
			Backup: store.MRBackup{RKey: ^uint32(0), Addr: ^uint64(0), Length: ^uint64(0)}})
	}
	b, err := Encode(Msg{Type: TypeFound, ID: ^uint64(0), Found: &Found{MRs: p}})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxLine {
		t.Fatalf("a full page takes %d bytes, a line at most %d", len(b), MaxLine)
	}
	var rs []Route
	for range MaxQueryRoutes {
		rs = append(rs, Route{GID: p.MRs[0].Key.GID, LID: 0xffff})
	}
	if b, err = Encode(Msg{Type: TypeLookupMRs, ID: ^uint64(0), Lookup: &Lookup{MRs: &MRQuery{Routes: rs, Since: ^uint64(0)}}}); err != nil || len(b) > MaxLine {
		t.Fatalf("a full query: %d bytes, err %v", len(b), err)
	}
}

func TestHCAConversion(t *testing.T) {
	in := pathsel.HCA{Name: "mlx5_1", GUID: 9, APM: true, Ports: []pathsel.Port{
		{Num: 1, State: verbs.PortActive, LinkLayer: verbs.LinkLayerInfiniBand, LID: 7, LMC: 2, GIDs: []verbs.GID{{0xfe, 0x80, 15: 7}, {}, {0xfe, 0x80, 15: 8}}},
		{Num: 2, State: verbs.PortDown, LinkLayer: verbs.LinkLayerInfiniBand}}}
	b, err := Encode(Msg{Type: TypeFound, ID: 1, Found: &Found{HCA: ptr(HCAFrom(in))}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Found.HCA.Pathsel(); !reflect.DeepEqual(got, in) {
		t.Fatalf("%+v came back as %+v", in, got)
	}
	if p, ok := m.Found.HCA.Pathsel().PortByLID(9); !ok || p.Num != 1 {
		t.Fatal("the LMC range did not survive the trip")
	}
}

func ptr[T any](v T) *T { return &v }
