package fsm

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestCrossNICScenarios replays testdata/crossnic.txt; every scenario
// starts from a fresh machine.
func TestCrossNICScenarios(t *testing.T) {
	var m *CrossNIC
	name := ""
	nScen, nSteps := scenarioFile(t, "testdata/crossnic.txt",
		func(n string) { name, m = n, &CrossNIC{} },
		func(lineNo int, line string) { t.Fatalf("line %d: unknown directive %q", lineNo, line) },
		func(lineNo int, event []string, acts, state string) {
			if m == nil {
				t.Fatalf("line %d: event before a scenario", lineNo)
			}
			if got := renderCN(m.Step(parseCN(t, lineNo, event))); got != acts {
				t.Errorf("%s\nline %d: %v: actions %q, want %q", name, lineNo, event, got, acts)
			}
			if got := fmt.Sprintf("%v %v", m.SQ, m.RQ); got != state {
				t.Errorf("%s\nline %d: %v: state %q, want %q", name, lineNo, event, got, state)
			}
		})
	if nScen < 9 || nSteps < 40 {
		t.Fatalf("only %d scenarios / %d steps read", nScen, nSteps)
	}
}

func parseCN(t *testing.T, n int, f []string) CNEvent {
	var ev CNEvent
	found := false
	for k := CNFault; k <= CNBackupFault; k++ {
		if len(f) > 0 && k.String() == f[0] {
			ev.Kind, found = k, true
		}
	}
	if !found {
		t.Fatalf("line %d: unknown event %v", n, f)
	}
	arg := ""
	if len(f) > 1 {
		arg = f[1]
	}
	switch ev.Kind {
	case CNFault:
		ev.ReplaySafe, ev.BackupReady, ev.Mailbox = arg != "atomic", arg != "nobackup", arg == "mailbox"
		ev.Reason = arg
	case CNPeerNotify, CNPeerAck:
		v, err := strconv.ParseUint(arg, 10, 64)
		if err != nil {
			t.Fatalf("line %d: counter %q", n, arg)
		}
		ev.PeerRecv = v
	default:
		ev.Reason = arg
	}
	return ev
}

func renderCN(as []CNAction) string {
	var out []string
	for _, a := range as {
		s := a.Kind.String()
		if a.Kind == ActRewindSends {
			s += fmt.Sprintf("=%d", a.PeerRecv)
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func TestSurfacedKeepsItsReason(t *testing.T) {
	m := &CrossNIC{}
	acts := m.Step(CNEvent{Kind: CNFault, ReplaySafe: false, BackupReady: true, Reason: "RETRY_EXC_ERR"})
	if len(acts) != 1 || acts[0].Kind != ActSurface || !strings.Contains(m.Reason, "atomic") || !strings.Contains(acts[0].Reason, "RETRY_EXC_ERR") {
		t.Fatalf("actions %+v reason %q", acts, m.Reason)
	}
}

// FuzzCrossNIC checks the machine's structure under any event order: a
// surfaced QP never moves, the fence is only posted from WaitSignaled, and
// held WRs are only released after the notification completed.
func FuzzCrossNIC(f *testing.F) {
	f.Add([]byte{0, 2, 3, 5, 6, 7, 8})
	f.Add([]byte{1, 3, 5, 0, 3, 5, 6, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &CrossNIC{}
		for i, b := range data {
			before := m.SQ
			ev := CNEvent{Kind: CNEventKind(b % 10), ReplaySafe: b&16 == 0, BackupReady: b&32 == 0, PeerRecv: uint64(b)}
			acts := m.Step(ev)
			if before == SQSurfaced && (len(acts) != 0 || m.SQ != SQSurfaced) {
				t.Fatalf("step %d: surfaced QP moved to %v with %v", i, m.SQ, acts)
			}
			for _, a := range acts {
				switch a.Kind {
				case ActPostSwitchNotify:
					if before != SQWaitSignaled {
						t.Fatalf("step %d: switch notification from %v", i, before)
					}
				case ActReleaseHeld:
					if before != SQWaitNotify {
						t.Fatalf("step %d: held WRs released from %v", i, before)
					}
				case ActRewindSends:
					if m.SQ != SQFallback {
						t.Fatalf("step %d: rewind into %v", i, m.SQ)
					}
				}
			}
		}
	})
}
