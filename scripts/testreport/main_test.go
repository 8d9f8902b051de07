package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// setNow fixes the clock for a test.
func setNow(t *testing.T, at time.Time) {
	t.Helper()
	old := now
	now = func() time.Time { return at }
	t.Cleanup(func() { now = old })
}

func runOut(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var b strings.Builder
	err := run(args, &b)
	return b.String(), err
}

// A run as ./test.sh makes it: steps recorded one by one, each printing
// its line (and what failed), then the summary.
func TestStepsThenSummary(t *testing.T) {
	setNow(t, time.Unix(1000, 500_000_000))
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger")
	vetLog := filepath.Join(dir, "vet.log")
	if err := os.WriteFile(vetLog, []byte("should not show\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr := filepath.Join(dir, "stderr")
	if err := os.WriteFile(stderr, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := runOut(t, "step", "-ledger", ledger, "-name", "go vet", "-since", "998.25", "-rc", "0", "-log", vetLog)
	if err != nil {
		t.Fatal(err)
	}
	if want := "ok    go vet" + strings.Repeat(" ", nameWidth-len("go vet")) + "     2.2s\n"; out != want {
		t.Errorf("vet step printed %q, want %q", out, want)
	}

	out, err = runOut(t, "step", "-ledger", ledger, "-name", "pyflakes", "-skip", "not installed")
	if err != nil || out != "SKIP  pyflakes: not installed\n" {
		t.Errorf("skipped step printed %q (%v)", out, err)
	}

	out, err = runOut(t, "step", "-ledger", ledger, "-name", "unit", "-since", "999,5", "-rc", "0",
		"-log", stderr, "-go-json", "testdata/skip.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "ok    unit ") || !strings.HasSuffix(out, "1.0s  3 passed, 0 failed, 3 skipped\n") {
		t.Errorf("go step printed %q", out)
	}

	out, err = runOut(t, "step", "-ledger", ledger, "-name", "race", "-since", "999", "-rc", "1",
		"-log", stderr, "-go-json", "testdata/fail.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(out, "\n", 2)
	if !strings.HasPrefix(lines[0], "FAIL  race ") || !strings.HasSuffix(lines[0], "1.5s  2 passed, 4 failed, 0 skipped") {
		t.Errorf("failing go step's line %q", lines[0])
	}
	if lines[1] != parseFile(t, "fail").Output {
		t.Errorf("failing go step's output:\n%s\nwant the failing tests' output", lines[1])
	}

	out, err = runOut(t, "summary", "-ledger", ledger, "-module", "example.com/canned")
	if !errors.Is(err, errFailed) {
		t.Errorf("summary of a failed run returned %v, want errFailed", err)
	}
	want := `skipped:
  pyflakes: not installed
  skip TestNeedsTool [unit]: skip_test.go:8: librdmacm-dev is not installed (rdma/rdma_cma.h missing)
  skip TestSub/skipped [unit]: skip_test.go:12: profile roce has no APM
  skip TestSkipNow [unit]: no reason given
failed:
  fail TestBad [race]
  fail TestNested/broken/deep [race]
  fail TestNested/broken [race]
  fail TestNested [race]
6 passed, 4 failed, 4 skipped
`
	if out != want {
		t.Errorf("summary:\n%s\nwant:\n%s", out, want)
	}
}

func TestSummaryOfAPassingRun(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger")
	if _, err := runOut(t, "step", "-ledger", ledger, "-name", "gofmt", "-since", "1", "-rc", "0"); err != nil {
		t.Fatal(err)
	}
	out, err := runOut(t, "summary", "-ledger", ledger)
	if err != nil || out != "1 passed, 0 failed, 0 skipped\n" {
		t.Errorf("summary printed %q, returned %v; want the closing line and nil", out, err)
	}
}

// No ledger, or an empty one, means ./test.sh recorded nothing: that is
// an error, not a run with nothing failed.
func TestSummaryWithoutSteps(t *testing.T) {
	dir := t.TempDir()
	if _, err := runOut(t, "summary", "-ledger", filepath.Join(dir, "none")); err == nil || errors.Is(err, errFailed) {
		t.Errorf("summary without a ledger: %v, want a usage error", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runOut(t, "summary", "-ledger", empty); err == nil || !strings.Contains(err.Error(), "no step was recorded") {
		t.Errorf("summary of an empty ledger: %v, want an error saying no step was recorded", err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("{not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runOut(t, "summary", "-ledger", bad); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("summary of a damaged ledger: %v, want an error naming the line", err)
	}
}

func TestUsageErrors(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"step", "-name", "x", "-since", "1", "-rc", "0"}, "-ledger and -name are required"},
		{[]string{"step", "-ledger", ledger, "-name", "x", "-rc", "0"}, "-since and -rc are required"},
		{[]string{"step", "-ledger", ledger, "-name", "x", "-since", "1"}, "-since and -rc are required"},
		{[]string{"step", "-ledger", ledger, "-name", "x", "-since", "1", "-rc", "ok"}, `-rc "ok" is not an exit status`},
		{[]string{"step", "-ledger", ledger, "-name", "x", "-since", "soon", "-rc", "0"}, `-since "soon" is not a time`},
		{[]string{"step", "-ledger", ledger, "-name", "x", "-skip", "why", "-rc", "0"}, "-skip goes alone"},
		{[]string{"step", "-ledger", ledger, "-name", "x", "-since", "1", "-rc", "0", "-log", "/nonexistent/log"}, "read its output"},
		{[]string{"step", "-ledger", ledger, "-name", "x", "-since", "1", "-rc", "0", "-go-json", "/nonexistent/j"}, "open its go test -json stream"},
		{[]string{"step", "-ledger", ledger, "-name", "x", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"step", "-ledger", ledger, "-name", "x", "-skip", "why", "extra"}, `unexpected argument "extra"`},
		{[]string{"summary"}, "-ledger is required"},
		{[]string{"summary", "-ledger", ledger, "extra"}, `unexpected argument "extra"`},
		{[]string{"scripts"}, "want a kind"},
		{[]string{"scripts", "perl"}, `unknown script kind "perl"`},
	} {
		_, err := runOut(t, c.args...)
		if err == nil || errors.Is(err, errFailed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(ledger); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused step wrote the ledger (%v)", err)
	}
}

func TestParseSince(t *testing.T) {
	for _, s := range []string{"1700000000.25", "1700000000,25"} {
		got, err := parseSince(s)
		if err != nil || !got.Equal(time.Unix(1700000000, 250_000_000)) {
			t.Errorf("parseSince(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "-1", "0", "x"} {
		if _, err := parseSince(s); err == nil {
			t.Errorf("parseSince(%q) accepted", s)
		}
	}
}
