package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
)

// owner is one process attached over the owner protocol.
type owner struct {
	c        *ownerproto.Conn
	caller   api.Caller
	hello    ownerproto.Hello
	attached time.Time

	mu       sync.Mutex
	qps      map[qpRef]status.QP
	nextID   uint64
	waiting  map[uint64]chan ownerproto.Result
	inflight int // lookups being answered (MaxInFlight)
	gone     bool
}

// MaxInFlight bounds the lookups of one owner session being answered at
// once. A shim waits for each answer (at most a few at a time); a session
// with more is closed: its process sends requests without reading the
// answers, and each would hold a goroutine and its answer.
const MaxInFlight = 256

// HelloTimeout bounds the wait for an owner session's hello.
const HelloTimeout = 10 * time.Second

// begin counts a lookup in flight; false when the session has too many.
func (o *owner) begin() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inflight >= MaxInFlight {
		return false
	}
	o.inflight++
	return true
}

func (o *owner) end() {
	o.mu.Lock()
	o.inflight--
	o.mu.Unlock()
}

type qpRef struct {
	dev string
	qpn uint32
}

func (o *owner) storeOwner(node string) store.Owner {
	return store.Owner{Node: node, PID: o.hello.PID, Incarnation: o.hello.Incarnation}
}

// command sends a command to the owner and waits for its result.
func (o *owner) command(ctx context.Context, cmd ownerproto.Command) (ownerproto.Result, error) {
	ch := make(chan ownerproto.Result, 1)
	o.mu.Lock()
	if o.gone {
		o.mu.Unlock()
		return ownerproto.Result{}, &api.Error{Code: api.CodeOwnerGone, Message: fmt.Sprintf("owner pid %d has detached", o.hello.PID)}
	}
	o.nextID++
	id := o.nextID
	o.waiting[id] = ch
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.waiting, id)
		o.mu.Unlock()
	}()
	if err := o.c.SendContext(ctx, ownerproto.Msg{Type: ownerproto.TypeCommand, ID: id, Command: &cmd}); err != nil {
		return ownerproto.Result{}, &api.Error{Code: api.CodeOwnerGone, Message: fmt.Sprintf("owner pid %d: %v", o.hello.PID, err)}
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return ownerproto.Result{}, &api.Error{Code: api.CodeOwnerGone, Message: fmt.Sprintf("owner pid %d detached before answering", o.hello.PID)}
		}
		return r, nil
	case <-ctx.Done():
		return ownerproto.Result{}, &api.Error{Code: api.CodeOwnerTimeout, Message: fmt.Sprintf("owner pid %d did not answer %s of %s QP %#x: %v", o.hello.PID, cmd.Op, cmd.Device, cmd.QPN, ctx.Err())}
	}
}

// owners is the registry of attached processes.
type owners struct {
	mu   sync.Mutex
	byID map[int]*owner   // by pid
	byQP map[qpRef]*owner // who reported each QP (ownerauth.go)
}

func (r *owners) list() []*owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*owner, 0, len(r.byID))
	for _, o := range r.byID {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].hello.PID < out[j].hello.PID })
	return out
}

// serveOwner runs one owner session until it ends. caller are the
// connection's credentials.
func (d *Daemon) serveOwner(c *ownerproto.Conn, caller api.Caller) {
	defer c.Close()
	log := d.log.With("owner_pid", caller.PID, "uid", caller.UID)
	if err := c.SetReadDeadline(time.Now().Add(d.cfg.lim.hello)); err != nil {
		log.Warn("owner session: set the hello deadline", "err", err)
		return
	}
	m, err := c.Recv()
	if err != nil {
		d.ownerRefused(log, "owner session: no hello", err)
		return
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		log.Warn("owner session: clear the hello deadline", "err", err)
		return
	}
	refuse := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		d.ownerRefused(log, "owner session refused", errors.New(msg))
		_ = c.Send(ownerproto.Msg{Type: ownerproto.TypeError, Error: msg})
	}
	if m.Type != ownerproto.TypeHello {
		refuse("the first message must be hello, not %s", m.Type)
		return
	}
	h := *m.Hello
	if h.Proto < ownerproto.ProtoMin || h.Proto > ownerproto.Proto {
		refuse(ownerproto.RefuseProto, h.Proto, ownerproto.ProtoMin, ownerproto.Proto)
		return
	}
	if h.PID != caller.PID {
		refuse("hello names pid %d but the connection belongs to pid %d", h.PID, caller.PID)
		return
	}
	if st, err := ownerproto.StartTime(caller.PID); err != nil || st != h.Incarnation {
		refuse("incarnation %d is not the start time of pid %d (%d, %v)", h.Incarnation, caller.PID, st, err)
		return
	}
	o := &owner{c: c, caller: caller, hello: h, attached: time.Now(), qps: map[qpRef]status.QP{}, waiting: map[uint64]chan ownerproto.Result{}}
	d.owners.mu.Lock()
	if old := d.owners.byID[h.PID]; old != nil {
		d.owners.mu.Unlock()
		refuse("pid %d already has a session", h.PID)
		return
	}
	d.owners.byID[h.PID] = o
	d.owners.mu.Unlock()
	if err := c.Send(ownerproto.Msg{Type: ownerproto.TypeWelcome, Welcome: &ownerproto.Welcome{Proto: ownerproto.Proto, Node: d.cfg.Node}}); err != nil {
		log.Warn("owner session: welcome", "err", err)
	}
	log.Info("owner attached", "incarnation", h.Incarnation, "comm", h.Comm, "proto", h.Proto)
	go func() {
		d.drainNewOwner(o)
		d.viewsNewOwner(o)
	}()
	err = d.ownerLoop(o, log)
	d.detach(o, err, log)
}

func (d *Daemon) ownerLoop(o *owner, log *slog.Logger) error {
	for {
		m, err := o.c.Recv()
		if err != nil {
			return err
		}
		switch m.Type {
		case ownerproto.TypeQP:
			if err := d.claimQP(o, *m.QP); err != nil {
				d.ownerRefused(log, "QP report refused", err)
			}
		case ownerproto.TypeQPGone:
			d.releaseQP(o, qpRef{m.QPGone.Device, m.QPGone.QPN})
		case ownerproto.TypeEvent:
			if err := d.mayReport(o, *m.Event); err != nil {
				d.ownerRefused(log, "event refused", err)
				continue
			}
			d.event(*m.Event)
		case ownerproto.TypePublishQP, ownerproto.TypePublishMR:
			ack := ownerproto.Ack{}
			if err := d.mayPublish(o, m); err != nil {
				ack.Error = err.Error()
				d.ownerRefused(log, "publish refused", err)
			} else if err := d.publish(o, m); err != nil {
				ack.Error = err.Error()
				log.Warn("publish failed", "err", err)
			}
			if err := o.c.Send(ownerproto.Msg{Type: ownerproto.TypeAck, ID: m.ID, Ack: &ack}); err != nil {
				return err
			}
		case ownerproto.TypeLookupQP, ownerproto.TypeLookupMR, ownerproto.TypeLookupHCA, ownerproto.TypeLookupMRs:
			if !o.begin() {
				return fmt.Errorf("more than %d lookups in flight (the process does not read the answers): the session is closed", MaxInFlight)
			}
			answer := d.lookup
			switch m.Type {
			case ownerproto.TypeLookupHCA:
				answer = d.lookupHCA
			case ownerproto.TypeLookupMRs:
				answer = d.lookupMRs
			}
			go func() {
				defer o.end()
				answer(o, m)
			}()
		case ownerproto.TypeResult:
			o.mu.Lock()
			ch := o.waiting[m.ID]
			o.mu.Unlock()
			if ch != nil {
				ch <- *m.Result
			}
		default:
			return fmt.Errorf("unexpected %s from an owner", m.Type)
		}
	}
}

// lookupTimeout bounds a lookup that has to pull from a peer.
const lookupTimeout = 5 * time.Second

// lookup answers a lookup, off the session's read loop: a miss may wait
// for a peer.
func (d *Daemon) lookup(o *owner, m ownerproto.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	var f ownerproto.Found
	if k := m.Lookup.QP; k != nil {
		v, err := d.repl.LookupQP(ctx, *k)
		if err != nil {
			f.Error = err.Error()
		} else {
			f.QP = &v
		}
	} else {
		v, err := d.repl.LookupMR(ctx, *m.Lookup.MR)
		if err != nil {
			f.Error = err.Error()
		} else {
			f.MR = &v
		}
	}
	if err := o.c.Send(ownerproto.Msg{Type: ownerproto.TypeFound, ID: m.ID, Found: &f}); err != nil {
		d.log.Warn("lookup reply", "owner_pid", o.hello.PID, "err", err)
	}
}

// lookupMRs answers lookup_mrs from the store's memory: one page of the
// MR entries of the asked routes that it took after the query's mark.
func (d *Daemon) lookupMRs(o *owner, m ownerproto.Msg) {
	q := m.Lookup.MRs
	ports := make([]store.Port, len(q.Routes))
	for i, r := range q.Routes {
		ports[i] = store.Port{GID: r.GID, LID: r.LID}
	}
	var f ownerproto.Found
	es, next, more, err := d.repl.Store().MRsSince(ports, q.Since, ownerproto.MaxPageMRs)
	if err != nil {
		f.Error = err.Error()
	} else {
		p := &ownerproto.MRPage{Next: next, More: more, MRs: make([]ownerproto.PeerMR, len(es))}
		for i, e := range es {
			p.MRs[i] = ownerproto.PeerMR{Key: e.Key, Backup: e.Value}
		}
		f.MRs = p
	}
	if err := o.c.Send(ownerproto.Msg{Type: ownerproto.TypeFound, ID: m.ID, Found: &f}); err != nil {
		d.log.Warn("lookup_mrs reply", "owner_pid", o.hello.PID, "err", err)
	}
}

func (d *Daemon) publish(o *owner, m ownerproto.Msg) error {
	so := o.storeOwner(d.cfg.Node)
	if p := m.PublishQP; p != nil {
		return d.repl.PublishQP(so, p.Key, p.Backup, p.Remote)
	}
	p := m.PublishMR
	return d.repl.PublishMR(so, p.Key, p.Backup, p.Remotes)
}

// detach forgets an owner whose session ended. Its store entries are
// removed when the process is gone (it died, or it closed cleanly); a live
// process that merely lost its connection keeps them and reattaches.
func (d *Daemon) detach(o *owner, err error, log *slog.Logger) {
	d.owners.mu.Lock()
	if d.owners.byID[o.hello.PID] == o {
		delete(d.owners.byID, o.hello.PID)
	}
	d.releaseAll(o)
	d.owners.mu.Unlock()
	o.mu.Lock()
	o.gone = true
	for _, ch := range o.waiting {
		close(ch)
	}
	o.waiting = map[uint64]chan ownerproto.Result{}
	o.mu.Unlock()
	if err != nil && !errors.Is(err, io.EOF) {
		log.Warn("owner session ended", "err", err)
	}
	if alive, aerr := ownerproto.Alive(o.hello.PID, o.hello.Incarnation); aerr == nil && alive {
		// A process closes its files before it becomes a zombie, so an
		// exiting owner usually still looks alive here: watch it.
		log.Info("owner detached; the process lives, its entries are kept while it does")
		d.wg.Add(1)
		go d.reapLater(o, log)
		return
	}
	d.reap(o, log)
}

// reap removes the entries of an owner whose process is gone.
func (d *Daemon) reap(o *owner, log *slog.Logger) {
	n, err := d.repl.RemoveOwner(o.storeOwner(d.cfg.Node))
	if err != nil {
		log.Error("remove the entries of a dead owner", "err", err)
		return
	}
	log.Info("owner gone; its entries removed", "entries", n)
}

// reapLater watches a detached owner's process: when it ends without
// having attached again, its entries are removed. The checks back off
// from 100 ms to ReapMaxWait.
func (d *Daemon) reapLater(o *owner, log *slog.Logger) {
	defer d.wg.Done()
	wait := 100 * time.Millisecond
	for {
		select {
		case <-d.stop:
			return
		case <-time.After(wait):
		}
		d.owners.mu.Lock()
		back := d.owners.byID[o.hello.PID]
		d.owners.mu.Unlock()
		if back != nil && back.hello.Incarnation == o.hello.Incarnation {
			return // attached again: its session owns the entries now
		}
		alive, err := ownerproto.Alive(o.hello.PID, o.hello.Incarnation)
		if err == nil && !alive {
			d.reap(o, log)
			return
		}
		if wait *= 2; wait > ReapMaxWait {
			wait = ReapMaxWait
		}
	}
}

// ReapMaxWait is the longest interval between checks of a detached
// owner's process.
const ReapMaxWait = 5 * time.Second
