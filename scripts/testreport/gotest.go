package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// event is one line of `go test -json`: cmd/test2json's TestEvent and the
// build events the go command adds (build-output, build-fail).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string
	FailedBuild string
}

// goRun is what one `go test -json` stream says: the results of its tests
// and subtests, each skip with its reason, each failure, and the output
// plain `go test` shows for the failures.
type goRun struct {
	Passed, Failed, Skipped int
	Skips                   []Entry
	Failures                []Entry
	// Output holds, for every failed package in the order the packages
	// ended, its failed tests as plain `go test` prints them (the
	// "--- FAIL" line, then the test's output, failed subtests nested
	// and indented), then the package's own lines ("FAIL\tpkg\t0.1s"),
	// and the compiler's output of a failed build. Passed and skipped
	// tests' output is left out, as plain `go test` leaves it out.
	Output string
}

// Reasons given for failures that no "--- FAIL" line names.
const (
	reasonUnfinished  = "did not finish (the test binary ended while it ran: a timeout, a panic elsewhere or an exit)"
	reasonBuildFailed = "build failed"
	reasonPackage     = "the package failed outside its tests"
	reasonNoEnd       = "the stream ended before the package did"
)

type testState int

const (
	running testState = iota
	paused
)

// test is one test or subtest that has started and not ended.
type test struct {
	name   string
	parent *test
	state  testState
	header string   // its "--- FAIL: name (...)" line, unindented
	items  []string // its output and its failed subtests' blocks, in order
}

// pkg is one package whose test binary has started and not ended.
type pkg struct {
	tests  map[string]*test
	order  []*test  // tests in the order they started
	items  []string // its own output and its failed top-level tests' blocks
	failed int      // failures counted in it
}

// parser follows one stream.
type parser struct {
	run       goRun
	out       strings.Builder
	pkgs      map[string]*pkg
	pkgOrder  []string
	build     map[string]string // build output by import path
	buildFail []string          // import paths whose build failed, in order
	shown     map[string]bool   // build outputs already in Output
}

// parseGoTest reads a `go test -json` stream to its end. Lines that are not
// JSON (the go command's own messages when stdout and stderr are merged)
// are kept in Output as they are.
func parseGoTest(r io.Reader) (*goRun, error) {
	p := &parser{pkgs: map[string]*pkg{}, build: map[string]string{}, shown: map[string]bool{}}
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			p.line(line)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read go test -json stream: %w", err)
		}
	}
	// packages the stream left unfinished (go test killed): their running
	// tests fail, and so does the package
	for _, name := range p.pkgOrder {
		if pk, ok := p.pkgs[name]; ok {
			p.endPackage(name, pk, "fail", "", reasonNoEnd)
		}
	}
	// a failed build that no package named
	for _, ip := range p.buildFail {
		if !p.shown[ip] {
			p.shown[ip] = true
			p.out.WriteString(p.build[ip])
			p.run.Failed++
			p.run.Failures = append(p.run.Failures, Entry{Package: ip, Reason: reasonBuildFailed})
		}
	}
	p.run.Output = p.out.String()
	return &p.run, nil
}

func (p *parser) line(line string) {
	trimmed := strings.TrimSpace(line)
	if trimmed == "" {
		return
	}
	var e event
	if !strings.HasPrefix(trimmed, "{") || json.Unmarshal([]byte(trimmed), &e) != nil {
		p.out.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			p.out.WriteString("\n")
		}
		return
	}
	switch e.Action {
	case "build-output":
		p.build[e.ImportPath] += e.Output
		return
	case "build-fail":
		p.buildFail = append(p.buildFail, e.ImportPath)
		return
	}
	if e.Package == "" {
		return
	}
	pk := p.pkgs[e.Package]
	if pk == nil {
		pk = &pkg{tests: map[string]*test{}}
		p.pkgs[e.Package] = pk
		p.pkgOrder = append(p.pkgOrder, e.Package)
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			pk.items = append(pk.items, e.Output)
		case "pass", "fail", "skip":
			p.endPackage(e.Package, pk, e.Action, e.FailedBuild, "")
		}
		return
	}
	p.testEvent(e, pk)
}

func (p *parser) testEvent(e event, pk *pkg) {
	t := pk.tests[e.Test]
	if t == nil || e.Action == "run" {
		t = &test{name: e.Test, parent: parentOf(pk, e.Test)}
		pk.tests[e.Test] = t
		pk.order = append(pk.order, t)
	}
	switch e.Action {
	case "pause":
		t.state = paused
	case "cont":
		t.state = running
	case "output":
		t.output(e.Output)
	case "pass":
		p.run.Passed++
		pk.end(t)
	case "skip":
		p.run.Skipped++
		p.run.Skips = append(p.run.Skips, Entry{Package: e.Package, Test: e.Test, Reason: skipReason(t.items)})
		pk.end(t)
	case "fail":
		p.run.Failed++
		pk.failed++
		p.run.Failures = append(p.run.Failures, Entry{Package: e.Package, Test: e.Test})
		pk.end(t)
		pk.attach(t)
	}
}

// parentOf finds the running test that name is a subtest of: the longest
// prefix of name, cut at a "/", that is a test (a subtest's own name may
// hold a "/").
func parentOf(pk *pkg, name string) *test {
	for i := strings.LastIndex(name, "/"); i > 0; i = strings.LastIndex(name[:i], "/") {
		if t := pk.tests[name[:i]]; t != nil {
			return t
		}
	}
	return nil
}

// output files one chunk of a test's output: the framing lines of -v
// output ("=== RUN" and the like) go, the test's own result line becomes
// its header, and everything else is kept.
func (t *test) output(s string) {
	trimmed := strings.TrimLeft(s, " ")
	for _, frame := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(trimmed, frame) {
			return
		}
	}
	for _, result := range []string{"--- PASS: ", "--- SKIP: ", "--- FAIL: "} {
		if strings.HasPrefix(trimmed, result+t.name+" (") {
			if result == "--- FAIL: " {
				t.header = trimmed
			}
			return
		}
	}
	t.items = append(t.items, s)
}

// end forgets an ended test.
func (pk *pkg) end(t *test) {
	if pk.tests[t.name] == t {
		delete(pk.tests, t.name)
	}
}

// attach puts a failed test's block where plain go test prints it: in its
// parent's output, indented, or in the package's.
func (pk *pkg) attach(t *test) {
	b := t.block()
	if t.parent == nil {
		pk.items = append(pk.items, b...)
		return
	}
	for _, s := range b {
		if strings.HasPrefix(s, " ") || strings.HasPrefix(s, "--- ") {
			s = "    " + s
		}
		t.parent.items = append(t.parent.items, s)
	}
}

// block is the test's header (when it has one) and its items. Lines that
// the test logged (they start with a space) and nested result lines are
// indented under a parent by attach; what the test printed itself
// (fmt.Println, a panic) stays at the margin, as plain go test has it.
func (t *test) block() []string {
	if t.header == "" {
		return t.items
	}
	return append([]string{t.header}, t.items...)
}

// endPackage closes a package: tests still running fail (the binary ended
// under them), and a failed package shows its failures in Output.
func (p *parser) endPackage(name string, pk *pkg, action, failedBuild, reason string) {
	delete(p.pkgs, name)
	if action == "skip" {
		return
	}
	// unfinished tests, deepest first so that each lands in its parent
	var unfinished []*test
	for i := len(pk.order) - 1; i >= 0; i-- {
		t := pk.order[i]
		if pk.tests[t.name] == t && t.state == running {
			unfinished = append(unfinished, t)
		}
	}
	var late []string
	for _, t := range unfinished {
		p.run.Failed++
		pk.failed++
		p.run.Failures = append(p.run.Failures, Entry{Package: name, Test: t.name, Reason: reasonUnfinished})
		pk.end(t)
		if t.parent != nil && pk.tests[t.parent.name] == t.parent {
			pk.attach(t)
		} else {
			late = append(late, t.block()...)
		}
	}
	if action == "pass" && pk.failed == 0 {
		return
	}
	if pk.failed == 0 {
		why := reason
		switch {
		case why != "":
		case failedBuild != "":
			why = reasonBuildFailed
		default:
			why = reasonPackage
		}
		p.run.Failed++
		p.run.Failures = append(p.run.Failures, Entry{Package: name, Reason: why})
	}
	if failedBuild != "" && !p.shown[failedBuild] {
		p.shown[failedBuild] = true
		p.out.WriteString(p.build[failedBuild])
	}
	// the unfinished tests' output goes before the package's closing
	// "FAIL" lines, where plain go test has a timeout's panic
	cut := len(pk.items)
	for cut > 0 && isSummaryLine(pk.items[cut-1]) {
		cut--
	}
	for _, s := range pk.items[:cut] {
		p.out.WriteString(s)
	}
	for _, s := range late {
		p.out.WriteString(s)
	}
	for _, s := range pk.items[cut:] {
		p.out.WriteString(s)
	}
}

// isSummaryLine tells go test's closing lines of a package ("FAIL",
// "FAIL\tpkg\t0.1s", "ok  \tpkg", "PASS").
func isSummaryLine(s string) bool {
	return s == "FAIL\n" || s == "PASS\n" || strings.HasPrefix(s, "FAIL\t") || strings.HasPrefix(s, "ok  \t")
}

// skipReason is what a skipped test said: its output lines, trimmed, the
// empty ones left out (t.Skip's message, with its file:line); t.SkipNow
// says nothing.
func skipReason(items []string) string {
	var lines []string
	for _, s := range items {
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) == 0 {
		return "no reason given"
	}
	return strings.Join(lines, "\n")
}
