package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/ratelimit"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/internal/version"
	"github.com/ibpath/ibpath/pathsel"
)

// Config configures a daemon. Zero fields take the defaults of
// DefaultConfig (see Config.withDefaults).
type Config struct {
	Node string // node name; default: the host name
	// Build is the daemon's build (internal/version): its version goes
	// to the status, all of it to the ibpath_build_info metric.
	Build    version.Info
	Socket   string // local API socket
	StateDir string // holds store.db
	// Fabric: "auto" (real HCAs when sysfs has any, else sim), "hardware"
	// or "sim".
	Fabric string
	Sysfs  string // sysfs root for discovery ("/sys" by default; fixture trees in tests)
	Sim    SimConfig
	// Operators: users ("alice", "1001") and groups ("@ibpath") with
	// root's rights over every QP.
	Operators []string
	// CommandTimeout bounds the wait for an owner's answer to a relayed
	// command.
	CommandTimeout time.Duration
	// PortPoll is how often ports are re-read for state changes. On
	// hardware most polls make the light read (pathsel.ReadPortStates);
	// see refreshPorts.
	PortPoll time.Duration
	// Damping is the flap damping of the ports the poll sees, in
	// pathsel.ParseDamping's syntax ("" or "on": the defaults, "off",
	// "half-life=10s,suppress=2000"); it also damps the simulated
	// workload's fail back (damping.go).
	Damping string
	// CounterPoll is how often the ports' counters are read for their
	// health (health.go); Health the rule, in pathsel.ParseHealth's
	// syntax ("" or "on": the defaults; "off": counters not read).
	CounterPoll time.Duration
	Health      string
	// MetricsListen, when set, also serves /metrics on this TCP address.
	MetricsListen string
	// PprofListen, when set, serves the Go runtime's profiles
	// (net/http/pprof, under /debug/pprof/) on this TCP address. Off by
	// default: the profiles show the daemon's internals to whoever
	// reaches the address.
	PprofListen string
	// MaxConnsPerUser bounds the socket connections (owner sessions
	// included) one non-root uid holds at once (connlimit.go).
	MaxConnsPerUser int
	Repl            ReplConfig

	lim     timeouts              // the socket's timeouts (connlimit.go); tests shorten them
	damping pathsel.DampingConfig // Damping, parsed
	health  pathsel.HealthConfig  // Health, parsed
}

// DefaultConfig holds the defaults.
var DefaultConfig = Config{
	Socket:          api.DefaultSocket,
	StateDir:        "/var/lib/ibpath",
	Fabric:          "auto",
	Sysfs:           "/sys",
	Sim:             SimConfig{Seed: 1, Hosts: 2, QPs: 4, Tick: time.Millisecond},
	CommandTimeout:  5 * time.Second,
	PortPoll:        time.Second,
	CounterPoll:     time.Second,
	MaxConnsPerUser: 1024,
}

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig
	if c.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("config: node name: os.Hostname: %w", err)
		}
		c.Node = h
	}
	if c.Socket == "" {
		c.Socket = d.Socket
	}
	if c.StateDir == "" {
		c.StateDir = d.StateDir
	}
	if c.Fabric == "" {
		c.Fabric = d.Fabric
	}
	switch c.Fabric {
	case "auto", "hardware", "sim":
	default:
		return c, fmt.Errorf("config: fabric %q: want auto, hardware or sim", c.Fabric)
	}
	if c.Sysfs == "" {
		c.Sysfs = d.Sysfs
	}
	if c.Sim.Hosts == 0 {
		c.Sim.Hosts = d.Sim.Hosts
	}
	if c.Sim.Tick == 0 {
		c.Sim.Tick = d.Sim.Tick
	}
	if c.Sim.QPs < 0 {
		return c, fmt.Errorf("config: sim QPs %d: must not be negative", c.Sim.QPs)
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = d.CommandTimeout
	}
	if c.PortPoll <= 0 {
		c.PortPoll = d.PortPoll
	}
	dc, err := pathsel.ParseDamping(c.Damping)
	if err != nil {
		return c, fmt.Errorf("config: damping: %w", err)
	}
	c.damping, c.Sim.damping = dc, dc
	if c.Health == "" {
		c.Health = "on" // docs/DAEMON.md, "Port health"
	}
	if c.health, err = pathsel.ParseHealth(c.Health); err != nil {
		return c, fmt.Errorf("config: health: %w", err)
	}
	switch {
	case c.CounterPoll == 0:
		c.CounterPoll = d.CounterPoll
	case c.CounterPoll < 0:
		return c, fmt.Errorf("config: counter poll %v: must be positive", c.CounterPoll)
	}
	c.lim = c.lim.withDefaults()
	switch {
	case c.MaxConnsPerUser == 0:
		c.MaxConnsPerUser = d.MaxConnsPerUser
	case c.MaxConnsPerUser < 0:
		return c, fmt.Errorf("config: max connections per user %d: must be positive", c.MaxConnsPerUser)
	}
	return c, nil
}

// Daemon is one ibpathd.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	policy  Policy
	started time.Time
	fabric  status.Fabric

	sim    *simNode // nil on hardware
	invMu  sync.Mutex
	inv    []pathsel.HCAInfo // last discovery, for status and PortStateChanged
	invErr error             // why the last discovery failed, if it did
	poll   portPoll          // hardware port poll: light reads between full ones
	// describeReads counts the reads of the devices made to describe a
	// local route (currentInventory; tests).
	describeReads atomic.Uint64

	owners owners
	drains *drainSet    // the drained ports (drain.go)
	damp   *portDamping // the ports' flap damping (damping.go)
	health *healthWatch // the ports' health (health.go); nil: not judged
	views  portViews    // the port views told to the owners (views.go)
	repl   replicator
	events broadcaster

	migrations, failovers, switchbacks atomic.Uint64
	ownerRefusals                      atomic.Uint64 // owner reports, publications and events refused (ownerauth.go)
	refusalLog                         ratelimit.Lines
	rereads                            ratelimit.Lines // device reads for publications of routes the inventory lacks (ownerauth.go)
	conns                              *connLimit
	storeNote                          string // what opening the store found (storeopen.go)
	timings                            timings
	reg                                *prometheus.Registry // the metrics (metrics.go)

	ln      net.Listener
	srv     *http.Server
	metrics *http.Server
	pprof   *http.Server
	stop    chan struct{}
	wg      sync.WaitGroup // port watcher and owner sessions
	life    sync.Mutex     // orders wg.Add of a new session against Close
	closing bool
	once    sync.Once

	// pprofAddr is the address the profiles are served on (PprofListen
	// with the port chosen; tests).
	pprofAddr string
}

// New builds a daemon: picks the fabric, opens the store and starts
// replication. Serve then serves it.
func New(cfg Config, log *slog.Logger) (*Daemon, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pol, err := ParseOperators(cfg.Operators)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	d := &Daemon{cfg: cfg, log: log, policy: pol, started: time.Now(), stop: make(chan struct{}),
		owners: owners{byID: map[int]*owner{}, byQP: map[qpRef]*owner{}}, refusalLog: ratelimit.Lines{Max: 10}, rereads: ratelimit.Lines{Max: 1}}
	d.conns = newConnLimit(cfg.MaxConnsPerUser, log)
	d.timings = newTimings()
	d.reg = d.registry()
	d.poll.every = fullReadEvery(cfg.PortPoll)
	if d.damp, err = newPortDamping(cfg.damping, d.started); err != nil {
		return nil, fmt.Errorf("config: damping: %w", err)
	}
	if !cfg.health.Off {
		if d.health, err = newHealthWatch(cfg.health); err != nil {
			return nil, fmt.Errorf("config: health: %w", err)
		}
	}
	if err := d.pickFabric(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		d.closeFabric()
		return nil, permissionHint(fmt.Errorf("state directory: %w", err), pathStateDir)
	}
	if err := keepPrivate(cfg.StateDir, 0o700, log); err != nil {
		d.closeFabric()
		return nil, permissionHint(fmt.Errorf("state directory: %w", err), pathStateDir)
	}
	if err := d.openDrains(); err != nil {
		d.closeFabric()
		return nil, err
	}
	if err := keepPrivate(filepath.Join(cfg.StateDir, "store.db"), 0o600, log); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.closeFabric()
		return nil, permissionHint(fmt.Errorf("store: %w", err), pathStateDir)
	}
	d.refreshPorts()
	d.repl, d.storeNote, err = startRepl(filepath.Join(cfg.StateDir, "store.db"), cfg, d.localRoutes(), d.describeForPeer, log.With("part", "replication"))
	if err != nil {
		d.closeFabric()
		return nil, permissionHint(err, pathStateDir)
	}
	return d, nil
}

// Fabric says which fabric the daemon runs on.
func (d *Daemon) Fabric() status.Fabric { return d.fabric }

// Serve listens on the configured socket and serves the local API until
// ctx is done or Close is called. ready, if not nil, runs once everything
// listens (it starts the D-Bus facade and sends sd_notify READY=1); an
// error from it stops the daemon and is returned.
func (d *Daemon) Serve(ctx context.Context, ready func() error) error {
	ln, err := listenUnix(d.cfg.Socket)
	if err != nil {
		return permissionHint(err, pathSocket)
	}
	d.ln = ln
	d.reapAtStart()
	d.srv = &http.Server{Handler: d.handler(), ConnContext: connContext, ConnState: d.conns.state,
		ReadHeaderTimeout: d.cfg.lim.header, ReadTimeout: d.cfg.lim.read, IdleTimeout: d.cfg.lim.idle,
		// an action waits for owners' answers before it writes its own
		WriteTimeout: 30*time.Second + 2*d.cfg.CommandTimeout}
	errc := make(chan error, 3) // one per server: the socket, metrics, pprof
	go func() { errc <- d.srv.Serve(ln) }()
	if d.cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /metrics", d.serveMetrics)
		var addr string
		if d.metrics, addr, err = serveTCP("metrics", d.cfg.MetricsListen, mux, errc); err != nil {
			d.srv.Close()
			return err
		}
		d.log.Info("metrics listening", "addr", addr)
	}
	if d.cfg.PprofListen != "" {
		if d.pprof, d.pprofAddr, err = serveTCP("pprof", d.cfg.PprofListen, pprofHandler(), errc); err != nil {
			d.srv.Close()
			if d.metrics != nil {
				d.metrics.Close()
			}
			return err
		}
		d.log.Warn("Go profiles served: anyone who reaches this address sees the daemon's internals", "addr", d.pprofAddr, "path", "/debug/pprof/")
	}
	d.wg.Add(1)
	go d.watchPorts()
	d.wg.Add(1)
	go d.watchViews()
	if d.health != nil {
		d.wg.Add(1)
		go d.watchCounters()
	}
	d.log.Info("ibpathd serving", "socket", d.cfg.Socket, "node", d.cfg.Node, "fabric", d.fabric.Kind, "reason", d.fabric.Reason)
	if ready != nil {
		if err := ready(); err != nil {
			d.Close()
			return err
		}
	}
	select {
	case <-ctx.Done():
	case <-d.stop:
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			d.Close()
			return fmt.Errorf("serve: %w", err)
		}
	}
	d.Close()
	return nil
}

// serveTCP serves h on the TCP address addr (what="metrics", "pprof")
// until the server is closed; Serve's error goes to errc. It returns the
// server and the address it listens on.
func serveTCP(what, addr string, h http.Handler, errc chan<- error) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: listen %s: %w", what, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { errc <- srv.Serve(ln) }()
	return srv, ln.Addr().String(), nil
}

// pprofHandler serves net/http/pprof's pages under /debug/pprof/.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// listenUnix listens on path, replacing a stale socket left by a dead
// daemon but refusing to steal one a live daemon answers on.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen %s: another ibpathd is serving on it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	// Everyone may connect: the daemon checks each caller's credentials.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}

// Close stops serving, detaches every owner, stops the fabric and
// replication, and closes the store. It is idempotent.
func (d *Daemon) Close() {
	d.once.Do(func() {
		d.life.Lock()
		d.closing = true
		d.life.Unlock()
		close(d.stop)
		if d.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			d.srv.Shutdown(ctx)
			cancel()
			d.srv.Close()
		}
		if d.metrics != nil {
			d.metrics.Close()
		}
		if d.pprof != nil {
			d.pprof.Close()
		}
		for _, o := range d.owners.list() {
			o.c.Close()
		}
		d.wg.Wait()
		d.closeFabric()
		if d.repl != nil {
			if err := d.repl.Close(); err != nil {
				d.log.Error("close replication", "err", err)
			}
		}
		d.events.closeAll()
	})
}

func (d *Daemon) closeFabric() {
	if d.sim != nil {
		d.sim.close()
	}
}

func (d *Daemon) storePath() string { return filepath.Join(d.cfg.StateDir, "store.db") }
