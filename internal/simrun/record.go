package simrun

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/shim"
	"github.com/ibpath/ibpath/internal/shim/shimtest"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/pathsel"
	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// Kind is what a Record is.
type Kind int

// Record kinds.
const (
	KindFault     Kind = iota + 1 // the caller injected a fault or repair (Text)
	KindAppEvent                  // an application read an async event (Event), or the runtime kept it (Kept)
	KindStatus                    // a runtime reported a QP's status to ibpathd (Status)
	KindEvent                     // a runtime sent ibpathd an event (Ev)
	KindLog                       // a runtime logged (Level, Text)
	KindTrace                     // the fabric traced (Trace)
	KindViolation                 // an application saw what must not be (QP, Text)
	KindSurfaced                  // an error reached an application (QP, Text)
	KindPause                     // a QP's traffic completes again after a pause of Config.PauseMin or more (QP, Pause)
)

// Record is one thing a run saw.
type Record struct {
	At    time.Duration
	Kind  Kind
	Proc  *Proc // the process it happened in (nil: the fabric, the caller)
	QP    *QP   // KindViolation, KindSurfaced
	Text  string
	Event verbs.AsyncEvent // KindAppEvent
	Kept  bool             // KindAppEvent: the runtime kept it from the application
	// Status is the QP's status (KindStatus), Ev the event (KindEvent).
	Status status.QP
	Ev     status.Event
	Level  slog.Level        // KindLog
	Attrs  map[string]string // KindLog: the line's attributes
	Trace  sim.TraceRecord   // KindTrace
	Pause  time.Duration     // KindPause: how long no completion came
}

// record stamps r with the virtual time and hands it to the observer.
func (w *World) record(r Record) {
	if r.At == 0 && r.Kind != KindTrace {
		r.At = w.Fabric.Now()
	}
	w.records++
	if w.cfg.Observe != nil {
		w.cfg.Observe(r)
	}
}

// trace is the fabric's tracer: it runs with the fabric locked.
func (w *World) trace(tr sim.TraceRecord) {
	if tr.Kind == "tx" || tr.Kind == "wc" {
		return
	}
	w.records++
	if w.cfg.Observe != nil {
		w.cfg.Observe(Record{At: tr.At, Kind: KindTrace, Trace: tr})
	}
}

// session is a process's session with its node's ibpathd: the shim's
// Reporter, Publisher (shimtest.Node over the world's cluster) and
// HCALookup (the world's adapters), every report and event recorded.
type session struct {
	*shimtest.Node
	*shimtest.Adapters
	p *Proc
}

// errDirectoryDown is what a session's lookups and publications get
// while the world's ibpathds are down (SetDirectory): the session's
// connection refused, as while ibpathd restarts.
var errDirectoryDown = fmt.Errorf("simrun: ibpathd does not answer: %w", syscall.ECONNREFUSED)

// LookupQP implements shim.Publisher.
func (s *session) LookupQP(ctx context.Context, k store.QPKey) (store.QPBackup, error) {
	if s.p.w.dirDown {
		s.refused()
		return store.QPBackup{}, errDirectoryDown
	}
	return s.Node.LookupQP(ctx, k)
}

// LookupMR implements shim.Publisher.
func (s *session) LookupMR(ctx context.Context, k store.MRKey) (store.MRBackup, error) {
	if s.p.w.dirDown {
		s.refused()
		return store.MRBackup{}, errDirectoryDown
	}
	return s.Node.LookupMR(ctx, k)
}

// LookupMRs implements shim.MRLister: the peers' MR entries fetched
// ahead fail while ibpathd is down, and a failover then looks each
// rkey up.
func (s *session) LookupMRs(ctx context.Context, routes []ownerproto.Route, since uint64) (ownerproto.MRPage, error) {
	if s.p.w.dirDown {
		return ownerproto.MRPage{}, errDirectoryDown
	}
	return s.Node.LookupMRs(ctx, routes, since)
}

// olderSession is the session of an ibpathd older than lookup_mrs
// (Config.OlderIbpathd): everything a session does but list.
type olderSession struct{ olderIbpathd }

type olderIbpathd interface {
	shim.Reporter
	shim.Publisher
	shim.HCALookup
}

// refused: a lookup layer 2 needed (a backup QP's attributes, or a
// peer's MR key for a replay) found ibpathd down. The failover that
// needed it cannot be made, so the connection's error may reach its
// applications (layer 3, as the crossnic campaign's Directory failures).
func (s *session) refused() {
	if s.p.QP == nil {
		return
	}
	why := fmt.Sprintf("a lookup of %s's layer 2 found ibpathd down", s.p.Name)
	s.p.w.AllowSurface(s.p.QP, why)
	s.p.w.AllowSurface(s.p.QP.Peer, why)
}

// PublishQP implements shim.Publisher.
func (s *session) PublishQP(ctx context.Context, m ownerproto.PublishQP) error {
	if s.p.w.dirDown {
		return errDirectoryDown
	}
	return s.Node.PublishQP(ctx, m)
}

// PublishMR implements shim.Publisher.
func (s *session) PublishMR(ctx context.Context, m ownerproto.PublishMR) error {
	if s.p.w.dirDown {
		return errDirectoryDown
	}
	return s.Node.PublishMR(ctx, m)
}

// LookupHCA implements shim.HCALookup (layer 1's description of a peer's
// adapter).
func (s *session) LookupHCA(ctx context.Context, r ownerproto.Route) (pathsel.HCA, error) {
	if s.p.w.dirDown {
		return pathsel.HCA{}, errDirectoryDown
	}
	return s.Adapters.LookupHCA(ctx, r)
}

// ReportQP implements shim.Reporter.
func (s *session) ReportQP(q status.QP) error {
	s.p.w.record(Record{Kind: KindStatus, Proc: s.p, Status: q})
	return s.Node.ReportQP(q)
}

// Event implements shim.Reporter.
func (s *session) Event(e status.Event) error {
	s.p.w.record(Record{Kind: KindEvent, Proc: s.p, Ev: e})
	return s.Node.Event(e)
}

// logHandler records a runtime's log lines: the message, then the
// attributes as slog's text handler writes them.
type logHandler struct {
	p     *Proc
	level slog.Level
	ops   []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	var b bytes.Buffer
	var th slog.Handler = slog.NewTextHandler(&b, &slog.HandlerOptions{Level: h.level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
				return slog.Attr{}
			}
			return a
		}})
	for _, op := range h.ops {
		th = op(th)
	}
	if err := th.Handle(ctx, r); err != nil {
		return err
	}
	text := r.Message
	if attrs := strings.TrimSpace(b.String()); attrs != "" {
		text += " " + attrs
	}
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	h.p.w.record(Record{Kind: KindLog, Proc: h.p, Level: r.Level, Text: text, Attrs: attrs})
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return h.with(func(x slog.Handler) slog.Handler { return x.WithAttrs(as) })
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return h.with(func(x slog.Handler) slog.Handler { return x.WithGroup(name) })
}

func (h *logHandler) with(op func(slog.Handler) slog.Handler) slog.Handler {
	c := *h
	c.ops = append(append([]func(slog.Handler) slog.Handler(nil), h.ops...), op)
	return &c
}
