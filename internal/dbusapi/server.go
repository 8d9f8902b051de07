package dbusapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"

	"github.com/ibpath/ibpath/internal/api"
)

// Defaults of Options.
const (
	DefaultRefresh     = 2 * time.Second
	DefaultCallTimeout = 20 * time.Second // below the 25 s D-Bus clients wait by default
	DefaultEventBuffer = 64
)

// Options configure Serve.
type Options struct {
	// Bus is "system" (the default), "session", or a D-Bus address such
	// as "unix:path=/run/ibpath/bus".
	Bus string
	// Refresh is how often the properties are re-read from
	// Backend.Status besides after every event (DefaultRefresh when 0).
	Refresh time.Duration
	// CallTimeout bounds one Arm or Migrate call, the backend's relay to
	// the QP's owner included (DefaultCallTimeout when 0).
	CallTimeout time.Duration
	// EventBuffer is the capacity of the Backend.Subscribe channel
	// (DefaultEventBuffer when 0).
	EventBuffer int

	// beforeRequestName, when set, runs after everything is exported and
	// before the name is requested (tests check the order with it).
	beforeRequestName func(*dbus.Conn)
}

func (o *Options) defaults() {
	if o.Bus == "" {
		o.Bus = "system"
	}
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.EventBuffer <= 0 {
		o.EventBuffer = DefaultEventBuffer
	}
}

// Server is the D-Bus facade, serving from Serve until Close.
type Server struct {
	opts    Options
	backend api.Backend
	log     *slog.Logger
	conn    *dbus.Conn
	props   *prop.Properties
	last    map[string]any // property values last set; only the loop touches it after Serve

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	unsubscribe func()
	done        chan struct{} // closed when loop returns

	closeOnce sync.Once
	closeErr  error
}

// Serve connects to the bus, exports the object with its methods,
// properties and introspection data, and only then requests BusName. It
// fails when another connection owns the name (or queues for it). The
// returned Server emits signals and refreshes properties until Close.
func Serve(opts Options, b api.Backend, log *slog.Logger) (*Server, error) {
	if b == nil {
		return nil, errors.New("dbusapi.Serve: nil backend")
	}
	if log == nil {
		log = slog.Default()
	}
	opts.defaults()
	conn, err := connect(opts.Bus)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, backend: b, log: log.With("bus", opts.Bus), conn: conn, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.export(); err != nil {
		s.cancel()
		conn.Close()
		return nil, err
	}
	if opts.beforeRequestName != nil {
		opts.beforeRequestName(conn)
	}
	if err := requestName(conn, opts.Bus); err != nil {
		s.cancel()
		conn.Close()
		return nil, err
	}
	events, unsubscribe := b.Subscribe(opts.EventBuffer)
	s.unsubscribe = unsubscribe
	go s.loop(events)
	s.log.Info("dbus: serving", "name", BusName, "path", string(Path), "unique_name", conn.Names()[0])
	return s, nil
}

// connect opens a private connection to bus and authenticates.
func connect(bus string) (*dbus.Conn, error) {
	var conn *dbus.Conn
	var err error
	switch bus {
	case "system":
		conn, err = dbus.ConnectSystemBus()
	case "session":
		conn, err = dbus.ConnectSessionBus()
	default:
		conn, err = dbus.Connect(bus)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to the %s bus: %w", bus, err)
	}
	return conn, nil
}

// export exports the methods, the properties and the introspection data.
func (s *Server) export() error {
	if err := s.conn.Export(object{s}, Path, Interface); err != nil {
		return fmt.Errorf("export %s on %s: %w", Interface, Path, err)
	}
	props, vals, err := exportProperties(s.conn, s.backend.StatusOf(0))
	if err != nil {
		return err
	}
	s.props, s.last = props, vals
	return exportIntrospection(s.conn, props)
}

// requestName asks for BusName without queueing and requires to become
// its primary owner.
func requestName(conn *dbus.Conn, bus string) error {
	reply, err := conn.RequestName(BusName, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("RequestName %s on the %s bus: %w", BusName, bus, err)
	}
	switch reply {
	case dbus.RequestNameReplyPrimaryOwner:
		return nil
	case dbus.RequestNameReplyExists:
		return fmt.Errorf("RequestName %s on the %s bus: the name is owned by another connection (is another ibpathd running?)", BusName, bus)
	default:
		return fmt.Errorf("RequestName %s on the %s bus: reply %d, not primary owner", BusName, bus, reply)
	}
}

// Close releases the name, stops emitting signals and closes the bus
// connection. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		s.unsubscribe()
		if _, err := s.conn.ReleaseName(BusName); err != nil {
			s.closeErr = fmt.Errorf("ReleaseName %s: %w", BusName, err)
		}
		if err := s.conn.Close(); err != nil && s.closeErr == nil {
			s.closeErr = fmt.Errorf("close the %s bus connection: %w", s.opts.Bus, err)
		}
		s.log.Info("dbus: closed", "name", BusName)
	})
	return s.closeErr
}
