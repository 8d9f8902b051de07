package replica

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/internal/syncbuf"
)

// slowDetection keeps a killed node alive in its peers' eyes (probes every
// 10 s) and leaves push-pull out of the way (hourly): a node restarted
// without seeds then learns of its peers only from its peers file.
func slowDetection(c *memberlist.Config) {
	fastTimers(c)
	c.ProbeInterval = 10 * time.Second
	c.PushPullInterval = time.Hour
}

// restartUnnoticed starts node1 (no seeds) and node2 (joining it), waits
// for node1 to have written its peers file when peers is set, then kills
// node1 and restarts it on its port before node2 notices. It returns the
// restarted node1 and node2.
func restartUnnoticed(t *testing.T, peers string) (*testNode, *testNode) {
	t.Helper()
	dir := t.TempDir()
	a := startNode(t, dir, 1, "127.0.0.1", nil, func(c *Config) {
		c.PeersFile, c.AntiEntropyInterval, c.tune = peers, 50*time.Millisecond, slowDetection
	})
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, func(c *Config) {
		c.AntiEntropyInterval, c.tune = 50*time.Millisecond, slowDetection
	})
	waitMembers(t, a, b)
	if peers != "" {
		eventually(t, 5*time.Second, "node1's peers file lists node2", func() bool {
			got, _ := loadPeers(peers)
			return len(got) == 1 && got[0] == b.r.Addr()
		})
	}
	// the join's broadcasts, which would tell a restarted node1 of node2,
	// are long sent (gossip every 20 ms, a few transmissions each)
	time.Sleep(time.Second)
	port := a.port()
	a.kill()
	a.cfg.BindPort = port
	a.start()
	return a, b
}

func TestPeersFileRejoinsARestartNobodyNoticed(t *testing.T) {
	t.Run("without a peers file the restarted node stays alone", func(t *testing.T) {
		a, _ := restartUnnoticed(t, "")
		time.Sleep(1500 * time.Millisecond)
		if n := aliveCount(a.r); n != 1 {
			t.Fatalf("node1 found %d members without a peers file: this test no longer shows what the file is for", n)
		}
	})
	t.Run("with it the restarted node joins its last peers at once", func(t *testing.T) {
		a, b := restartUnnoticed(t, filepath.Join(t.TempDir(), "node1.peers"))
		eventually(t, 3*time.Second, "node1 back with node2 alive", func() bool { return aliveCount(a.r) == 2 })
		eventually(t, 3*time.Second, "node2 sees node1 alive", func() bool { return aliveCount(b.r) == 2 })
	})
}

func TestPeersFileKeptWhileAlone(t *testing.T) {
	dir := t.TempDir()
	peers := filepath.Join(dir, "node1.peers")
	a := startNode(t, dir, 1, "127.0.0.1", nil, func(c *Config) { c.PeersFile, c.AntiEntropyInterval = peers, 50*time.Millisecond })
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, nil)
	c := startNode(t, dir, 3, "127.0.0.3", []string{a.r.Addr()}, nil)
	waitMembers(t, a, b, c)
	want := []string{b.r.Addr(), c.r.Addr()}
	eventually(t, 5*time.Second, "both peers in the file, sorted", func() bool {
		got, _ := loadPeers(peers)
		return strings.Join(got, " ") == strings.Join(want, " ")
	})
	if fi, err := os.Stat(peers); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("peers file: %v %v, want mode 0600", fi, err)
	}
	c.stop()
	eventually(t, 5*time.Second, "the file follows a peer that left", func() bool {
		got, _ := loadPeers(peers)
		return strings.Join(got, " ") == want[0]
	})
	b.stop()
	eventually(t, 5*time.Second, "node1 alone", func() bool { return aliveCount(a.r) == 1 })
	time.Sleep(300 * time.Millisecond) // several rounds alone
	if got, _ := loadPeers(peers); strings.Join(got, " ") != want[0] {
		t.Fatalf("a node alone rewrote its peers file: %q, want %q", got, want[0])
	}
	if m, err := filepath.Glob(filepath.Join(dir, ".peers-*")); err != nil || len(m) != 0 {
		t.Fatalf("temporary files left: %v %v", m, err)
	}
}

func TestPeersFileFailures(t *testing.T) {
	dir := t.TempDir()
	seed := startNode(t, dir, 1, "127.0.0.1", nil, nil)
	logTo := func(buf *syncbuf.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

	// unreadable (a directory where the file should be): the node starts
	// and joins its seeds, and says why it did not rejoin its last peers
	var readLog syncbuf.Buffer
	notFile := filepath.Join(dir, "peers-dir")
	if err := os.Mkdir(notFile, 0o700); err != nil {
		t.Fatal(err)
	}
	r := startNode(t, dir, 2, "127.0.0.2", []string{seed.r.Addr()}, func(c *Config) { c.PeersFile, c.Logger = notFile, logTo(&readLog) })
	waitMembers(t, seed, r)
	if !strings.Contains(readLog.String(), "remembered peers not read") {
		t.Fatalf("no warning for an unreadable peers file:\n%s", readLog.String())
	}

	// unwritable (its directory is missing): one warning, not one per round
	var writeLog syncbuf.Buffer
	w := startNode(t, dir, 3, "127.0.0.3", []string{seed.r.Addr()}, func(c *Config) {
		c.PeersFile, c.AntiEntropyInterval, c.Logger = filepath.Join(dir, "missing", "peers"), 20*time.Millisecond, logTo(&writeLog)
	})
	waitMembers(t, seed, r, w)
	eventually(t, 5*time.Second, "the write failure logged", func() bool {
		return strings.Contains(writeLog.String(), "cannot remember the peers alive")
	})
	time.Sleep(200 * time.Millisecond) // ten more rounds
	if n := strings.Count(writeLog.String(), "cannot remember the peers alive"); n != 1 {
		t.Fatalf("the write failure logged %d times, want once:\n%s", n, writeLog.String())
	}
}
