package main

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestMakeStepCommand(t *testing.T) {
	s, detail, err := makeStep(stepInput{name: "go vet", seconds: 2.5, rc: 0, log: "chatter"})
	if err != nil {
		t.Fatal(err)
	}
	want := Step{Name: "go vet", Result: resultOK, Seconds: 2.5, Passed: 1}
	if !reflect.DeepEqual(s, want) || detail != "" {
		t.Errorf("passing command: %+v, detail %q; want %+v and no detail", s, detail, want)
	}

	s, detail, err = makeStep(stepInput{name: "go vet", seconds: 2.5, rc: 3, log: "x.go:1: bad\n"})
	if err != nil {
		t.Fatal(err)
	}
	want = Step{Name: "go vet", Result: resultFail, Seconds: 2.5, Failed: 1, Failures: []Entry{{Reason: "exit status 3"}}}
	if !reflect.DeepEqual(s, want) || detail != "x.go:1: bad\n" {
		t.Errorf("failing command: %+v, detail %q; want %+v and its output", s, detail, want)
	}
}

func TestMakeStepSkipped(t *testing.T) {
	s, detail, err := makeStep(stepInput{name: "pyflakes", skip: "not installed"})
	if err != nil {
		t.Fatal(err)
	}
	want := Step{Name: "pyflakes", Result: resultSkip, Skipped: 1, Skips: []Entry{{Reason: "not installed"}}}
	if !reflect.DeepEqual(s, want) || detail != "" {
		t.Errorf("skipped step: %+v, detail %q; want %+v", s, detail, want)
	}
}

func goStep(t *testing.T, stream string, rc int, stderr string) (Step, string) {
	t.Helper()
	f, err := os.Open("testdata/" + stream + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, detail, err := makeStep(stepInput{name: "race", seconds: 1, rc: rc, log: stderr, goJSON: f})
	if err != nil {
		t.Fatal(err)
	}
	return s, detail
}

func TestMakeStepGoTest(t *testing.T) {
	s, detail := goStep(t, "skip", 0, "")
	if s.Result != resultOK || !s.GoTest || s.Passed != 3 || s.Skipped != 3 || len(s.Skips) != 3 || detail != "" {
		t.Errorf("go test with skips: %+v, detail %q", s, detail)
	}

	s, detail = goStep(t, "fail", 1, "")
	run := parseFile(t, "fail")
	if s.Result != resultFail || s.Failed != 4 || !reflect.DeepEqual(s.Failures, run.Failures) || detail != run.Output {
		t.Errorf("failing go test: %+v, detail %q", s, detail)
	}
}

// go test failing on its own (a bad flag) fails the step even though no
// test failed, and its stderr says why.
func TestMakeStepGoTestExitWithoutFailure(t *testing.T) {
	s, detail := goStep(t, "pass", 1, "flag provided but not defined: -bogus\n")
	if s.Result != resultFail || s.Failed != 1 || s.Passed != 4 {
		t.Errorf("step %+v, want FAIL with one failure besides 4 passes", s)
	}
	if want := []Entry{{Reason: "go test exited 1 with no test or package failed"}}; !reflect.DeepEqual(s.Failures, want) {
		t.Errorf("failures %v, want %v", s.Failures, want)
	}
	if detail != "flag provided but not defined: -bogus\n" {
		t.Errorf("detail %q, want go test's stderr", detail)
	}
}

func TestMakeStepBadStream(t *testing.T) {
	_, _, err := makeStep(stepInput{name: "race", goJSON: errReader{}})
	if err == nil || !strings.Contains(err.Error(), `step "race"`) {
		t.Errorf("makeStep on a failing reader: %v, want an error naming the step", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, os.ErrClosed }

func TestStepLine(t *testing.T) {
	for _, c := range []struct {
		s    Step
		want string
	}{
		{Step{Name: "gofmt", Result: resultOK, Seconds: 0.31, Passed: 1},
			"ok    gofmt                                                0.3s"},
		{Step{Name: "go vet", Result: resultFail, Seconds: 123.45, Failed: 1},
			"FAIL  go vet                                             123.5s"},
		{Step{Name: "go test -short", Result: resultOK, Seconds: 9, GoTest: true, Passed: 12, Skipped: 2},
			"ok    go test -short                                       9.0s  12 passed, 0 failed, 2 skipped"},
		{Step{Name: "pyflakes", Result: resultSkip, Skipped: 1, Skips: []Entry{{Reason: "not installed"}}},
			"SKIP  pyflakes: not installed"},
	} {
		if got := stepLine(c.s); got != c.want {
			t.Errorf("stepLine(%+v)\n got %q\nwant %q", c.s, got, c.want)
		}
	}
}

func TestSummary(t *testing.T) {
	steps := []Step{
		{Name: "gofmt", Result: resultOK, Passed: 1},
		{Name: "pyflakes", Result: resultSkip, Skipped: 1, Skips: []Entry{{Reason: "not installed"}}},
		{Name: "race", Result: resultFail, GoTest: true, Passed: 10, Failed: 2, Skipped: 1,
			Skips: []Entry{{Package: "m/internal/shim", Test: "TestCM", Reason: "cm_test.go:9: no librdmacm\nsecond line"}},
			Failures: []Entry{
				{Package: "m/apm", Test: "TestArm"},
				{Package: "m/x [m/x.test]", Reason: "build failed"},
			}},
		{Name: "shellcheck", Result: resultFail, Failed: 1, Failures: []Entry{{Reason: "exit status 1"}}},
	}
	text, failed := summary(steps, "m")
	want := `skipped:
  pyflakes: not installed
  internal/shim TestCM [race]: cm_test.go:9: no librdmacm
      second line
failed:
  apm TestArm [race]
  x [m/x.test] [race]: build failed
  shellcheck: exit status 1
11 passed, 3 failed, 2 skipped
`
	if text != want || !failed {
		t.Errorf("summary (failed %v):\n%s\nwant (failed true):\n%s", failed, text, want)
	}

	text, failed = summary(steps[:1], "m")
	if text != "1 passed, 0 failed, 0 skipped\n" || failed {
		t.Errorf("summary of a passing step: %q, failed %v", text, failed)
	}
}

func TestRelPackage(t *testing.T) {
	for _, c := range []struct{ path, module, want string }{
		{"github.com/ibpath/ibpath/apm", "github.com/ibpath/ibpath", "apm"},
		{"github.com/ibpath/ibpath", "github.com/ibpath/ibpath", "."},
		{"github.com/ibpath/ibpathx/apm", "github.com/ibpath/ibpath", "github.com/ibpath/ibpathx/apm"},
		{"github.com/ibpath/ibpath/apm", "", "github.com/ibpath/ibpath/apm"},
	} {
		if got := relPackage(c.path, c.module); got != c.want {
			t.Errorf("relPackage(%q, %q) = %q, want %q", c.path, c.module, got, c.want)
		}
	}
}
