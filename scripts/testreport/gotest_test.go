package main

// The streams in testdata/*.jsonl are real `go test -json` output (go
// 1.26) of the packages in testdata/canned, made there with
//
//	go test -json -count=1 ./NAME > ../NAME.jsonl          (pass fail skip build panic parallel)
//	go test -json -count=1 -timeout 2s ./timeout > ../timeout.jsonl
//	go test -json -count=1 ./pass ./skip ./build ./fail > ../mixed.jsonl

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

const canned = "example.com/canned/"

func parseFile(t *testing.T, name string) *goRun {
	t.Helper()
	f, err := os.Open("testdata/" + name + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run, err := parseGoTest(f)
	if err != nil {
		t.Fatalf("parseGoTest(%s): %v", name, err)
	}
	return run
}

func parseString(t *testing.T, stream string) *goRun {
	t.Helper()
	run, err := parseGoTest(strings.NewReader(stream))
	if err != nil {
		t.Fatalf("parseGoTest: %v", err)
	}
	return run
}

func checkCounts(t *testing.T, run *goRun, passed, failed, skipped int) {
	t.Helper()
	if run.Passed != passed || run.Failed != failed || run.Skipped != skipped {
		t.Errorf("counts %d passed, %d failed, %d skipped; want %d, %d, %d",
			run.Passed, run.Failed, run.Skipped, passed, failed, skipped)
	}
}

func TestParsePass(t *testing.T) {
	run := parseFile(t, "pass")
	// TestOne, TestTable and its two subtests
	checkCounts(t, run, 4, 0, 0)
	if run.Output != "" || run.Failures != nil || run.Skips != nil {
		t.Errorf("a passing run left output %q, failures %v, skips %v", run.Output, run.Failures, run.Skips)
	}
}

// A failed test shows as plain go test shows it: its "--- FAIL" line
// first, then its output; failed subtests nested and indented at their
// place among the parent's lines; passed tests and their logs left out.
func TestParseFailShowsOutputAsPlainGoTest(t *testing.T) {
	run := parseFile(t, "fail")
	checkCounts(t, run, 2, 4, 0) // TestGood and TestNested/ok pass
	want := `--- FAIL: TestBad (0.00s)
    fail_test.go:11: before the check
printed to stdout
    fail_test.go:13: got 1, want 2
        second line
--- FAIL: TestNested (0.00s)
    fail_test.go:17: parent log
    --- FAIL: TestNested/broken (0.00s)
        --- FAIL: TestNested/broken/deep (0.00s)
            fail_test.go:20: deep failure
        fail_test.go:21: after deep
    fail_test.go:23: parent after
FAIL
FAIL	example.com/canned/fail	0.010s
`
	if run.Output != want {
		t.Errorf("output:\n%s\nwant:\n%s", run.Output, want)
	}
	wantFailures := []Entry{
		{Package: canned + "fail", Test: "TestBad"},
		{Package: canned + "fail", Test: "TestNested/broken/deep"},
		{Package: canned + "fail", Test: "TestNested/broken"},
		{Package: canned + "fail", Test: "TestNested"},
	}
	if !reflect.DeepEqual(run.Failures, wantFailures) {
		t.Errorf("failures %v, want %v", run.Failures, wantFailures)
	}
	if strings.Contains(run.Output, "hidden") {
		t.Error("the output of a passed subtest is shown")
	}
}

func TestParseParallelSubtests(t *testing.T) {
	run := parseFile(t, "parallel")
	checkCounts(t, run, 1, 3, 0)
	want := `--- FAIL: TestPar (0.00s)
    --- FAIL: TestPar/mid (0.01s)
        parallel_test.go:16: mid starts
        parallel_test.go:19: mid failed
    --- FAIL: TestPar/slow (0.02s)
        parallel_test.go:16: slow starts
        parallel_test.go:19: slow failed
FAIL
FAIL	example.com/canned/parallel	0.023s
`
	if run.Output != want {
		t.Errorf("output:\n%s\nwant:\n%s", run.Output, want)
	}
}

func TestParseSkipReasons(t *testing.T) {
	run := parseFile(t, "skip")
	checkCounts(t, run, 3, 0, 3) // TestRuns, TestSub, TestSub/ran
	want := []Entry{
		{Package: canned + "skip", Test: "TestNeedsTool", Reason: "skip_test.go:8: librdmacm-dev is not installed (rdma/rdma_cma.h missing)"},
		{Package: canned + "skip", Test: "TestSub/skipped", Reason: "skip_test.go:12: profile roce has no APM"},
		{Package: canned + "skip", Test: "TestSkipNow", Reason: "no reason given"},
	}
	if !reflect.DeepEqual(run.Skips, want) {
		t.Errorf("skips %q\nwant  %q", run.Skips, want)
	}
	if run.Output != "" {
		t.Errorf("a run with skips and no failure left output %q", run.Output)
	}
}

func TestParseMultiLineSkipReason(t *testing.T) {
	run := parseString(t, `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestX"}
{"Action":"output","Package":"p","Test":"TestX","Output":"=== RUN   TestX\n"}
{"Action":"output","Package":"p","Test":"TestX","Output":"    x_test.go:3: no device\n"}
{"Action":"output","Package":"p","Test":"TestX","Output":"        try again as root\n"}
{"Action":"output","Package":"p","Test":"TestX","Output":"--- SKIP: TestX (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestX"}
{"Action":"pass","Package":"p"}
`)
	want := []Entry{{Package: "p", Test: "TestX", Reason: "x_test.go:3: no device\ntry again as root"}}
	if !reflect.DeepEqual(run.Skips, want) {
		t.Errorf("skips %q, want %q", run.Skips, want)
	}
}

func TestParseBuildFailure(t *testing.T) {
	run := parseFile(t, "build")
	checkCounts(t, run, 0, 1, 0)
	want := `# example.com/canned/build [example.com/canned/build.test]
build/build_test.go:5:32: declared and not used: x
build/build_test.go:5:40: cannot use "no" (untyped string constant) as int value in variable declaration
FAIL	example.com/canned/build [build failed]
`
	if run.Output != want {
		t.Errorf("output:\n%s\nwant:\n%s", run.Output, want)
	}
	wantFailures := []Entry{{Package: canned + "build", Reason: reasonBuildFailed}}
	if !reflect.DeepEqual(run.Failures, wantFailures) {
		t.Errorf("failures %v, want %v", run.Failures, wantFailures)
	}
}

// Two packages that fail on one broken dependency show its compiler
// output once, as go test does.
func TestParseBuildOutputShownOnce(t *testing.T) {
	run := parseString(t, `{"ImportPath":"m/dep","Action":"build-output","Output":"# m/dep\n"}
{"ImportPath":"m/dep","Action":"build-output","Output":"dep.go:1:1: syntax error\n"}
{"ImportPath":"m/dep","Action":"build-fail"}
{"Action":"start","Package":"m/a"}
{"Action":"output","Package":"m/a","Output":"FAIL\tm/a [build failed]\n"}
{"Action":"fail","Package":"m/a","FailedBuild":"m/dep"}
{"Action":"start","Package":"m/b"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b [build failed]\n"}
{"Action":"fail","Package":"m/b","FailedBuild":"m/dep"}
`)
	checkCounts(t, run, 0, 2, 0)
	want := "# m/dep\ndep.go:1:1: syntax error\nFAIL\tm/a [build failed]\nFAIL\tm/b [build failed]\n"
	if run.Output != want {
		t.Errorf("output:\n%s\nwant:\n%s", run.Output, want)
	}
}

func TestParsePanic(t *testing.T) {
	run := parseFile(t, "panic")
	checkCounts(t, run, 1, 1, 0) // TestBefore; TestAfter never ran
	lines := strings.Split(run.Output, "\n")
	if lines[0] != "--- FAIL: TestPanics (0.00s)" || lines[1] != "    panic_test.go:8: about to panic" ||
		lines[2] != "panic: assignment to entry in nil map [recovered, repanicked]" {
		t.Errorf("output starts %q, want the test's FAIL line, its log, then the panic", lines[:3])
	}
	for _, want := range []string{"example.com/canned/panic.TestPanics(", "FAIL\texample.com/canned/panic\t0.005s\n"} {
		if !strings.Contains(run.Output, want) {
			t.Errorf("output lacks %q:\n%s", want, run.Output)
		}
	}
	if !strings.HasSuffix(run.Output, "FAIL\texample.com/canned/panic\t0.005s\n") {
		t.Errorf("output does not end with the package's FAIL line:\n%s", run.Output)
	}
}

// A test binary that times out ends no test: the tests it was running
// fail, and their output (the timeout's panic) comes before the
// package's FAIL line.
func TestParseTimeout(t *testing.T) {
	run := parseFile(t, "timeout")
	checkCounts(t, run, 1, 2, 0)
	want := []Entry{
		{Package: canned + "timeout", Test: "TestHangs/inner", Reason: reasonUnfinished},
		{Package: canned + "timeout", Test: "TestHangs", Reason: reasonUnfinished},
	}
	if !reflect.DeepEqual(run.Failures, want) {
		t.Errorf("failures %v, want %v", run.Failures, want)
	}
	if !strings.HasPrefix(run.Output, "        timeout_test.go:12: waiting forever\npanic: test timed out after 2s\n") {
		t.Errorf("output does not start with the subtest's log and the panic:\n%s", run.Output)
	}
	if !strings.HasSuffix(run.Output, "FAIL\texample.com/canned/timeout\t2.057s\n") {
		t.Errorf("output does not end with the package's FAIL line:\n%s", run.Output)
	}
}

func TestParseMixed(t *testing.T) {
	run := parseFile(t, "mixed")
	checkCounts(t, run, 4+3+2, 1+4, 3)
	build := strings.Index(run.Output, "[build failed]")
	fail := strings.Index(run.Output, "--- FAIL: TestBad")
	if build < 0 || fail < 0 || build > fail {
		t.Errorf("output lacks a package or has them out of the order they ended:\n%s", run.Output)
	}
	if strings.Contains(run.Output, "ok  \t") || strings.Contains(run.Output, "skip_test.go") {
		t.Errorf("output shows a package that passed:\n%s", run.Output)
	}
}

// A stream cut short (go test killed) fails the test it was in, and a
// package that had started no test.
func TestParseTruncatedStream(t *testing.T) {
	b, err := os.ReadFile("testdata/fail.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	var cut int
	for i, l := range lines {
		if strings.Contains(l, "before the check") {
			cut = i + 1
			break
		}
	}
	run := parseString(t, strings.Join(lines[:cut], "")+`{"Action":"start","Package":"m/other"}`+"\n")
	checkCounts(t, run, 1, 2, 0)
	want := []Entry{
		{Package: canned + "fail", Test: "TestBad", Reason: reasonUnfinished},
		{Package: "m/other", Reason: reasonNoEnd},
	}
	if !reflect.DeepEqual(run.Failures, want) {
		t.Errorf("failures %v, want %v", run.Failures, want)
	}
	if run.Output != "    fail_test.go:11: before the check\n" {
		t.Errorf("output %q, want the unfinished test's log", run.Output)
	}
}

// A package that fails with every test passed (a race found after the
// tests, TestMain's exit) counts once, and shows its lines.
func TestParsePackageFailureOutsideTests(t *testing.T) {
	run := parseString(t, `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestA"}
{"Action":"pass","Package":"m/a","Test":"TestA"}
{"Action":"output","Package":"m/a","Output":"testing: race detected outside the tests\n"}
{"Action":"output","Package":"m/a","Output":"FAIL\tm/a\t0.1s\n"}
{"Action":"fail","Package":"m/a"}
`)
	checkCounts(t, run, 1, 1, 0)
	if want := []Entry{{Package: "m/a", Reason: reasonPackage}}; !reflect.DeepEqual(run.Failures, want) {
		t.Errorf("failures %v, want %v", run.Failures, want)
	}
	if want := "testing: race detected outside the tests\nFAIL\tm/a\t0.1s\n"; run.Output != want {
		t.Errorf("output %q, want %q", run.Output, want)
	}
}

func TestParseKeepsLinesThatAreNotJSON(t *testing.T) {
	run := parseString(t, "go: downloading example.com/x v1.0.0\n{\"Action\":\"start\",\"Package\":\"p\"}\n{\"Action\":\"pass\",\"Package\":\"p\"}")
	if run.Output != "go: downloading example.com/x v1.0.0\n" {
		t.Errorf("output %q, want the line that is not JSON", run.Output)
	}
	checkCounts(t, run, 0, 0, 0)
}

func TestParseNoTestFiles(t *testing.T) {
	run := parseString(t, `{"Action":"start","Package":"p"}
{"Action":"output","Package":"p","Output":"?   \tp\t[no test files]\n"}
{"Action":"skip","Package":"p"}
`)
	checkCounts(t, run, 0, 0, 0)
	if run.Output != "" || run.Skips != nil {
		t.Errorf("a package without tests left output %q, skips %v", run.Output, run.Skips)
	}
}

func TestParentOfSubtestWithSlashInName(t *testing.T) {
	pk := &pkg{tests: map[string]*test{"TestX": {name: "TestX"}}}
	if p := parentOf(pk, "TestX/a/b"); p == nil || p.name != "TestX" {
		t.Errorf("parentOf(TestX/a/b) = %v, want TestX", p)
	}
	pk.tests["TestX/a"] = &test{name: "TestX/a"}
	if p := parentOf(pk, "TestX/a/b"); p == nil || p.name != "TestX/a" {
		t.Errorf("parentOf(TestX/a/b) = %v, want TestX/a", p)
	}
	if p := parentOf(pk, "TestY"); p != nil {
		t.Errorf("parentOf(TestY) = %v, want none", p)
	}
}
