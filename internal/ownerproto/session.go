package ownerproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/store"
)

// Handler carries out a command on one of the owner's QPs. It runs on the
// session's command goroutine, one command at a time, in arrival order.
type Handler func(Command) Result

// Session is the owner side of the protocol.
type Session struct {
	c       *Conn
	handler Handler
	welcome Welcome
	proto   int // the session's protocol: the hello's, at most the welcome's

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan Msg
	err     error

	cmds chan Msg
	done chan struct{}
	wg   sync.WaitGroup
}

// ErrRefused: the daemon answered the hello, or a request, with an
// error: asking again gets the same answer.
var ErrRefused = errors.New("ownerproto: refused by ibpathd")

// Dial connects to the daemon's socket, upgrades to the owner protocol,
// says hello and waits for the welcome. A hello without a protocol says
// Proto; an ibpathd older than this package refuses it, naming the
// protocols it speaks, and Dial says hello again with the newest of
// those (an upgrade installs the new library before the old ibpathd is
// restarted: its processes keep their sessions, without what the newer
// protocol adds).
func Dial(ctx context.Context, socket string, hello Hello, h Handler) (*Session, error) {
	pinned := hello.Proto != 0
	s, err := dial(ctx, socket, hello, h)
	if err == nil || pinned || !errors.Is(err, ErrRefused) {
		return s, err
	}
	var who, lo, hi int
	if n, _ := fmt.Sscanf(refusedProto(err.Error()), RefuseProto, &who, &lo, &hi); n != 3 ||
		hi >= Proto || hi < ProtoMin || lo > hi {
		return nil, err
	}
	hello.Proto = hi
	return dial(ctx, socket, hello, h)
}

// RefuseProto is ibpathd's refusal of a hello whose protocol it does
// not speak: the hello's, then the oldest and newest it speaks. Dial
// reads it back.
const RefuseProto = "protocol %d not supported (this ibpathd speaks %d to %d)"

// refusedProto is the daemon's refusal in err's text, from "protocol" on.
func refusedProto(s string) string {
	if i := strings.Index(s, "protocol "); i >= 0 {
		return s[i:]
	}
	return ""
}

func dial(ctx context.Context, socket string, hello Hello, h Handler) (*Session, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("ownerproto: dial %s: %w", socket, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	br, err := upgrade(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := NewConn(nc, br)
	if hello.Proto == 0 {
		hello.Proto = Proto
	}
	if err := c.Send(Msg{Type: TypeHello, Hello: &hello}); err != nil {
		nc.Close()
		return nil, err
	}
	m, err := c.Recv()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("ownerproto: waiting for welcome: %w", err)
	}
	if m.Type == TypeError {
		nc.Close()
		return nil, fmt.Errorf("%w: %s", ErrRefused, m.Error)
	}
	if m.Type != TypeWelcome {
		nc.Close()
		return nil, fmt.Errorf("%w: got %s before welcome", ErrBadMessage, m.Type)
	}
	nc.SetDeadline(time.Time{})
	s := &Session{c: c, handler: h, welcome: *m.Welcome, proto: min(hello.Proto, m.Welcome.Proto), pending: map[uint64]chan Msg{},
		cmds: make(chan Msg, 64), done: make(chan struct{})}
	s.wg.Add(2)
	go s.readLoop()
	go s.commandLoop()
	return s, nil
}

// upgrade performs the HTTP upgrade and returns the reader holding any
// bytes the daemon sent after its 101 response.
func upgrade(nc net.Conn) (*bufio.Reader, error) {
	req, err := http.NewRequest(http.MethodGet, "http://ibpathd/v1/owner", nil)
	if err != nil {
		return nil, fmt.Errorf("ownerproto: upgrade request: %w", err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Upgrade)
	if err := req.Write(nc); err != nil {
		return nil, fmt.Errorf("ownerproto: send upgrade: %w", err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("ownerproto: read upgrade response: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("%w: upgrade answered %s: %s", ErrRefused, resp.Status, body)
	}
	return br, nil
}

// Node is the daemon's node name from its welcome.
func (s *Session) Node() string { return s.welcome.Node }

func (s *Session) readLoop() {
	defer s.wg.Done()
	defer close(s.cmds)
	for {
		m, err := s.c.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		switch m.Type {
		case TypeAck, TypeFound:
			s.mu.Lock()
			ch := s.pending[m.ID]
			delete(s.pending, m.ID)
			s.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case TypeCommand:
			select {
			case s.cmds <- m:
			default:
				s.c.Send(Msg{Type: TypeResult, ID: m.ID, Result: &Result{Error: "owner busy: too many commands queued"}})
			}
		case TypeError:
			s.fail(fmt.Errorf("%w: %s", ErrRefused, m.Error))
			return
		default:
			s.fail(fmt.Errorf("%w: unexpected %s from ibpathd", ErrBadMessage, m.Type))
			return
		}
	}
}

func (s *Session) commandLoop() {
	defer s.wg.Done()
	for m := range s.cmds {
		var r Result
		if s.handler == nil {
			r = Result{Error: "this process does not take commands"}
		} else {
			r = s.handler(*m.Command)
		}
		if err := s.c.Send(Msg{Type: TypeResult, ID: m.ID, Result: &r}); err != nil {
			s.fail(err)
		}
	}
}

// fail records the first error, closes the connection and releases every
// pending request.
func (s *Session) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("ownerproto: ibpathd closed the session: %w", err)
	}
	s.err = err
	s.c.Close()
	for id, ch := range s.pending {
		close(ch)
		delete(s.pending, id)
	}
	close(s.done)
}

// Done is closed when the session ends; Err then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended, or nil while it runs.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session and waits for its goroutines.
func (s *Session) Close() error {
	s.fail(errClosed)
	s.wg.Wait()
	return nil
}

var errClosed = errors.New("ownerproto: session closed")

// ReportQP tells the daemon about a new or changed QP.
func (s *Session) ReportQP(q status.QP) error { return s.c.Send(Msg{Type: TypeQP, QP: &q}) }

// QPGone tells the daemon a QP was destroyed.
func (s *Session) QPGone(device string, qpn uint32) error {
	return s.c.Send(Msg{Type: TypeQPGone, QPGone: &QPRef{Device: device, QPN: qpn}})
}

// Event reports a migration, failover or switch-back.
func (s *Session) Event(e status.Event) error { return s.c.Send(Msg{Type: TypeEvent, Event: &e}) }

// PublishQP stores a backup QP entry through the daemon and returns once
// it is durable there.
func (s *Session) PublishQP(ctx context.Context, p PublishQP) error {
	return s.request(ctx, Msg{Type: TypePublishQP, PublishQP: &p})
}

// PublishMR stores a backup MR entry through the daemon.
func (s *Session) PublishMR(ctx context.Context, p PublishMR) error {
	return s.request(ctx, Msg{Type: TypePublishMR, PublishMR: &p})
}

func (s *Session) request(ctx context.Context, m Msg) error { return s.call(ctx, m, nil) }

// ErrNotFound: a lookup found no entry, here or at the key's node.
var ErrNotFound = errors.New("ownerproto: not found")

// LookupQP returns the backup of a peer's QP.
func (s *Session) LookupQP(ctx context.Context, k store.QPKey) (store.QPBackup, error) {
	var r Msg
	if err := s.call(ctx, Msg{Type: TypeLookupQP, Lookup: &Lookup{QP: &k}}, &r); err != nil {
		return store.QPBackup{}, err
	}
	if r.Found == nil || r.Found.QP == nil {
		return store.QPBackup{}, fmt.Errorf("%w: QP %+v: %s", ErrNotFound, k, foundErr(r))
	}
	return *r.Found.QP, nil
}

// LookupMR returns the backup of a peer's memory region.
func (s *Session) LookupMR(ctx context.Context, k store.MRKey) (store.MRBackup, error) {
	var r Msg
	if err := s.call(ctx, Msg{Type: TypeLookupMR, Lookup: &Lookup{MR: &k}}, &r); err != nil {
		return store.MRBackup{}, err
	}
	if r.Found == nil || r.Found.MR == nil {
		return store.MRBackup{}, fmt.Errorf("%w: MR %+v: %s", ErrNotFound, k, foundErr(r))
	}
	return *r.Found.MR, nil
}

// ErrOlderDaemon: the daemon speaks a protocol older than the request's.
var ErrOlderDaemon = errors.New("ownerproto: ibpathd speaks an older protocol")

// LookupMRs returns one page of the MR entries of routes the daemon took
// after since (MRQuery). It fails with ErrOlderDaemon when the session's
// protocol has no lookup_mrs.
func (s *Session) LookupMRs(ctx context.Context, routes []Route, since uint64) (MRPage, error) {
	if s.proto < LookupMRsProto {
		return MRPage{}, fmt.Errorf("%w: lookup_mrs needs protocol %d, the session has %d", ErrOlderDaemon, LookupMRsProto, s.proto)
	}
	var r Msg
	if err := s.call(ctx, Msg{Type: TypeLookupMRs, Lookup: &Lookup{MRs: &MRQuery{Routes: routes, Since: since}}}, &r); err != nil {
		return MRPage{}, err
	}
	if r.Found == nil || r.Found.MRs == nil {
		return MRPage{}, fmt.Errorf("%w: MR entries of %d routes: %s", ErrRefused, len(routes), foundErr(r))
	}
	return *r.Found.MRs, nil
}

// LookupHCA returns the description of the adapter that holds route (a
// GID, else a LID), with its ports' current states: the adapter at the
// other end of a path, for layer 1's choice of an alternate. ErrNotFound
// when no node describes it.
func (s *Session) LookupHCA(ctx context.Context, route Route) (pathsel.HCA, error) {
	var r Msg
	if err := s.call(ctx, Msg{Type: TypeLookupHCA, Lookup: &Lookup{HCA: &route}}, &r); err != nil {
		return pathsel.HCA{}, err
	}
	if r.Found == nil || r.Found.HCA == nil {
		return pathsel.HCA{}, fmt.Errorf("%w: adapter of %s: %s", ErrNotFound, route, foundErr(r))
	}
	return r.Found.HCA.Pathsel(), nil
}

func foundErr(r Msg) string {
	if r.Found != nil {
		return r.Found.Error
	}
	return "no answer"
}

// call sends a request and waits for its reply (ack or found), stored in
// reply when not nil.
func (s *Session) call(ctx context.Context, m Msg, reply *Msg) error {
	ch := make(chan Msg, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.nextID++
	m.ID = s.nextID
	s.pending[m.ID] = ch
	s.mu.Unlock()
	if err := s.c.Send(m); err != nil {
		s.mu.Lock()
		delete(s.pending, m.ID)
		s.mu.Unlock()
		return err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("ownerproto: %s: %w", m.Type, s.Err())
		}
		if r.Ack != nil && r.Ack.Error != "" {
			return fmt.Errorf("%w: %s: %s", ErrRefused, m.Type, r.Ack.Error)
		}
		if reply != nil {
			*reply = r
		}
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pending, m.ID)
		s.mu.Unlock()
		return fmt.Errorf("ownerproto: %s: %w", m.Type, ctx.Err())
	}
}
