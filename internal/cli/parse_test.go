package cli

import "testing"

func TestParseQPN(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"0x1c3", 0x1c3, true}, {"0X1C3", 0x1c3, true}, {"451", 451, true}, {"1", 1, true},
		{"0xffffff", 0xffffff, true}, {"16777215", 0xffffff, true}, {"010", 10, true},
		{"0", 0, false}, {"0x0", 0, false}, {"0x1000000", 0, false}, {"16777216", 0, false},
		{"", 0, false}, {"0x", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1c3", 0, false},
		{"0x-1", 0, false}, {"0b101", 0, false}, {"4294967296", 0, false}, {" 1", 0, false},
	} {
		got, err := parseQPN(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseQPN(%q) = %#x, %v; want %#x, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParsePort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		dev  string
		port uint8
		ok   bool
	}{
		{"mlx5_0:1", "mlx5_0", 1, true}, {"rxe0:2", "rxe0", 2, true}, {"hfi1_0:255", "hfi1_0", 255, true},
		{"mlx5_0", "", 0, false}, {"mlx5_0:", "", 0, false}, {":1", "", 0, false}, {"mlx5_0:0", "", 0, false},
		{"mlx5_0:256", "", 0, false}, {"mlx5_0:x", "", 0, false}, {"mlx5_0:1:2", "", 0, false}, {"", "", 0, false},
	} {
		dev, port, err := parsePort(tc.in)
		if (err == nil) != tc.ok || dev != tc.dev || port != tc.port {
			t.Errorf("parsePort(%q) = %q, %d, %v; want %q, %d, ok %v", tc.in, dev, port, err, tc.dev, tc.port, tc.ok)
		}
	}
}
