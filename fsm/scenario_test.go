package fsm

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// scenarioFile reads a scenario file of testdata/: blank lines and '#'
// comments are skipped; "scenario NAME" starts a scenario (begin is called
// with its name); other lines that do not contain "->" go to directive;
// every step line "event args -> actions | state" goes to step with its
// fields. It returns how many scenarios and steps it read.
func scenarioFile(t *testing.T, path string, begin func(name string), directive func(lineNo int, line string),
	step func(lineNo int, event []string, actions, state string)) (scenarios, steps int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "scenario "):
			begin(strings.TrimPrefix(line, "scenario "))
			scenarios++
		case !strings.Contains(line, "->"):
			directive(lineNo, line)
		default:
			lhs, rhs, _ := strings.Cut(line, "->")
			acts, state, ok := strings.Cut(rhs, "|")
			if !ok {
				t.Fatalf("%s:%d: want 'event -> actions | state'", path, lineNo)
			}
			step(lineNo, strings.Fields(lhs), strings.Join(strings.Fields(acts), " "), strings.Join(strings.Fields(state), " "))
			steps++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return scenarios, steps
}
