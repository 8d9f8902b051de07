package fsm

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestAPMScenarios replays testdata/apm.txt: every line is an event, the
// actions the machine must return, and the state after it.
func TestAPMScenarios(t *testing.T) {
	var m *APM
	name := ""
	nScen, nChecked := scenarioFile(t, "testdata/apm.txt",
		func(n string) { name = n },
		func(lineNo int, line string) {
			if !strings.HasPrefix(line, "new ") {
				t.Fatalf("line %d: unknown directive %q", lineNo, line)
			}
			m = newFromLine(t, lineNo, line)
		},
		func(lineNo int, event []string, acts, state string) {
			if m == nil {
				t.Fatalf("line %d: event before 'new'", lineNo)
			}
			got := renderActions(m.Step(parseEvent(t, lineNo, event)))
			if got != acts {
				t.Errorf("%s\nline %d: %v: actions %q, want %q", name, lineNo, event, got, acts)
			}
			if got := renderState(m); got != state {
				t.Errorf("%s\nline %d: %v: state %q, want %q", name, lineNo, event, got, state)
			}
		})
	if nScen < 10 || nChecked < 60 {
		t.Fatalf("only %d scenarios / %d steps read: the file did not parse as intended", nScen, nChecked)
	}
}

func newFromLine(t *testing.T, n int, line string) *APM {
	home, fb := PathRef{}, FailbackAuto
	for _, f := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "home":
			home = parsePath(t, n, v)
		case "failback":
			var err error
			if fb, err = ParseFailback(v); err != nil {
				t.Fatalf("line %d: %v", n, err)
			}
		default:
			t.Fatalf("line %d: unknown %q", n, f)
		}
	}
	return NewAPM(home, fb)
}

func parsePath(t *testing.T, n int, s string) PathRef {
	port, bits, _ := strings.Cut(s, "+")
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("line %d: path %q", n, s)
	}
	b := 0
	if bits != "" {
		if b, err = strconv.Atoi(bits); err != nil {
			t.Fatalf("line %d: path %q", n, s)
		}
	}
	return PathRef{Port: uint8(p), Bits: uint8(b)}
}

func parseEvent(t *testing.T, n int, f []string) APMEvent {
	if len(f) == 0 {
		t.Fatalf("line %d: no event", n)
	}
	var ev APMEvent
	found := false
	for k := EvArmRequested; k <= EvAltKept; k++ {
		if k.String() == f[0] {
			ev.Kind, found = k, true
		}
	}
	if !found {
		t.Fatalf("line %d: unknown event %q", n, f[0])
	}
	arg := ""
	if len(f) > 1 {
		arg = f[1]
	}
	switch ev.Kind {
	case EvAltLoaded, EvPathMigrated, EvResync:
		ev.Path = parsePath(t, n, arg)
	case EvAltKept:
		ev.Path, ev.Want = parsePath(t, n, arg), parsePath(t, n, arg)
		if len(f) > 2 {
			w, ok := strings.CutPrefix(f[2], "want=")
			if !ok {
				t.Fatalf("line %d: %q: want want=PATH", n, f[2])
			}
			ev.Want = parsePath(t, n, w)
		}
	case EvPortDown, EvPortUp:
		ev.Port = parsePath(t, n, arg).Port
	default:
		ev.Reason = arg
	}
	return ev
}

func renderActions(as []APMAction) string {
	var out []string
	for _, a := range as {
		s := a.Kind.String()
		if a.HasPrefer {
			s += fmt.Sprintf(" prefer=%s", pathArg(a.Prefer))
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func pathArg(p PathRef) string {
	if p.Bits == 0 {
		return strconv.Itoa(int(p.Port))
	}
	return fmt.Sprintf("%d+%d", p.Port, p.Bits)
}

func renderState(m *APM) string {
	alt := "-"
	if m.HasAlt {
		alt = pathArg(m.Alt)
	}
	return fmt.Sprintf("%v %s %s", m.State, pathArg(m.Primary), alt)
}

func TestWantsFailbackNeedsHomeUp(t *testing.T) {
	m := NewAPM(PathRef{Port: 1}, FailbackAuto)
	m.Step(APMEvent{Kind: EvArmRequested})
	m.Step(APMEvent{Kind: EvAltLoaded, Path: PathRef{Port: 2}})
	m.Step(APMEvent{Kind: EvArmedObserved})
	m.Step(APMEvent{Kind: EvPathMigrated, Path: PathRef{Port: 2}})
	m.Step(APMEvent{Kind: EvAltLoaded, Path: PathRef{Port: 1}})
	m.Step(APMEvent{Kind: EvArmedObserved})
	if !m.WantsFailback() {
		t.Fatal("away from home with home armed: must want failback")
	}
	m.Step(APMEvent{Kind: EvPortDown, Port: 1})
	if m.WantsFailback() {
		t.Fatal("home port down: must not want failback")
	}
	if acts := m.Step(APMEvent{Kind: EvFailbackDue}); len(acts) != 0 {
		t.Fatalf("failback-due with home down gave %v", acts)
	}
}

func TestParseFailback(t *testing.T) {
	for _, s := range []string{"auto", "manual"} {
		f, err := ParseFailback(s)
		if err != nil || f.String() != s {
			t.Errorf("ParseFailback(%q) = %v, %v", s, f, err)
		}
	}
	if _, err := ParseFailback("sometimes"); err == nil {
		t.Error("ParseFailback accepted a bad value")
	}
}

// FuzzAPM drives the machine with arbitrary event sequences and checks its
// structural invariants.
func FuzzAPM(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0, 1, 3, 6, 7, 9, 2, 12, 13})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewAPM(PathRef{Port: 1}, Failback(len(data)%2))
		for i, b := range data {
			ev := APMEvent{Kind: APMEventKind(b % 16), Port: 1 + b/15%2, Path: PathRef{Port: 1 + b/30%2, Bits: b / 60 % 2}}
			before := m.State
			acts := m.Step(ev)
			if (before == APMHandedOver || before == APMUnsupported) && (len(acts) != 0 || m.State != before) {
				t.Fatalf("step %d: a final state moved: %v -> %v, %v", i, before, m.State, acts)
			}
			if m.State == APMArmed && !m.HasAlt || m.State == APMRearming && !m.HasAlt {
				t.Fatalf("step %d: %v without an alternate", i, m.State)
			}
			for _, a := range acts {
				if a.Kind == ActMigrate && m.State != APMArmed {
					t.Fatalf("step %d: migrate while %v", i, m.State)
				}
				if a.HasPrefer && a.Prefer == m.Primary {
					t.Fatalf("step %d: prefers the current primary", i)
				}
			}
		}
	})
}
