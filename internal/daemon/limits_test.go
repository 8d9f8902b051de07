package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
)

// rawOwner opens an owner session by hand (no reader behind it) and says
// hello as this process.
func rawOwner(t *testing.T, socket string) (net.Conn, *ownerproto.Conn) {
	t.Helper()
	nc, br := rawUpgrade(t, socket)
	c := ownerproto.NewConn(nc, br)
	h := selfHello(t)
	h.Proto = ownerproto.Proto
	if err := c.Send(ownerproto.Msg{Type: ownerproto.TypeHello, Hello: &h}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Recv(); err != nil || m.Type != ownerproto.TypeWelcome {
		t.Fatalf("welcome: %+v %v", m, err)
	}
	return nc, c
}

// rawUpgrade upgrades a new connection to the owner protocol.
func rawUpgrade(t *testing.T, socket string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: ibpathd\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", api.PathOwner, ownerproto.Upgrade)
	br := bufio.NewReader(nc)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "101") {
		t.Fatalf("upgrade: %q %v", line, err)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			return nc, br
		}
	}
}

// closedWithin reports whether the daemon closes nc within d (a read
// ends with EOF or a reset, not with our deadline).
func closedWithin(nc net.Conn, d time.Duration) bool {
	nc.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestOwnerThatReadsNothingIsCut: a process that sends lookups and reads
// no answer (200,000 of them grew ibpathd to 1.5 GB, a goroutine each)
// has its session closed once MaxInFlight answers wait, the daemon's
// goroutines stay bounded, and root's status and arm of every QP answer
// at once meanwhile.
func TestOwnerThatReadsNothingIsCut(t *testing.T) {
	d, c := testDaemon(t, nil)
	base := runtime.NumGoroutine()
	nc, oc := rawOwner(t, d.cfg.Socket)
	sent, peak := 0, 0
	for ; sent < 200000; sent++ {
		k := store.QPKey{LID: 99, QPN: uint32(sent)}
		if err := oc.SendContext(context.Background(), ownerproto.Msg{Type: ownerproto.TypeLookupQP, ID: uint64(sent + 1), Lookup: &ownerproto.Lookup{QP: &k}}); err != nil {
			break // the daemon closed the session
		}
		if sent%1000 == 0 {
			peak = max(peak, runtime.NumGoroutine())
		}
	}
	if !closedWithin(nc, 5*time.Second) {
		t.Fatalf("the session of a process that reads nothing is still open after %d lookups", sent)
	}
	if peak-base > MaxInFlight+64 {
		t.Fatalf("%d goroutines more than before, for one session (MaxInFlight %d)", peak-base, MaxInFlight)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Arm(ctx, api.Target{All: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the session's goroutines gone", func() bool { return runtime.NumGoroutine() <= base+8 })
}

// TestOwnerThatNeverAnswersDelaysOnce: a process that reads commands and
// never answers costs an action over all QPs one command timeout, not
// one per QP it reported.
func TestOwnerThatNeverAnswersDelaysOnce(t *testing.T) {
	d, c := testDaemon(t, func(cfg *Config) { cfg.CommandTimeout = 300 * time.Millisecond })
	nc, oc := rawOwner(t, d.cfg.Socket)
	for i := range uint32(20) {
		if err := oc.Send(ownerproto.Msg{Type: ownerproto.TypeQP, QP: &status.QP{Device: "mlx5_1", QPN: 0x700 + i, Port: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	go io.Copy(io.Discard, nc) // reads, never answers
	eventually(t, "the QPs reported", func() bool { n, _ := c.Status(context.Background()); return len(n.QPs) == 22 })
	start := time.Now()
	res, err := c.Arm(context.Background(), api.Target{All: true})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > 2*time.Second || res.Failed() != 20 {
		t.Fatalf("arm of every QP took %v, %d failed: %+v", took, res.Failed(), res.Results)
	}
}

// TestSocketTimeouts: a connection that sends nothing, one that trickles
// a request, and an owner session that never says hello are closed
// within their bounds.
func TestSocketTimeouts(t *testing.T) {
	d, _ := testDaemon(t, func(cfg *Config) {
		cfg.lim = timeouts{header: 300 * time.Millisecond, read: 600 * time.Millisecond, idle: 300 * time.Millisecond, hello: 300 * time.Millisecond}
	})
	idle, err := net.Dial("unix", d.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	trickle, err := net.Dial("unix", d.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer trickle.Close()
	fmt.Fprintf(trickle, "POST %s HTTP/1.1\r\nHost: ibpathd\r\nContent-Length: 1000\r\n\r\n", api.PathArm)
	go func() {
		for range 100 {
			if _, err := trickle.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	silent, _ := rawUpgrade(t, d.cfg.Socket)
	for name, nc := range map[string]net.Conn{"idle": idle, "trickling": trickle, "without hello": silent} {
		if !closedWithin(nc, 3*time.Second) {
			t.Errorf("the %s connection is still open", name)
		}
	}
}

// TestConnectionsCappedPerUser: a non-root user holds at most
// MaxConnsPerUser connections; the next is closed at once and counted,
// and one closed makes room.
func TestConnectionsCappedPerUser(t *testing.T) {
	d, _ := testDaemon(t, func(cfg *Config) { cfg.MaxConnsPerUser = 3 })
	d.conns.setCred(func(net.Conn) (api.Caller, error) { return api.Caller{UID: 1000, GID: 1000, PID: os.Getpid()}, nil })
	var held []net.Conn
	for range 3 {
		nc, err := net.Dial("unix", d.cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		held = append(held, nc)
	}
	eventually(t, "three connections counted", func() bool { return d.conns.held(1000) == 3 })
	extra, err := net.Dial("unix", d.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !closedWithin(extra, 2*time.Second) {
		t.Fatal("a fourth connection of the user was kept")
	}
	if closedWithin(held[0], 100*time.Millisecond) {
		t.Fatal("a connection within the cap was closed")
	}
	if n := d.Status().Totals.ConnectionsRefused; n != 1 {
		t.Fatalf("%d connections refused counted, want 1", n)
	}
	held[0].Close()
	eventually(t, "the closed one released", func() bool { return d.conns.held(1000) == 2 })
	again, err := net.Dial("unix", d.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if closedWithin(again, 200*time.Millisecond) {
		t.Fatal("no room after a connection closed")
	}
}
