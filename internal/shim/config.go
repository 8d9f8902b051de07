package shim

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/ibpath/ibpath/internal/api"
)

// Config is the shim's configuration, from the environment.
type Config struct {
	// Disabled (IBPATH_DISABLE=1): pure pass-through, nothing recorded.
	Disabled bool
	// APM (IBPATH_APM=on|off, default on): arm an alternate path on RC QPs
	// whose link layer allows it (InfiniBand).
	APM bool
	// Record (IBPATH_RECORD=on|off, default on): keep the shadow rings
	// of the Default state (the bookkeeping layer 2 replays from).
	Record bool
	// SinglePoster (IBPATH_SINGLE_POSTER=1): the application posts to each
	// QP from one thread at a time (MPI without MPI_THREAD_MULTIPLE, one
	// NCCL proxy thread per QP), so the shadow rings reserve slots
	// without an atomic instruction. Wrong for programs that post to one
	// QP from several threads at once: their rings would lose entries.
	SinglePoster bool
	// Express (IBPATH_EXPRESS=on|off, default on): once a QP's failover
	// has settled on the backup, its posts and polls run in C (the
	// express lane) instead of through layer 2's Go side.
	Express bool
	// SwitchBack (IBPATH_SWITCHBACK=on|off, default off): after a layer-2
	// failover, probe the default QP and move the traffic back to it once
	// its path works again (then the hot path takes the QP back). Off:
	// a failed-over QP stays on the backup, on the express lane. Off by
	// default until its remaining races are closed (docs/SHIM.md): in the
	// soft-RoCE lab about one switch back in 25 still surfaced an error.
	SwitchBack bool
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
}

// Env names.
const (
	EnvDisable  = "IBPATH_DISABLE"
	EnvAPM      = "IBPATH_APM"
	EnvRecord   = "IBPATH_RECORD"
	EnvSingle   = "IBPATH_SINGLE_POSTER"
	EnvExpress  = "IBPATH_EXPRESS"
	EnvChannels = "IBPATH_CHANNELS"
	EnvSwitch   = "IBPATH_SWITCHBACK"
	EnvBackup   = "IBPATH_BACKUP"
	EnvSocket   = "IBPATH_SOCKET"
	EnvLog      = "IBPATH_LOG"
)

// FromEnv reads the configuration. A value it does not understand is an
// error naming the variable: the shim then disables itself and says so,
// rather than guessing.
func FromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Config{APM: true, Record: true, Express: true, Channels: true, Backup: "auto", Socket: api.DefaultSocket, Log: slog.LevelWarn}
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
	if c.SinglePoster, err = boolEnv(getenv, EnvSingle, false); err != nil {
		return c, err
	}
	if c.Express, err = boolEnv(getenv, EnvExpress, true); err != nil {
		return c, err
	}
	if c.SwitchBack, err = boolEnv(getenv, EnvSwitch, false); err != nil {
		return c, err
	}
	if c.Channels, err = boolEnv(getenv, EnvChannels, true); err != nil {
		return c, err
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

// Banner is the line the shim logs when it loads: what is active.
func (c Config) Banner(pid int) string {
	if c.Disabled {
		return fmt.Sprintf("libibpath: loaded in pid %d, disabled by %s: every verb passes straight through", pid, EnvDisable)
	}
	onoff := map[bool]string{true: "on", false: "off"}
	daemon := c.Socket
	if daemon == "off" {
		daemon = "not used"
	}
	return fmt.Sprintf("libibpath: loaded in pid %d: layer 1 (APM) %s for InfiniBand RC QPs (RoCE has none); "+
		"shadow rings %s%s; layer 2 (cross-NIC) failover %s (switch back %s, express lane %s, completion channels %s); backup device %s; ibpathd %s",
		pid, onoff[c.APM], onoff[c.Record], map[bool]string{true: " (single poster per QP)", false: ""}[c.SinglePoster],
		onoff[c.Record], onoff[c.SwitchBack && c.Record], onoff[c.Express && c.Record], onoff[c.Channels && c.Record], c.Backup, daemon)
}
