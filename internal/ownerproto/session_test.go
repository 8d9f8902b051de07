package ownerproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// oldDaemon serves the owner protocol's hello as an ibpathd that speaks
// protocols 1 to max does: a hello of a newer protocol is refused with
// its words, any other gets the welcome. It records every hello's
// protocol.
type oldDaemon struct {
	max    int
	refuse string // when set, every hello is refused with it
	mu     sync.Mutex
	protos []int
}

func (d *oldDaemon) serve(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go d.session(nc)
		}
	}()
	return sock
}

func (d *oldDaemon) session(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	if _, err := http.ReadRequest(br); err != nil {
		return
	}
	if _, err := nc.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + Upgrade + "\r\n\r\n")); err != nil {
		return
	}
	c := NewConn(nc, br)
	m, err := c.Recv()
	if err != nil || m.Hello == nil {
		return
	}
	d.mu.Lock()
	d.protos = append(d.protos, m.Hello.Proto)
	d.mu.Unlock()
	switch {
	case d.refuse != "":
		c.Send(Msg{Type: TypeError, Error: d.refuse})
		return
	case m.Hello.Proto > d.max:
		c.Send(Msg{Type: TypeError, Error: fmt.Sprintf(RefuseProto, m.Hello.Proto, 1, d.max)})
		return
	}
	c.Send(Msg{Type: TypeWelcome, Welcome: &Welcome{Proto: d.max, Node: "old"}})
	for {
		if _, err := c.Recv(); err != nil {
			return
		}
	}
}

func (d *oldDaemon) hellos() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.protos...)
}

// TestDialStepsDownToAnOlderDaemon: a library newer than ibpathd (an
// upgrade installs it before the old ibpathd restarts) says hello with
// its protocol, is refused, and says hello again with the newest the
// daemon named; a protocol the caller pinned, or a refusal of another
// kind, is not tried again.
func TestDialStepsDownToAnOlderDaemon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &oldDaemon{max: 2}
	sock := d.serve(t)
	s, err := Dial(ctx, sock, Hello{PID: 1}, nil)
	if err != nil {
		t.Fatalf("dial an ibpathd of protocol 2: %v", err)
	}
	// what protocol 4 adds is not asked of it
	if _, err := s.LookupMRs(ctx, []Route{{LID: 1}}, 0); !errors.Is(err, ErrOlderDaemon) {
		t.Fatalf("lookup_mrs on a protocol 2 session: %v, want ErrOlderDaemon", err)
	}
	s.Close()
	if got := d.hellos(); len(got) != 2 || got[0] != Proto || got[1] != 2 {
		t.Fatalf("hellos %v, want [%d 2]", got, Proto)
	}

	d2 := &oldDaemon{max: 2}
	if _, err := Dial(ctx, d2.serve(t), Hello{PID: 1, Proto: 3}, nil); !errors.Is(err, ErrRefused) || len(d2.hellos()) != 1 {
		t.Fatalf("a pinned protocol: %v after hellos %v, want one refusal", err, d2.hellos())
	}
	d3 := &oldDaemon{max: 2, refuse: "pid 1 is not the caller"}
	if _, err := Dial(ctx, d3.serve(t), Hello{PID: 1}, nil); !errors.Is(err, ErrRefused) || len(d3.hellos()) != 1 {
		t.Fatalf("another refusal: %v after hellos %v, want one", err, d3.hellos())
	}
	d4 := &oldDaemon{max: 0} // names no protocol this package speaks
	if _, err := Dial(ctx, d4.serve(t), Hello{PID: 1}, nil); !errors.Is(err, ErrRefused) || len(d4.hellos()) != 1 {
		t.Fatalf("a daemon of no common protocol: %v after hellos %v, want one", err, d4.hellos())
	}
}
