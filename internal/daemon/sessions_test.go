package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
)

// What an attached process costs ibpathd (docs/PERFORMANCE.md, "ibpathd
// with shim sessions"). A shim sends the daemon nothing periodic but two
// kinds of lookup: lookup_qp for each backup whose peer is not known yet
// (every 2 s at the scan's slowest), and lookup_hca for the adapter at
// the other end of a path (layer 1, every probe of a QP away from home or
// without an alternate, at most every 250 ms per route through the
// shim's cache). The adapter at the other end is on another node: it
// takes no read of this node's devices.

// hwPair starts two daemons on InfiniBand sysfs fixtures (node0:
// mlx4-dual, LIDs 0x1a-0x1b; node1: mlx5-ib, LIDs 0x8-0xf), replicating
// with a cluster key, port polls every poll.
func hwPair(tb testing.TB, poll time.Duration) (*Daemon, *Daemon) {
	tb.Helper()
	dir := tb.TempDir()
	key := filepath.Join(dir, "cluster.key")
	if err := os.WriteFile(key, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	start := func(node, tree string, join []string) *Daemon {
		root := filepath.Join(tb.TempDir(), tree)
		if out, err := exec.Command("cp", "-a", filepath.Join("..", "..", "pathsel", "testdata", "sysfs", tree), root).CombinedOutput(); err != nil {
			tb.Fatalf("cp fixture %s: %v: %s", tree, err, out)
		}
		sd := filepath.Join(dir, node)
		d, err := New(Config{Node: node, Socket: filepath.Join(sd, "ibpathd.sock"), StateDir: sd, Fabric: "hardware", Sysfs: root,
			PortPoll: poll, Repl: ReplConfig{Bind: "127.0.0.1:0", KeyFile: key, Join: join}}, nil)
		if err != nil {
			tb.Fatal(err)
		}
		serve(tb, d)
		return d
	}
	d0 := start("node0", "mlx4-dual", nil)
	d1 := start("node1", "mlx5-ib", []string{d0.repl.Repl().Addr})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := d0.repl.Peers()
		if len(ps) == 1 && ps[0].State == "alive" {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("node1 never alive in node0's view: %+v", ps)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return d0, d1
}

// TestLookupHCAOfAnotherNodeReadsNoDevice: lookup_hca of a route held by
// another node is answered without reading this node's devices (the
// port poll's inventory says the route is not local), however often a
// shim asks; a route of this node is still described with its ports'
// states of the moment, one read per request.
func TestLookupHCAOfAnotherNodeReadsNoDevice(t *testing.T) {
	d0, d1 := hwPair(t, time.Hour)
	ctx, s := dialOwner(t, d0)
	remote := d1.invPort(t, "mlx5_1", 1)
	for i := range 50 {
		h, err := s.LookupHCA(ctx, ownerproto.Route{LID: remote.LID + uint16(i%4)})
		if err != nil || h.Name != "mlx5_1" {
			t.Fatalf("lookup %d of node1's LID %#x: %+v, %v", i, remote.LID+uint16(i%4), h, err)
		}
	}
	if _, err := s.LookupHCA(ctx, ownerproto.Route{LID: 0x7fff}); err == nil || !strings.Contains(err.Error(), "no live member holds the route") {
		t.Fatalf("a LID nobody holds: %v", err)
	}
	if n := d0.describeReads.Load(); n != 0 {
		t.Fatalf("51 lookups of routes node0 does not hold read node0's devices %d times, want 0", n)
	}
	if n := d1.describeReads.Load(); n < 4 || n > 8 {
		t.Fatalf("node1 read its devices %d times to describe its 4 LIDs, want once per LID (node0 caches each answer 1 s)", n)
	}
	local := d0.invPort(t, "mlx4_0", 1)
	for range 3 {
		h, err := s.LookupHCA(ctx, ownerproto.Route{LID: local.LID})
		if err != nil || h.Name != "mlx4_0" {
			t.Fatalf("node0's own LID: %+v, %v", h, err)
		}
	}
	if n := d0.describeReads.Load(); n != 3 {
		t.Fatalf("3 lookups of node0's own LID read its devices %d times, want 3 (states of the moment)", n)
	}
}

// TestIdleOwnersAddNoPeriodicWork: owners attached and quiet (their QPs
// reported, their entries published) make the daemon do nothing per
// poll: the port poll reads what it reads without them, and nothing is
// written, pushed or pulled.
func TestIdleOwnersAddNoPeriodicWork(t *testing.T) {
	d0, _ := hwPair(t, 10*time.Millisecond)
	ctx, s := dialOwner(t, d0)
	for q := uint32(0x40); q < 0x44; q++ {
		if err := s.ReportQP(status.QP{Device: "mlx4_0", QPN: q, Port: 1, APM: "armed"}); err != nil {
			t.Fatal(err)
		}
		if err := s.PublishQP(ctx, ownerproto.PublishQP{Key: store.QPKey{LID: 0x1a, QPN: q},
			Backup: store.QPBackup{Device: "mlx4_0", Port: 2, LID: 0x1b, QPN: q + 0x100}, Remote: ownerproto.Route{LID: 0x8}}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the QPs in the status", func() bool { return len(d0.Status().QPs) == 4 })
	rs := d0.repl.(replicated).r
	before, polls0 := rs.Stats(), d0.poll.lightReads.Load()+d0.poll.fullReads.Load()
	reads0 := d0.describeReads.Load()
	time.Sleep(300 * time.Millisecond)
	after, polls := rs.Stats(), d0.poll.lightReads.Load()+d0.poll.fullReads.Load()-polls0
	if polls < 5 {
		t.Fatalf("only %d polls in 300 ms at 10 ms", polls)
	}
	if after.PushesSent != before.PushesSent || after.Pulls != before.Pulls || after.Describes != before.Describes {
		t.Fatalf("quiet owners made replication work: %+v, then %+v", before, after)
	}
	if n := d0.describeReads.Load() - reads0; n != 0 {
		t.Fatalf("quiet owners made %d device reads besides the poll's", n)
	}
}

// TestPprofListen: --pprof-addr serves the Go profiles on TCP; without it
// nothing is served.
func TestPprofListen(t *testing.T) {
	d, _ := testDaemon(t, func(c *Config) { c.PprofListen = "127.0.0.1:0" })
	if d.pprofAddr == "" {
		t.Fatal("no pprof address")
	}
	resp, err := http.Get("http://" + d.pprofAddr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "watchPorts") {
		t.Fatalf("goroutine profile: %s\n%.300s", resp.Status, b)
	}
	d2, _ := testDaemon(t, nil)
	if d2.pprofAddr != "" || d2.pprof != nil {
		t.Fatalf("profiles served without --pprof-addr: %q", d2.pprofAddr)
	}
}

// steadyOwner is what a shim on node0 sends while its program runs and
// nothing fails (the child role "steady-owner"): its QPs reported and
// published, then the lookups of layer 1's probes and of the backups
// whose peer is not known, until stdin closes.
func steadyOwner(socket string) int {
	ctx := context.Background()
	inc, err := ownerproto.StartTime(os.Getpid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := ownerproto.Dial(ctx, socket, ownerproto.Hello{PID: os.Getpid(), Incarnation: inc, Comm: "steady"}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	peer := ownerproto.Route{LID: 0x8} // node1's mlx5_0
	for i := range uint32(2) {
		qpn := uint32(os.Getpid()&0xffff)<<4 | i
		s.ReportQP(status.QP{Device: "mlx4_0", QPN: qpn, Port: 1, APM: "armed"})
		if err := s.PublishQP(ctx, ownerproto.PublishQP{Key: store.QPKey{LID: 0x1a, QPN: qpn},
			Backup: store.QPBackup{Device: "mlx4_0", Port: 2, LID: 0x1b, QPN: qpn + 1}, Remote: peer}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println("attached")
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	probe, scan := time.NewTicker(250*time.Millisecond), time.NewTicker(2*time.Second)
	defer probe.Stop()
	defer scan.Stop()
	for {
		select {
		case <-stop:
			return 0
		case <-probe.C:
			c, cancel := context.WithTimeout(ctx, time.Second)
			s.LookupHCA(c, peer)
			cancel()
		case <-scan.C:
			c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			s.LookupQP(c, store.QPKey{LID: 0x8, QPN: 0x99})
			cancel()
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkOwnerSessionsCPU measures the CPU time of a two-node cluster
// (both daemons run in this process; the owners are child processes of
// their own, as every shim is) per second of wall time, with 0, 1 and 4
// steady owners attached to node0. Each iteration is one second.
//
//	go test -run '^$' -bench OwnerSessionsCPU -benchtime 20x ./internal/daemon
func BenchmarkOwnerSessionsCPU(b *testing.B) {
	for _, n := range []int{0, 1, 4} {
		b.Run("owners="+strconv.Itoa(n), func(b *testing.B) {
			d0, _ := hwPair(b, time.Second)
			for range n {
				cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
				cmd.Env = append(os.Environ(), roleEnv+"=steady-owner", "IBPATHD_TEST_SOCKET="+d0.cfg.Socket)
				stdin, err := cmd.StdinPipe()
				if err != nil {
					b.Fatal(err)
				}
				out, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { stdin.Close(); cmd.Wait() })
				if l, _ := bufio.NewReader(out).ReadString('\n'); l != "attached\n" {
					b.Fatalf("owner said %q", l)
				}
			}
			time.Sleep(time.Second)
			c0, w0 := cpuTime(), time.Now()
			for b.Loop() {
				time.Sleep(time.Second)
			}
			b.ReportMetric(float64((cpuTime()-c0).Microseconds())/time.Since(w0).Seconds()/1000, "cpu-ms/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkLookupHCA times one lookup_hca through an owner session on
// node0 (both daemons in this process): of node1's LID (answered from
// node0's 1 s cache of node1's description after the first), the same
// with the device read that every such lookup made before (a light read
// of node0's ports and the comparison with its inventory, as
// currentInventory makes it), and of node0's own LID (that read, needed
// for the states of the moment).
//
//	go test -run '^$' -bench LookupHCA -count 5 ./internal/daemon
func BenchmarkLookupHCA(b *testing.B) {
	d0, d1 := hwPair(b, time.Hour)
	ctx := context.Background()
	s, err := ownerproto.Dial(ctx, d0.cfg.Socket, selfHello(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	remote := ownerproto.Route{LID: d1.invPort(b, "mlx5_0", 1).LID}
	local := ownerproto.Route{LID: d0.invPort(b, "mlx4_0", 1).LID}
	run := func(b *testing.B, r ownerproto.Route, readFirst bool) {
		reads0 := d0.describeReads.Load()
		for b.Loop() {
			if readFirst {
				d0.currentInventory()
			}
			if _, err := s.LookupHCA(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(d0.describeReads.Load()-reads0)/float64(b.N), "reads/op")
	}
	b.Run("other-node", func(b *testing.B) { run(b, remote, false) })
	b.Run("other-node-with-read", func(b *testing.B) { run(b, remote, true) })
	b.Run("this-node", func(b *testing.B) { run(b, local, false) })
}
