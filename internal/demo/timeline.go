package demo

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/internal/simrun"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/verbs"
)

// timeline prints what a run saw, at its level of detail. Records of
// one instant are gathered and printed together, so that a line may say
// why with what else happened at that instant (a migration at a
// PORT_ERR is proactive).
type timeline struct {
	w     io.Writer
	err   error // the first write error
	level int

	batch []simrun.Record
	last  map[*simrun.Proc]status.QP // the last status each process reported
	letGo map[*simrun.Proc]bool      // layer 1 let the process's QP go since it last armed it
	// traced counts the trace records of each kind since the last mark
	// (VerboseTrace): past traceCap, they are counted, not printed
	traced map[string]int
}

// traceCap bounds the trace records of one kind printed between two
// marks of the timeline (a fault or repair, the end).
const traceCap = 20

func newTimeline(w io.Writer, level int) *timeline {
	return &timeline{w: w, level: level, last: map[*simrun.Proc]status.QP{}, letGo: map[*simrun.Proc]bool{}, traced: map[string]int{}}
}

// plain prints a line as is.
func (t *timeline) plain(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format+"\n", args...)
	}
}

// at prints one timeline line: virtual time in ms, then what happened.
func (t *timeline) at(at time.Duration, format string, args ...any) {
	t.plain("%10.3f ms  %s", float64(at)/float64(time.Millisecond), fmt.Sprintf(format, args...))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

// observe takes a record as the run makes it (simrun.Config.Observe).
func (t *timeline) observe(r simrun.Record) {
	if len(t.batch) > 0 && t.batch[0].At != r.At {
		t.flush()
	}
	t.batch = append(t.batch, r)
}

// mark ends a stretch of the timeline (at a fault or repair, at the
// end): it prints what was gathered, and how many trace records of each
// kind were counted and not printed.
func (t *timeline) mark(at time.Duration) {
	t.flush()
	var over []string
	for _, k := range sortedKeys(t.traced) {
		if n := t.traced[k]; n > traceCap {
			over = append(over, fmt.Sprintf("%d %s", n-traceCap, k))
		}
	}
	if len(over) > 0 {
		t.at(at, "  fabric: %s records more since the last mark, not printed", strings.Join(over, ", "))
	}
	clear(t.traced)
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// flush prints the records gathered.
func (t *timeline) flush() {
	b := t.batch
	t.batch = nil
	for _, r := range b {
		t.render(r, b)
	}
}

func (t *timeline) render(r simrun.Record, batch []simrun.Record) {
	switch r.Kind {
	case simrun.KindAppEvent:
		t.appEvent(r)
	case simrun.KindStatus:
		t.status(r, batch)
	case simrun.KindEvent:
		t.event(r, batch)
	case simrun.KindLog:
		if t.level >= VerboseDecisions && r.Level >= slog.LevelInfo {
			t.at(r.At, "%s shim: %s", r.Proc.Name, strings.TrimPrefix(r.Text, "libibpath: "))
		}
	case simrun.KindTrace:
		if t.level < VerboseTrace {
			break
		}
		if t.traced[r.Trace.Kind]++; t.traced[r.Trace.Kind] <= traceCap {
			t.at(r.At, "  fabric %s/%s %-5s %s", r.Trace.Host, r.Trace.Device, r.Trace.Kind, r.Trace.Detail)
		}
	case simrun.KindViolation:
		t.at(r.At, "%s: VIOLATION: %s", r.Proc.Name, r.Text)
	case simrun.KindSurfaced:
		t.at(r.At, "%s: the error reaches the application: %s", r.Proc.Name, r.Text)
	case simrun.KindPause:
		t.at(r.At, "%s: completing again after %s without a completion", r.Proc.Name, ms(r.Pause))
	}
}

// appEvent: an async event the application read, or that the runtime
// kept from it.
func (t *timeline) appEvent(r simrun.Record) {
	ev := r.Event
	what := fmt.Sprintf("async event %v", ev.Type)
	switch ev.Type.Scope() {
	case verbs.ScopePort:
		what += fmt.Sprintf(" on %s port %d", r.Proc.Device, ev.Port)
	case verbs.ScopeQP:
		what += " on its QP"
	default:
		what += " on " + r.Proc.Device
	}
	if r.Kept {
		what += ": kept from the application, layer 2 carries its QP"
	}
	t.at(r.At, "%s: %s", r.Proc.Name, what)
}

// event: what a runtime told ibpathd happened (a migration, a failover,
// a switch back).
func (t *timeline) event(r simrun.Record, batch []simrun.Record) {
	e := r.Ev
	switch e.Kind {
	case status.EvPathMigrated:
		line := fmt.Sprintf("%s layer 1: migrated %s -> %s", r.Proc.Name, e.From, e.To)
		if why := t.migrationCause(r, batch); why != "" {
			line += ": " + why
		}
		t.at(r.At, "%s", line)
	case status.EvFailover:
		t.at(r.At, "%s layer 2: failover onto the backup %s: %s", r.Proc.Name, e.To, e.Reason)
	case status.EvSwitchback:
		t.at(r.At, "%s layer 2: back home on %s: %s", r.Proc.Name, e.To, e.Reason)
	default:
		if t.level >= VerboseDecisions {
			t.at(r.At, "%s event %s %s -> %s (%s)", r.Proc.Name, e.Kind, e.From, e.To, e.Reason)
		}
	}
}

// migrationCause says why layer 1 migrated, from what else happened at
// that instant in the same process.
func (t *timeline) migrationCause(r simrun.Record, batch []simrun.Record) string {
	e := r.Ev
	from := strings.TrimPrefix(e.From, "port ")
	if i := strings.Index(from, "+"); i >= 0 {
		from = from[:i]
	}
	sawLog := func(part string) bool {
		for _, x := range batch {
			if x.Proc == r.Proc && x.Kind == simrun.KindLog && strings.Contains(x.Text, part) {
				return true
			}
		}
		return false
	}
	// The runtime logs the PATH_MIG the application read before layer 1
	// acts on it; a migration of layer 1's own raises one after.
	for _, x := range batch {
		if x.At == r.At && x.Proc == r.Proc && x.Kind == simrun.KindEvent && x.Ev == r.Ev {
			break
		}
		if x.Proc == r.Proc && x.Kind == simrun.KindLog && x.Attrs["event"] == verbs.EventPathMig.String() {
			return "the HCA followed the peer (PATH_MIG)"
		}
	}
	switch {
	case sawLog(" PORT_ERR port " + from):
		return "proactive, at the PORT_ERR of port " + from
	case e.To == t.last[r.Proc].Home.String():
		return "failback, home armed for the hold-down"
	case sawLog(" PORT_ACTIVE port "):
		return "a hop to its armed alternate, so that home can be armed next (the device takes no new alternate while ARMED)"
	}
	return ""
}

// status: a runtime reported a QP's status. The timeline tells the
// layers' changes that matter (armed, handed over, unsupported,
// surfaced); with VerboseDecisions, every change.
func (t *timeline) status(r simrun.Record, batch []simrun.Record) {
	s := r.Status
	old, seen := t.last[r.Proc]
	t.last[r.Proc] = s
	if seen && old.Layer == s.Layer && old.APM == s.APM && old.Primary == s.Primary && old.Alternate == s.Alternate &&
		old.CrossNIC == s.CrossNIC && old.Reason == s.Reason && old.Backup == s.Backup {
		return
	}
	var lines []string
	if old.APM != s.APM {
		switch s.APM {
		case fsm.APMArmed.String():
			again := ""
			if t.letGo[r.Proc] {
				again = "protects the QP again: "
			}
			t.letGo[r.Proc] = false
			lines = append(lines, fmt.Sprintf("layer 1: %sarmed, primary %s, alternate %s", again, s.Primary, s.Alternate))
		case fsm.APMHandedOver.String():
			t.letGo[r.Proc] = true
			lines = append(lines, "layer 1: "+t.handOverReason(r, batch))
		case fsm.APMUnsupported.String():
			lines = append(lines, "layer 1: unsupported: "+s.Reason)
		}
	}
	if old.CrossNIC != s.CrossNIC {
		switch {
		case s.CrossNIC == fsm.SQDefault.String() && old.CrossNIC == "":
			lines = append(lines, "layer 2: armed, backup "+s.Backup.String())
		case s.CrossNIC == fsm.SQSurfaced.String():
			lines = append(lines, "layer 2: the error surfaces"+t.surfaceReason(r, batch))
		}
	}
	if len(lines) == 0 && t.level >= VerboseDecisions {
		lines = append(lines, statusChange(old, s))
	}
	for _, l := range lines {
		t.at(r.At, "%s %s", r.Proc.Name, l)
	}
}

// surfaceReason is why layer 2 let the error surface, as it logged it
// (", because ..."; "" when it did not say).
func (t *timeline) surfaceReason(r simrun.Record, batch []simrun.Record) string {
	for _, x := range batch {
		if x.Proc == r.Proc && x.Kind == simrun.KindLog && x.Attrs["why"] != "" {
			return ": " + x.Attrs["why"]
		}
	}
	if r.Status.Reason != "" {
		return ": " + r.Status.Reason
	}
	return ""
}

// handOverReason says why layer 1 no longer protects the QP: it handed
// it to layer 2 (with the reason it logged), or layer 2 took it over
// (the peer's notification) and layer 1 let it go.
func (t *timeline) handOverReason(r simrun.Record, batch []simrun.Record) string {
	for _, x := range batch {
		if x.Proc == r.Proc && x.Kind == simrun.KindLog && x.Attrs["reason"] != "" && strings.Contains(x.Text, "layer 1 hands the QP over") {
			return "handed to layer 2 (cross-NIC): " + x.Attrs["reason"]
		}
	}
	return "lets the QP go: layer 2 (cross-NIC) took it over"
}

// statusChange says what changed in a QP's status, layer by layer.
func statusChange(old, s status.QP) string {
	var parts []string
	if old.Layer != s.Layer {
		parts = append(parts, "protected by "+layerName(s.Layer))
	}
	if old.APM != s.APM || old.Primary != s.Primary || old.Alternate != s.Alternate {
		parts = append(parts, fmt.Sprintf("layer 1 %s, primary %s, alternate %s", s.APM, s.Primary, s.Alternate))
	}
	if old.CrossNIC != s.CrossNIC || old.Backup != s.Backup {
		x := s.CrossNIC
		if x == "" {
			x = "-"
		}
		parts = append(parts, fmt.Sprintf("layer 2 %s, backup %s", x, s.Backup))
	}
	if old.Reason != s.Reason && s.Reason != "" {
		parts = append(parts, "reason: "+s.Reason)
	}
	if len(parts) == 0 {
		return "status unchanged"
	}
	return "status: " + strings.Join(parts, "; ")
}

// layerName names a status layer in words.
func layerName(l string) string {
	switch l {
	case status.LayerAPM:
		return "layer 1 (APM)"
	case status.LayerCrossNIC:
		return "layer 2 (cross-NIC)"
	case status.LayerNone:
		return "no layer"
	}
	return l
}
