package replica

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
)

var testKey = []byte("0123456789abcdef")

// fastTimers shortens memberlist's failure detection for tests.
func fastTimers(c *memberlist.Config) {
	c.ProbeInterval = 100 * time.Millisecond
	c.ProbeTimeout = 50 * time.Millisecond
	c.GossipInterval = 20 * time.Millisecond
	c.SuspicionMult = 2
	c.SuspicionMaxTimeoutMult = 2
	c.GossipToTheDeadTime = 2 * time.Second
	c.PushPullInterval = time.Second
}

func nodeGID(n int) verbs.GID {
	var g verbs.GID
	g[0], g[1], g[15] = 0xfe, 0x80, byte(n)
	return g
}

type testNode struct {
	t    testing.TB
	name string
	path string
	st   *store.Store
	r    *Replicator
	cfg  Config
}

// quiet discards logs unless -v.
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		w := &tlogWriter{t: t}
		t.Cleanup(w.end)
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// tlogWriter writes a node's log to its test's log until the test's
// cleanups reach it (registered before the node's stop, it runs after):
// memberlist's gossip goroutines may log a moment after Shutdown
// returned, and a t.Log once the test is done is a data race in the
// testing package.
type tlogWriter struct {
	t     testing.TB
	mu    sync.Mutex
	ended bool
}

func (w *tlogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.t.Log(string(p))
	}
	return len(p), nil
}

func (w *tlogWriter) end() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
}

// startNode opens a store in dir and starts node n (GID nodeGID(n), LID
// 100+n) on addr.
func startNode(t testing.TB, dir string, n int, addr string, seeds []string, mod func(*Config)) *testNode {
	t.Helper()
	tn := &testNode{t: t, name: fmt.Sprintf("node%d", n), path: filepath.Join(dir, fmt.Sprintf("node%d.db", n))}
	tn.cfg = Config{
		Name: tn.name, BindAddr: addr, Key: testKey, Seeds: seeds,
		Meta:                Meta{GIDs: []verbs.GID{nodeGID(n)}, LIDs: []uint16{uint16(100 + n)}},
		AntiEntropyInterval: time.Hour, PushTimeout: time.Second,
		Logger: testLogger(t), tune: fastTimers,
	}
	if mod != nil {
		mod(&tn.cfg)
	}
	tn.start()
	t.Cleanup(tn.stop)
	return tn
}

func (tn *testNode) start() {
	tn.t.Helper()
	st, err := store.Open(tn.path, store.Options{NoSync: true, MaxBatchDelay: 100 * time.Microsecond})
	if err != nil {
		tn.t.Fatal(err)
	}
	r, err := Start(st, tn.cfg)
	if err != nil {
		st.Close()
		tn.t.Fatal(err)
	}
	tn.st, tn.r = st, r
}

// stop leaves and closes the store (idempotent).
func (tn *testNode) stop() {
	if tn.r != nil {
		if err := tn.r.Close(); err != nil && !errors.Is(err, ErrClosed) {
			tn.t.Log(err)
		}
		tn.st.Close()
		tn.r = nil
	}
}

// kill stops the node as kill -9 would: no leave message; the store
// file stays as last committed.
func (tn *testNode) kill() {
	r := tn.r
	r.closed.Store(true)
	r.ml.Shutdown()
	close(r.stop)
	r.wg.Wait()
	tn.st.Close()
	tn.r = nil
}

func (tn *testNode) port() int {
	_, p, _ := net.SplitHostPort(tn.r.Addr())
	var n int
	fmt.Sscan(p, &n)
	return n
}

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func aliveCount(r *Replicator) int {
	n := 0
	for _, m := range r.Members() {
		if m.State == StateAlive {
			n++
		}
	}
	return n
}

func waitMembers(t testing.TB, nodes ...*testNode) {
	t.Helper()
	eventually(t, 10*time.Second, "all members alive", func() bool {
		for _, n := range nodes {
			if aliveCount(n.r) != len(nodes) {
				return false
			}
		}
		return true
	})
}

func owner(n int) store.Owner {
	return store.Owner{Node: fmt.Sprintf("node%d", n), PID: 1000 + n, Incarnation: 1}
}

// qpOn is a default QP on node n's port.
func qpOn(n, i int) store.QPKey {
	return store.QPKey{GID: nodeGID(n), LID: uint16(100 + n), QPN: uint32(0x1000 + i)}
}

func backup(i int) store.QPBackup {
	return store.QPBackup{Device: "mlx5_1", Port: 1, LID: uint16(2000 + i), QPN: uint32(0x2000 + i)}
}

func routeOf(n int) Route { return Route{GID: nodeGID(n)} }

// sameState reports whether two stores hold the same entries and
// tombstones.
func sameState(a, b *store.Store) bool {
	da, db := a.Digests(), b.Digests()
	if len(da) != len(db) {
		return false
	}
	for i := range da {
		if da[i] != db[i] {
			return false
		}
	}
	return true
}

// logCounter is a testing.TB that counts its Log calls.
type logCounter struct {
	testing.TB
	logs int
}

func (c *logCounter) Log(args ...any) { c.logs++ }

// TestTestLogWriterEnds: a node's log line written after its test's
// cleanups reached the writer (a memberlist goroutine a moment late) is
// dropped, not handed to the finished test (which the race detector
// reported in the race pass).
func TestTestLogWriterEnds(t *testing.T) {
	c := &logCounter{TB: t}
	w := &tlogWriter{t: c}
	if _, err := w.Write([]byte("while the test runs")); err != nil || c.logs != 1 {
		t.Fatalf("a line while the test runs: logged %d times, err %v", c.logs, err)
	}
	w.end()
	if n, err := w.Write([]byte("late")); err != nil || n != 4 || c.logs != 1 {
		t.Fatalf("a line after the end: logged %d times in all, n %d, err %v", c.logs, n, err)
	}
}
