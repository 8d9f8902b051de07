package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
)

// loadOwners attaches n owners of per QPs each to d, in this process:
// each is a session over a pipe whose far end answers every command at
// once, as a shim does (a stand-in for n processes; the hello checks of
// a real attach are skipped).
func loadOwners(tb testing.TB, d *Daemon, n, per int) {
	tb.Helper()
	for i := range n {
		near, far := net.Pipe()
		tb.Cleanup(func() { near.Close(); far.Close() })
		o := &owner{c: ownerproto.NewConn(near, nil), caller: api.Caller{UID: 1000, PID: 1_000_000 + i},
			hello: ownerproto.Hello{PID: 1_000_000 + i, Incarnation: 1, Comm: "load"}, attached: time.Now(),
			qps: map[qpRef]status.QP{}, waiting: map[uint64]chan ownerproto.Result{}}
		d.owners.mu.Lock()
		d.owners.byID[o.hello.PID] = o
		d.owners.mu.Unlock()
		for k := range per {
			q := status.QP{Device: "mlx5_1", QPN: uint32(0x10000 + i*per + k), Port: 1, Layer: status.LayerAPM, APM: "armed",
				Primary: status.Path{Device: "mlx5_1", Port: 1}, Alternate: status.Path{Device: "mlx5_1", Port: 2}, Home: status.Path{Device: "mlx5_1", Port: 1}}
			if err := d.claimQP(o, q); err != nil {
				tb.Fatal(err)
			}
		}
		go func() {
			defer near.Close()
			d.ownerLoop(o, d.log)
		}()
		go func() {
			c := ownerproto.NewConn(far, nil)
			for {
				m, err := c.Recv()
				if err != nil {
					return
				}
				if m.Type == ownerproto.TypeCommand {
					c.Send(ownerproto.Msg{Type: ownerproto.TypeResult, ID: m.ID, Result: &ownerproto.Result{OK: true}})
				}
			}
		}()
	}
}

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDaemonLoad: ibpathd with 1,000 attached owners of 100 QPs
// each (100,000 QPs): the time of the status `ibpath status` asks for
// (100 QP rows and every count, through the socket), of the whole status
// (built, and served as JSON through the socket, as `ibpath status
// --json` reads it), the heap it holds, its CPU while idle, and an arm
// of every QP relayed to every owner.
func BenchmarkDaemonLoad(b *testing.B) {
	owners, per := 1000, 100
	d, c := testDaemon(b, nil)
	loadOwners(b, d, owners, per)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ResetTimer()
	var build, served, short time.Duration
	for range b.N {
		t0 := time.Now()
		if n, err := c.StatusQPs(context.Background(), 100); err != nil || len(n.QPs) != 100 || n.QPsTotal < owners*per {
			b.Fatalf("status of 100 rows: %d rows of %d, %v", len(n.QPs), n.QPsTotal, err)
		}
		short += time.Since(t0)
		t0 = time.Now()
		n := d.Status()
		build += time.Since(t0)
		if len(n.QPs) < owners*per {
			b.Fatalf("%d QPs in status", len(n.QPs))
		}
		t0 = time.Now()
		if _, err := c.Status(context.Background()); err != nil {
			b.Fatal(err)
		}
		served += time.Since(t0)
	}
	b.StopTimer()
	b.ReportMetric(float64(build.Milliseconds())/float64(b.N), "ms/status-built")
	b.ReportMetric(float64(served.Milliseconds())/float64(b.N), "ms/status-served")
	b.ReportMetric(float64(short.Microseconds())/1000/float64(b.N), "ms/status-100-served")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "MB-heap")
	if st, err := os.ReadFile("/proc/self/statm"); err == nil {
		var size, rss int64
		fmt.Sscan(string(st), &size, &rss)
		b.ReportMetric(float64(rss*int64(os.Getpagesize()))/(1<<20), "MB-rss")
	}
	c0, t0 := cpu(), time.Now()
	time.Sleep(3 * time.Second)
	b.ReportMetric(float64(cpu()-c0)/float64(time.Since(t0))*100, "%cpu-idle")
	t0 = time.Now()
	res, err := d.Arm(context.Background(), api.Caller{UID: 0}, api.ActionRequest{Target: api.Target{All: true}})
	if err != nil || len(res.Results) < owners*per || res.Failed() != 0 {
		b.Fatalf("arm all: %d results, %d failed, %v", len(res.Results), res.Failed(), err)
	}
	b.ReportMetric(float64(time.Since(t0).Milliseconds()), "ms/arm-all")
}

// TestStatusRows: a status asked for N QP rows (GET /v1/status?qps=N)
// lists the first N by owner, device and QPN, and still counts every QP
// (QPsTotal, Layers, armed QPs); a bad N is a 400; no N lists them all.
func TestStatusRows(t *testing.T) {
	d, c := testDaemon(t, nil)
	loadOwners(t, d, 3, 5)
	ctx := context.Background()
	all, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.QPs) != 17 || all.QPsTotal != 17 {
		t.Fatalf("the whole status: %d rows, %d QPs", len(all.QPs), all.QPsTotal)
	}
	for _, rows := range []int{0, 1, 4, 9, 17, 50} {
		n, err := c.StatusQPs(ctx, rows)
		if err != nil {
			t.Fatal(err)
		}
		want := min(rows, 17)
		// the owners' 15 QPs are armed for good; the simulated workload's
		// two may be re-arming at one call and armed at the next
		if len(n.QPs) != want || n.QPsTotal != 17 || n.Layers[status.LayerAPM] != all.Layers[status.LayerAPM] ||
			n.Totals.ArmedQPs < 15 || len(n.Owners) != 3 || n.Owners[0].QPs != 5 {
			t.Fatalf("qps=%d: %d rows, %d QPs, layers %v, %d armed, owners %+v", rows, len(n.QPs), n.QPsTotal, n.Layers, n.Totals.ArmedQPs, n.Owners)
		}
		for i, q := range n.QPs {
			if q.Device != all.QPs[i].Device || q.QPN != all.QPs[i].QPN {
				t.Fatalf("qps=%d: row %d is %+v, the whole status has %+v", rows, i, q, all.QPs[i])
			}
		}
	}
	if _, err := c.StatusQPs(ctx, -1); err != nil {
		t.Fatal(err)
	}
	raw, err := rawGet(d.cfg.Socket, api.PathStatus+"?qps=-2")
	if err != nil || !strings.Contains(raw, "400") {
		t.Fatalf("qps=-2: %q %v", raw, err)
	}
}

// rawGet sends GET path on the socket and returns the status line.
func rawGet(socket, path string) (string, error) {
	nc, err := net.Dial("unix", socket)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: ibpathd\r\nConnection: close\r\n\r\n", path)
	line, err := bufio.NewReader(nc).ReadString('\n')
	return line, err
}
