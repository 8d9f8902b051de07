package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Results of a step, as the step line prints them (go test's words).
const (
	resultOK   = "ok"
	resultFail = "FAIL"
	resultSkip = "SKIP"
)

// Step is the record of one step of ./test.sh: a line of the ledger.
type Step struct {
	Name    string  `json:"name"`
	Result  string  `json:"result"`
	Seconds float64 `json:"seconds"`
	// GoTest is set for a `go test` run, whose counts are its tests';
	// any other step counts once, in its result's column.
	GoTest  bool    `json:"go_test,omitempty"`
	Passed  int     `json:"passed"`
	Failed  int     `json:"failed"`
	Skipped int     `json:"skipped"`
	Skips   []Entry `json:"skips,omitempty"`
	// Failures name what failed: tests, packages, or the step itself.
	Failures []Entry `json:"failures,omitempty"`
}

// Entry is one skipped or failed item. A test has its package and name;
// a package that failed outside its tests has only its package; a step
// that was skipped or failed as a whole has neither.
type Entry struct {
	Package string `json:"package,omitempty"`
	Test    string `json:"test,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// appendStep adds s to the ledger at path (created when missing).
func appendStep(path string, s Step) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode step %q: %w", s.Name, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open ledger: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write ledger %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close ledger %s: %w", path, err)
	}
	return nil
}

// readLedger returns the steps recorded at path, in order.
func readLedger(path string) ([]Step, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("open ledger: %w (no step was recorded)", err)
		}
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	defer f.Close()
	var steps []Step
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		var s Step
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("ledger %s line %d: %w", path, n, err)
		}
		steps = append(steps, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read ledger %s: %w", path, err)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("ledger %s is empty: no step was recorded", path)
	}
	return steps, nil
}
