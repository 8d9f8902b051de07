package replica

import (
	"context"
	"log/slog"
	"strings"
)

// logBridge receives memberlist's log lines (it logs through a
// *log.Logger) and re-emits them through slog at their level. Lines that
// say a peer's traffic could not be authenticated with the cluster key
// are logged as "peer refused" and counted.
type logBridge struct {
	log     *slog.Logger
	refused func()
}

// refusal markers: memberlist's messages for a packet or stream that does
// not decrypt with the keyring, or that is not encrypted at all.
var refusals = []string{
	"decrypt",                       // "Decrypt packet failed", "No installed keys could decrypt the message"
	"remote state is not encrypted", // a peer without a key
	"encryption is not configured",  // only on a node without a key
	"no installed keys",
}

func (l *logBridge) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level, msg := slog.LevelInfo, line
	for _, lv := range []struct {
		tag   string
		level slog.Level
	}{{"[ERR]", slog.LevelError}, {"[WARN]", slog.LevelWarn}, {"[INFO]", slog.LevelDebug}, {"[DEBUG]", slog.LevelDebug}} {
		if i := strings.Index(line, lv.tag); i >= 0 {
			level, msg = lv.level, strings.TrimSpace(line[i+len(lv.tag):])
			break
		}
	}
	low := strings.ToLower(msg)
	for _, m := range refusals {
		if strings.Contains(low, m) {
			l.refused()
			l.log.Warn("replica: peer refused: not authenticated with the cluster key", "detail", msg)
			return len(p), nil
		}
	}
	l.log.Log(context.Background(), level, msg)
	return len(p), nil
}
