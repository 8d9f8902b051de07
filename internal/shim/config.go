package shim

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/version"
	"github.com/ibpath/ibpath/pathsel"
)

// Config is the shim's configuration, from the environment.
type Config struct {
	// Disabled (IBPATH_DISABLE=1): pure pass-through, nothing recorded.
	Disabled bool
	// APM (IBPATH_APM=on|off, default on): arm an alternate path on RC QPs
	// whose link layer allows it (InfiniBand).
	APM bool
	// Nudge (IBPATH_NUDGE=on|off, default on): right after each migration
	// layer 1 makes, post a zero-length RDMA WRITE on the QP, so that the
	// WRs in flight on the dead path are resent at once instead of at the
	// next local ACK timeout (docs/APM.md). Needs APM and Record; it
	// costs each RC QP on an InfiniBand device one send queue slot,
	// hidden from the application (docs/SHIM.md, "Layer 1 in the shim").
	Nudge bool
	// Damping (IBPATH_DAMPING=on|off|half-life=30s,suppress=1500,...,
	// default on): layer 1's flap damping (docs/APM.md): after a port
	// or a QP's home path flapped twice within a half-life, its QPs stay
	// on the alternate until the penalty has decayed, instead of failing
	// back after the hold-down. The syntax is pathsel.ParseDamping's.
	Damping pathsel.DampingConfig
	// Record (IBPATH_RECORD=on|off, default on): keep the shadow rings
	// of the Default state (the bookkeeping layer 2 replays from).
	Record bool
	// SinglePoster (IBPATH_SINGLE_POSTER=1): the application posts to each
	// QP from one thread at a time (MPI without MPI_THREAD_MULTIPLE, one
	// NCCL proxy thread per QP), so the shadow rings take no lock per
	// post (the lock is biased to its one thread anyway: this saves
	// little). Wrong for programs that post to one QP from several
	// threads at once: their rings would lose entries.
	SinglePoster bool
	// SinglePoller (IBPATH_SINGLE_POLLER=1): the application polls each
	// CQ from one thread at a time, so the shadow rings retire entries
	// without a lock. Wrong for programs that poll one CQ from several
	// threads at once: their rings would lose retirements, and a
	// failover would replay WRs that already completed.
	SinglePoller bool
	// Express (IBPATH_EXPRESS=on|off, default on): once a QP's failover
	// has settled on the backup, its posts and polls run in C (the
	// express lane) instead of through layer 2's Go side.
	Express bool
	// SwitchBack (IBPATH_SWITCHBACK=on|off, default off): after a layer-2
	// failover, probe the default QP and move the traffic back to it once
	// its path works again (then the hot path takes the QP back). While
	// its default port is down, the QP runs on the express lane, which
	// records its WRs so that it can leave the lane when the port
	// returns. Off: a failed-over QP stays on the backup, on the express
	// lane, for the rest of its life. Off by default: in the soft-RoCE
	// lab an MPI program over libfabric's verbs provider hangs in about
	// one run of four after its QPs switched back, with or without the
	// express lane (docs/SHIM.md, "Known limits").
	SwitchBack bool
	// SwitchBackDamping (IBPATH_SWITCHBACK_DAMPING=on|off, default off):
	// hold the switch back while the home port is suppressed by flap
	// damping. Off by default: a QP held on its backup surfaces its
	// error if the backup device then dies, though its home path is up
	// (`ibpath sim --random --seed 4`: two flaps, then the backup HCA
	// dies); until the held QP keeps its default QP ready to take the
	// traffic at once, damping the switch back trades that for fewer
	// moves.
	SwitchBackDamping bool
	// CQHeadroom (IBPATH_CQ_HEADROOM, default 64 with SwitchBack on, 0
	// otherwise): entries added to every CQ the application creates or
	// resizes, for the switch back's own completions (probes,
	// notifications, control receives) in the default QP's CQs. Each QP
	// switching back holds 4 of a CQ it shares for both queues, 2 of each
	// of two split CQs; more QPs than that switching back at once wait
	// their turn on the backup. With SwitchBack on it must be at least 4.
	CQHeadroom int
	// Handshake (IBPATH_HANDSHAKE_TIMEOUT, a duration, default 5s): how
	// long layer 2 waits for the peer's answer to a notification: the
	// fallback notification this side sends when it sees a fault (past it
	// the error surfaces, as plain verbs reported the fault) and, with
	// SwitchBack on, the switch-back notification (past it the switch
	// counts as broken). Zero: the default.
	Handshake time.Duration
	// Channels (IBPATH_CHANNELS=on|off, default on): hand the application
	// completion channels of the shim, which it makes readable when a
	// backup device completes the application's work (the kernel's event
	// file only carries the events of the default device).
	Channels bool
	// Backup (IBPATH_BACKUP=auto|<device>): the backup device policy of
	// layer 2.
	Backup string
	// Socket (IBPATH_SOCKET): ibpathd's socket; "off" runs without it.
	Socket string
	// Log (IBPATH_LOG=error|warn|info|debug, default warn).
	Log slog.Level
	// GoMaxProcs (IBPATH_GOMAXPROCS, 1 to 64, default 2): the Go runtime's
	// GOMAXPROCS inside the program, never more than the machine's CPUs
	// (the runtime's own default). The shim's Go side is a few
	// goroutines that mostly wait; left at the machine's CPU count, the
	// Go runtime would run its garbage collector on as many threads
	// beside the program's own, pinned ranks included.
	GoMaxProcs int
	// Dlopen (IBPATH_DLOPEN=on|off, default on): a program that opens
	// libibverbs itself with dlopen (NCCL before 2.30) gets a handle of
	// the shim, whose lookups find the shim's verbs (cmd/libibpath's
	// dlopen.c, which reads the variable itself).
	Dlopen bool
}

// Env names.
const (
	EnvDisable  = "IBPATH_DISABLE"
	EnvAPM      = "IBPATH_APM"
	EnvNudge    = "IBPATH_NUDGE"
	EnvDamping  = "IBPATH_DAMPING"
	EnvRecord   = "IBPATH_RECORD"
	EnvSingle   = "IBPATH_SINGLE_POSTER"
	EnvPoller   = "IBPATH_SINGLE_POLLER"
	EnvExpress  = "IBPATH_EXPRESS"
	EnvChannels = "IBPATH_CHANNELS"
	EnvSwitch   = "IBPATH_SWITCHBACK"
	// EnvSwitchDamping turns on the flap damping of layer 2's switch
	// back (damping.go): off by default, see Config.SwitchBackDamping.
	EnvSwitchDamping = "IBPATH_SWITCHBACK_DAMPING"
	EnvBackup        = "IBPATH_BACKUP"
	EnvSocket        = "IBPATH_SOCKET"
	EnvLog           = "IBPATH_LOG"
	EnvHeadroom      = "IBPATH_CQ_HEADROOM"
	EnvHandshake     = "IBPATH_HANDSHAKE_TIMEOUT"
	EnvGoProcs       = "IBPATH_GOMAXPROCS"
	// EnvDlopen is read by the C side (dlopen.c) before the Go side
	// exists; FromEnv checks its value with the others.
	EnvDlopen = "IBPATH_DLOPEN"
)

// defaultGoMaxProcs is GoMaxProcs's default, maxGoMaxProcs its bound.
const (
	defaultGoMaxProcs = 2
	maxGoMaxProcs     = 64
)

// defaultCQHeadroom is CQHeadroom's default with SwitchBack on: 16 QPs
// sharing one CQ switch back at once, for 64 more CQEs per CQ (a few KB).
const defaultCQHeadroom = 64

// FromEnv reads the configuration. A value it does not understand is an
// error naming the variable: the shim then disables itself and says so,
// rather than guessing.
func FromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Config{APM: true, Nudge: true, Record: true, Express: true, Channels: true, Backup: "auto", Socket: api.DefaultSocket, Log: slog.LevelWarn,
		GoMaxProcs: defaultGoMaxProcs, Dlopen: true}
	var err error
	if c.Disabled, err = boolEnv(getenv, EnvDisable, false); err != nil {
		return c, err
	}
	if c.APM, err = boolEnv(getenv, EnvAPM, true); err != nil {
		return c, err
	}
	if c.Record, err = boolEnv(getenv, EnvRecord, true); err != nil {
		return c, err
	}
	if c.Nudge, err = boolEnv(getenv, EnvNudge, true); err != nil {
		return c, err
	}
	if c.Damping, err = pathsel.ParseDamping(getenv(EnvDamping)); err != nil {
		return c, fmt.Errorf("%s=%q: %w", EnvDamping, getenv(EnvDamping), err)
	}
	if c.SinglePoster, err = boolEnv(getenv, EnvSingle, false); err != nil {
		return c, err
	}
	if c.SinglePoller, err = boolEnv(getenv, EnvPoller, false); err != nil {
		return c, err
	}
	if c.Express, err = boolEnv(getenv, EnvExpress, true); err != nil {
		return c, err
	}
	if c.SwitchBack, err = boolEnv(getenv, EnvSwitch, false); err != nil {
		return c, err
	}
	if c.SwitchBackDamping, err = boolEnv(getenv, EnvSwitchDamping, false); err != nil {
		return c, err
	}
	if c.Channels, err = boolEnv(getenv, EnvChannels, true); err != nil {
		return c, err
	}
	if c.Dlopen, err = boolEnv(getenv, EnvDlopen, true); err != nil {
		return c, err
	}
	if c.CQHeadroom, err = headroomEnv(getenv, c.SwitchBack); err != nil {
		return c, err
	}
	if c.Handshake, err = handshakeEnv(getenv); err != nil {
		return c, err
	}
	if v := getenv(EnvGoProcs); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxGoMaxProcs {
			return c, fmt.Errorf("%s=%q: want a number of threads from 1 to %d", EnvGoProcs, v, maxGoMaxProcs)
		}
		c.GoMaxProcs = n
	}
	if v := getenv(EnvBackup); v != "" {
		c.Backup = v
	}
	if v := getenv(EnvSocket); v != "" {
		c.Socket = v
	}
	if v := getenv(EnvLog); v != "" {
		if err := c.Log.UnmarshalText([]byte(v)); err != nil {
			return c, fmt.Errorf("%s=%q: want error, warn, info or debug", EnvLog, v)
		}
	}
	return c, nil
}

func boolEnv(getenv func(string) string, name string, def bool) (bool, error) {
	switch strings.ToLower(getenv(name)) {
	case "":
		return def, nil
	case "1", "on", "yes", "true":
		return true, nil
	case "0", "off", "no", "false":
		return false, nil
	}
	return def, fmt.Errorf("%s=%q: want on or off", name, getenv(name))
}

// headroomEnv is IBPATH_CQ_HEADROOM: a count of CQ entries, at least one
// QP's share when the switch back is on, and no more than a CQ could
// sensibly grow by.
func headroomEnv(getenv func(string) string, switchBack bool) (int, error) {
	v := getenv(EnvHeadroom)
	if v == "" {
		if switchBack {
			return defaultCQHeadroom, nil
		}
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n < 0 || n > maxCQHeadroom:
		return 0, fmt.Errorf("%s=%q: want a number of CQ entries from 0 to %d", EnvHeadroom, v, maxCQHeadroom)
	case switchBack && n < shareShared:
		return 0, fmt.Errorf("%s=%d: the switch back needs at least %d entries per CQ (one QP's share); turn %s off instead",
			EnvHeadroom, n, shareShared, EnvSwitch)
	}
	return n, nil
}

// handshakeEnv is IBPATH_HANDSHAKE_TIMEOUT: a Go duration ("5s",
// "500ms") from minHandshake to maxHandshake.
func handshakeEnv(getenv func(string) string) (time.Duration, error) {
	v := getenv(EnvHandshake)
	if v == "" {
		return defaultHandshake, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < minHandshake || d > maxHandshake {
		return 0, fmt.Errorf("%s=%q: want a duration from %v to %v (e.g. 5s)", EnvHandshake, v, minHandshake, maxHandshake)
	}
	return d, nil
}

// The bounds of IBPATH_HANDSHAKE_TIMEOUT, and its default. The peer's
// shim answers from a goroutine of its own in a millisecond or so; a
// bound near the transport's own timeouts (about a second at timeout 14
// and retry_cnt 3) would give up on a peer whose answer is only late.
const (
	defaultHandshake = 5 * time.Second
	minHandshake     = 10 * time.Millisecond
	maxHandshake     = 10 * time.Minute
)

// handshake is c's Handshake, or the default when unset.
func (c Config) handshake() time.Duration {
	if c.Handshake <= 0 {
		return defaultHandshake
	}
	return c.Handshake
}

// maxCQHeadroom bounds IBPATH_CQ_HEADROOM.
const maxCQHeadroom = 1 << 16

// Banner is the line the shim logs when it loads: its version and what
// is active.
func (c Config) Banner(pid int) string {
	build := version.Get().String()
	if c.Disabled {
		return fmt.Sprintf("libibpath: loaded in pid %d, version %s, disabled by %s: every verb passes straight through", pid, build, EnvDisable)
	}
	onoff := map[bool]string{true: "on", false: "off"}
	daemon := c.Socket
	if daemon == "off" {
		daemon = "not used"
	}
	return fmt.Sprintf("libibpath: loaded in pid %d, version %s: layer 1 (APM) %s for InfiniBand RC QPs (RoCE has none)%s; "+
		"shadow rings %s%s; layer 2 (cross-NIC) failover %s (switch back %s, express lane %s, completion channels %s%s); backup device %s; ibpathd %s; "+
		"libibverbs opened by the program with dlopen: %s",
		pid, build, onoff[c.APM], c.nudgeWords(), onoff[c.Record], c.singleWords(), onoff[c.Record], c.switchBackWord(), onoff[c.Express && c.Record], onoff[c.Channels && c.Record],
		c.handshakeWords(), c.Backup, daemon, map[bool]string{true: "the shim's verbs", false: "passed through (" + EnvDlopen + "=off)"}[c.Dlopen])
}

// singleWords is the banner's note on the shadow rings' locks: the
// promises of one poster per QP and one poller per CQ.
func (c Config) singleWords() string {
	var w []string
	if c.SinglePoster {
		w = append(w, "single poster per QP")
	}
	if c.SinglePoller {
		w = append(w, "single poller per CQ")
	}
	if len(w) == 0 || !c.Record {
		return ""
	}
	return " (" + strings.Join(w, ", ") + ")"
}

// handshakeWords is the banner's note on the bound of layer 2's
// handshakes (none without failover).
func (c Config) handshakeWords() string {
	if !c.Record {
		return ""
	}
	return fmt.Sprintf(", handshake timeout %v", c.handshake())
}

// switchBackWord is the banner's switch-back state, with the CQ headroom
// it runs with.
func (c Config) switchBackWord() string {
	if !c.SwitchBack || !c.Record {
		return "off"
	}
	return fmt.Sprintf("on, %d CQ entries of headroom", c.CQHeadroom)
}

// nudges says whether layer 1 nudges a QP after each migration it makes:
// the nudge is on, and so are layer 1 and the shadow rings its slot and
// the filter of its completion live in; the nudge is posted under the
// send queue's lock, which a single poster does without.
func (c Config) nudges() bool { return c.Nudge && c.APM && c.Record && !c.SinglePoster }

// nudgeWords is the banner's note on layer 1's nudge (said only when
// layer 1 is on).
func (c Config) nudgeWords() string {
	switch {
	case !c.APM:
		return ""
	case c.nudges():
		return ", nudged after each migration" + c.dampingWords()
	case !c.Nudge:
		return ", not nudged (" + EnvNudge + "=off)" + c.dampingWords()
	case c.SinglePoster && c.Record:
		return ", not nudged (single poster per QP)" + c.dampingWords()
	}
	return ", not nudged (no shadow rings)" + c.dampingWords()
}

// dampingWords is the banner's note on layer 1's flap damping.
func (c Config) dampingWords() string {
	if c.Damping.Off {
		return ", no flap damping (" + EnvDamping + "=off)"
	}
	d, err := c.Damping.WithDefaults()
	if err != nil {
		return ""
	}
	return ", flap damping " + d.String()
}
