package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/daemon"
	"github.com/ibpath/ibpath/internal/dbusapi"
	"github.com/ibpath/ibpath/internal/version"
)

const defaultConfig = "/etc/ibpath/ibpathd.conf"

func flags() []cli.Flag {
	d := daemon.DefaultConfig
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Value: defaultConfig, Usage: "configuration file of `key = value` lines (keys are these flags' names); a missing default file is fine, a missing named one is an error"},
		&cli.StringFlag{Name: "node", Usage: "node name, unique in the cluster (default: the host name)"},
		&cli.StringFlag{Name: "socket", Value: d.Socket, Usage: "local API UNIX socket"},
		&cli.StringFlag{Name: "state-dir", Value: d.StateDir, Usage: "directory of the store (store.db)"},
		&cli.StringFlag{Name: "fabric", Value: d.Fabric, Usage: "auto (real HCAs if sysfs lists any, else the simulated fabric), hardware or sim"},
		&cli.StringFlag{Name: "sysfs", Value: d.Sysfs, Usage: "sysfs root for discovery (fixture trees in tests)"},
		&cli.Uint64Flag{Name: "sim-seed", Value: d.Sim.Seed, Usage: "seed of the simulated fabric (the same on every node of a sim cluster)"},
		&cli.IntFlag{Name: "sim-hosts", Value: d.Sim.Hosts, Usage: "hosts of the simulated fabric"},
		&cli.IntFlag{Name: "sim-index", Value: d.Sim.Index, Usage: "which host of the simulated fabric this node is (node<index>)"},
		&cli.IntFlag{Name: "sim-qps", Value: d.Sim.QPs, Usage: "RC QPs of the simulated workload to the next host"},
		&cli.StringSliceFlag{Name: "operator", Usage: "user (name or uid) or @group allowed to arm and migrate any QP, like root (repeatable)"},
		&cli.DurationFlag{Name: "command-timeout", Value: d.CommandTimeout, Usage: "how long to wait for a QP's owner to carry out a relayed command"},
		&cli.IntFlag{Name: "max-conns-per-user", Value: d.MaxConnsPerUser, Usage: "socket connections (owner sessions included) one non-root user may hold at once; more are closed at once"},
		&cli.DurationFlag{Name: "port-poll", Value: d.PortPoll, Usage: "how often port states are re-read (GID tables: on a change, and every 30 s at least)"},
		&cli.StringFlag{Name: "damping", Value: "on", Usage: "flap damping of the ports: `SPEC` is on (half-life=30s,suppress=1500,reuse=750,penalty=1000,max-suppress=300s), off, or a comma-separated list of some of those settings (the others at their defaults)"},
		&cli.DurationFlag{Name: "counter-poll", Value: d.CounterPoll, Usage: "how often the ports' counters are read to judge their health (--health)"},
		&cli.StringFlag{Name: "health", Value: "on", Usage: "the rule a port is found degraded by, and taken out of service: `SPEC` is off (counters not read), on (window=10s,link-errors=3,min-seq-errors=20,seq-error-ratio=0.01,clear=30s), or a comma-separated list of some of those settings (the others at their defaults)"},
		&cli.StringFlag{Name: "metrics-listen", Usage: "also serve Prometheus /metrics on this TCP address (e.g. :9470); always on the socket at " + api.PathMetrics},
		&cli.StringFlag{Name: "pprof-addr", Usage: "serve the Go runtime's profiles (net/http/pprof, /debug/pprof/) on this TCP address, e.g. 127.0.0.1:6060; off by default: whoever reaches it sees the daemon's internals"},
		&cli.StringFlag{Name: "gossip-bind", Value: "0.0.0.0:7946", Usage: "replication (memberlist) address host:port"},
		&cli.StringFlag{Name: "gossip-advertise", Usage: "address peers should use, when --gossip-bind is a wildcard"},
		&cli.StringSliceFlag{Name: "join", Usage: "peer host:port to join at start (repeatable)"},
		&cli.StringFlag{Name: "cluster-key-file", Usage: "file holding the cluster key (16, 24 or 32 bytes, raw or hex); required unless --insecure or --no-replication"},
		&cli.BoolFlag{Name: "insecure", Usage: "replicate without a cluster key (test beds only)"},
		&cli.DurationFlag{Name: "anti-entropy", Value: 10 * time.Second, Usage: "period of the digest exchange with a random peer that repairs missed entries"},
		&cli.BoolFlag{Name: "no-replication", Usage: "keep backup attributes on this node only"},
		&cli.StringFlag{Name: "dbus", Value: "system", Usage: "D-Bus facade: system, session, off, or a bus address"},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json"},
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:    "ibpathd",
		Usage:   "the ibpath daemon: keeps RDMA traffic alive through InfiniBand faults",
		Version: version.Get().String(),
		Flags:   flags(),
		Action:  run,
	}
}

// applyConfigFile sets every flag the command line left unset from the
// configuration file.
func applyConfigFile(c *cli.Context) error {
	path := c.String("config")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && !c.IsSet("config") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	sets, err := daemon.ParseConfigFile(f)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	known := map[string]bool{}
	for _, fl := range flags() {
		known[fl.Names()[0]] = true
	}
	for _, s := range sets {
		if !known[s.Key] || s.Key == "config" {
			return fmt.Errorf("config %s: line %d: unknown setting %q", path, s.Line, s.Key)
		}
		if c.IsSet(s.Key) {
			continue // the command line wins
		}
		if err := c.Set(s.Key, s.Value); err != nil {
			return fmt.Errorf("config %s: line %d: %s = %q: %w", path, s.Line, s.Key, s.Value, err)
		}
	}
	return nil
}

func logger(c *cli.Context) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", c.String("log-level"), err)
	}
	o := &slog.HandlerOptions{Level: lvl}
	switch c.String("log-format") {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", c.String("log-format"))
}

func config(c *cli.Context) daemon.Config {
	return daemon.Config{
		Node: c.String("node"), Build: version.Get(), Socket: c.String("socket"), StateDir: c.String("state-dir"),
		Fabric: c.String("fabric"), Sysfs: c.String("sysfs"),
		Sim:       daemon.SimConfig{Seed: c.Uint64("sim-seed"), Hosts: c.Int("sim-hosts"), Index: c.Int("sim-index"), QPs: c.Int("sim-qps")},
		Operators: c.StringSlice("operator"), CommandTimeout: c.Duration("command-timeout"), PortPoll: c.Duration("port-poll"), Damping: c.String("damping"),
		CounterPoll: c.Duration("counter-poll"), Health: c.String("health"),
		MetricsListen: c.String("metrics-listen"), PprofListen: c.String("pprof-addr"), MaxConnsPerUser: c.Int("max-conns-per-user"),
		Repl: daemon.ReplConfig{Bind: c.String("gossip-bind"), Advertise: c.String("gossip-advertise"), Join: c.StringSlice("join"),
			KeyFile: c.String("cluster-key-file"), Insecure: c.Bool("insecure"), Off: c.Bool("no-replication"),
			AntiEntropy: c.Duration("anti-entropy")},
	}
}

func run(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (ibpathd takes flags only; see --help)", c.Args().First())
	}
	if err := applyConfigFile(c); err != nil {
		return err
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	d, err := daemon.New(config(c), log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var bus *dbusapi.Server
	defer func() {
		if bus != nil {
			bus.Close()
		}
	}()
	ready := func() error {
		if b := c.String("dbus"); b != "off" {
			s, err := dbusapi.Serve(dbusapi.Options{Bus: b}, d, log.With("part", "dbus"))
			switch {
			case err == nil:
				bus = s
			case c.IsSet("dbus"):
				return fmt.Errorf("D-Bus facade on %s: %w", b, err)
			default:
				log.Warn("D-Bus facade not started (no system bus?); the local API still serves", "bus", b, "err", err)
			}
		}
		if err := daemon.Notify("READY=1\nSTATUS=" + readyStatus(d)); err != nil {
			log.Warn("sd_notify", "err", err)
		}
		return nil
	}
	err = d.Serve(ctx, ready)
	_ = daemon.Notify("STOPPING=1")
	return err
}

func readyStatus(d *daemon.Daemon) string {
	f := d.Fabric()
	return strings.ReplaceAll(fmt.Sprintf("serving on the %s fabric (%s) since %s", f.Kind, f.Reason, time.Now().Format(time.RFC3339)), "\n", " ")
}
