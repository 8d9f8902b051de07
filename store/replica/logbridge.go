package replica

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/ibpath/ibpath/internal/ratelimit"
)

// logBridge receives memberlist's log lines (it logs through a
// *log.Logger) and re-emits them through slog at their level. Lines that
// say a peer's traffic could not be authenticated with the cluster key
// are counted by the peer's host (refused) and logged as "peer refused",
// at most refusalLines a second: one sender must not be able to flood
// the log, nor make the count of refused peers say there are many.
type logBridge struct {
	log     *slog.Logger
	refused func(host string)
	lines   ratelimit.Lines // Max: refusalLines
}

// refusalLines bounds the "peer refused" lines a second.
const refusalLines = 10

// peerHost is the host of memberlist's "from=ADDR" in a log line
// ("unknown" without one).
func peerHost(line string) string {
	i := strings.Index(line, "from=")
	if i < 0 {
		return "unknown"
	}
	addr, _, _ := strings.Cut(line[i+len("from="):], " ")
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// refusal markers: memberlist's messages for a packet or stream that does
// not decrypt with the keyring, or that is not encrypted at all.
var refusals = []string{
	"decrypt",                       // "Decrypt packet failed", "No installed keys could decrypt the message"
	"remote state is not encrypted", // a peer without a key
	"encryption is not configured",  // only on a node without a key
	"no installed keys",
	"unacceptable label", // a peer of another memberlist label (Label)
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
			l.refused(peerHost(msg))
			if held, ok := l.lines.Allow(time.Now()); ok {
				l.log.Warn("replica: peer refused: not authenticated with the cluster key", "detail", msg, "not_logged_before", held)
			}
			return len(p), nil
		}
	}
	l.log.Log(context.Background(), level, msg)
	return len(p), nil
}
