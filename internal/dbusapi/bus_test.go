package dbusapi

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// startBus starts a private dbus-daemon with the configuration file
// testdata/<config>, listening on a socket in a temporary directory, and
// returns its address. The daemon is killed when the test ends. The test
// is skipped when dbus-daemon is not installed.
func startBus(t *testing.T, config string) string {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon not found on PATH (Debian/Ubuntu package dbus-daemon); the D-Bus tests need a private bus")
	}
	addr, err := runBus(t, bin, filepath.Join("testdata", config))
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// runBus starts dbus-daemon with the configuration file cfg and waits
// until it prints its address, which it does once it listens.
func runBus(t *testing.T, bin, cfg string) (string, error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "bus")
	cmd := exec.Command(bin, "--config-file="+cfg, "--address=unix:path="+sock,
		"--nofork", "--nopidfile", "--print-address")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case addr := <-line:
		if addr == "" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return "", errors.New("dbus-daemon --config-file=" + cfg + " did not start: " + stderr.String())
		}
		return addr, nil
	case <-time.After(5 * time.Second):
		return "", errors.New("dbus-daemon did not print its address within 5 s: " + stderr.String())
	}
}

// dial connects a client to the bus at addr, closed when the test ends.
func dial(t *testing.T, addr string) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("dbus.Connect %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// serve starts the facade for b on the bus at addr, closed when the test
// ends.
func serve(t *testing.T, addr string, b *fakeBackend, opts Options) *Server {
	t.Helper()
	opts.Bus = addr
	s, err := Serve(opts, b, testLogger(t))
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// dbusError returns the D-Bus error in err, if any.
func dbusError(err error) (dbus.Error, bool) {
	var v dbus.Error
	if errors.As(err, &v) {
		return v, true
	}
	var p *dbus.Error
	if errors.As(err, &p) {
		return *p, true
	}
	return dbus.Error{}, false
}

// nextSignal waits for the next signal on ch whose name starts with
// prefix.
func nextSignal(t *testing.T, ch <-chan *dbus.Signal, prefix string) *dbus.Signal {
	t.Helper()
	timeout := time.After(3 * time.Second)
	for {
		select {
		case s := <-ch:
			if strings.HasPrefix(s.Name, prefix) {
				return s
			}
		case <-timeout:
			t.Fatalf("no %s* signal within 3 s", prefix)
			return nil
		}
	}
}

func dbusPath(p string) dbus.ObjectPath { return dbus.ObjectPath(p) }
