package cli

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/ibpath/ibpath/internal/api"
)

// TestDrainGolden: drain and undrain print what changed and what every
// process answered; --wait prints the QPs still on the port and exits 5;
// bad ports are usage errors that never reach ibpathd.
func TestDrainGolden(t *testing.T) {
	port := api.PortRequest{Device: "mlx5_0", Port: 1}
	cases := []struct {
		name    string
		args    []string
		replies map[string]reply
		code    int
		reqs    int // requests the daemon must get (0: none)
	}{
		{"drain", []string{"drain", "--port", "mlx5_0:1"}, map[string]reply{api.PathDrain: {http.StatusOK, "drain.json"}}, ExitOK, 1},
		{"drain-json", []string{"--json", "drain", "--port", "mlx5_0:1"}, map[string]reply{api.PathDrain: {http.StatusOK, "drain.json"}}, ExitOK, 1},
		{"drain-partial", []string{"drain", "--port", "mlx5_0:1"}, map[string]reply{api.PathDrain: {http.StatusMultiStatus, "drain-partial.json"}}, ExitPartial, 1},
		{"drain-wait-left", []string{"drain", "--port", "mlx5_0:1", "--wait", "300ms"},
			map[string]reply{api.PathDrain: {http.StatusOK, "drain.json"}, api.PathStatus: {http.StatusOK, "status-drain.json"}}, ExitPartial, -1},
		{"drain-wait-not-drained", []string{"drain", "--port", "mlx5_0:1", "--wait", "1s"},
			map[string]reply{api.PathDrain: {http.StatusOK, "drain.json"}}, ExitError, 2},
		{"undrain", []string{"undrain", "--port", "mlx5_0:1"}, map[string]reply{api.PathUndrain: {http.StatusOK, "undrain.json"}}, ExitOK, 1},
		{"status-drain", []string{"status"}, map[string]reply{api.PathStatus: {http.StatusOK, "status-drain.json"}}, ExitOK, 1},
		{"usage-drain-no-port", []string{"drain"}, nil, ExitUsage, 0},
		{"usage-drain-bad-port", []string{"drain", "--port", "mlx5_0"}, nil, ExitUsage, 0},
		{"usage-drain-negative-wait", []string{"drain", "--port", "mlx5_0:1", "--wait", "-1s"}, nil, ExitUsage, 0},
		{"usage-undrain-arg", []string{"undrain", "--port", "mlx5_0:1", "extra"}, nil, ExitUsage, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, tc.replies)
			stdout, stderr, code := run(append([]string{"--socket", f.socket}, tc.args...)...)
			checkGolden(t, tc.name, transcript(tc.args, stdout, stderr, code))
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			reqs := f.requests()
			switch {
			case tc.reqs == 0 && len(reqs) != 0:
				t.Fatalf("a usage error reached the daemon: %+v", reqs)
			case tc.reqs > 0 && len(reqs) != tc.reqs:
				t.Fatalf("%d requests, want %d: %+v", len(reqs), tc.reqs, reqs)
			case tc.reqs < 0 && len(reqs) < 3:
				t.Fatalf("--wait read the status %d times in 300 ms", len(reqs)-1)
			}
			if tc.reqs != 0 && reqs[0].Method == http.MethodPost {
				var got api.PortRequest
				if err := json.Unmarshal(reqs[0].Body, &got); err != nil || got != port {
					t.Fatalf("sent %s (%v), want %+v", reqs[0].Body, err, port)
				}
			}
		})
	}
}
