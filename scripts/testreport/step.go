package main

import (
	"fmt"
	"io"
	"strings"
)

// stepInput is what ./test.sh tells of one step it ran (or skipped).
type stepInput struct {
	name    string
	seconds float64
	rc      int
	// log is the command's output (for a go test run, its stderr),
	// shown when the step fails.
	log string
	// goJSON is the `go test -json` stream of a go test run; nil for any
	// other step.
	goJSON io.Reader
	// skip, when set, is why the step did not run at all.
	skip string
}

// makeStep turns a step's outcome into its record and the text to show
// under its line: nothing when it passed; what failed, in full, when it
// failed.
func makeStep(in stepInput) (Step, string, error) {
	s := Step{Name: in.name, Seconds: in.seconds}
	switch {
	case in.skip != "":
		s.Result, s.Skipped = resultSkip, 1
		s.Skips = []Entry{{Reason: in.skip}}
		return s, "", nil
	case in.goJSON == nil:
		if in.rc == 0 {
			s.Result, s.Passed = resultOK, 1
			return s, "", nil
		}
		s.Result, s.Failed = resultFail, 1
		s.Failures = []Entry{{Reason: fmt.Sprintf("exit status %d", in.rc)}}
		return s, in.log, nil
	}
	run, err := parseGoTest(in.goJSON)
	if err != nil {
		return Step{}, "", fmt.Errorf("step %q: %w", in.name, err)
	}
	s.GoTest = true
	s.Passed, s.Failed, s.Skipped = run.Passed, run.Failed, run.Skipped
	s.Skips, s.Failures = run.Skips, run.Failures
	if in.rc != 0 && run.Failed == 0 {
		// go test itself failed (a bad flag, a package that does not
		// exist): its stderr says why
		s.Failed++
		s.Failures = append(s.Failures, Entry{Reason: fmt.Sprintf("go test exited %d with no test or package failed", in.rc)})
	}
	if s.Failed == 0 {
		s.Result = resultOK
		return s, "", nil
	}
	s.Result = resultFail
	return s, run.Output + in.log, nil
}

// nameWidth aligns the step lines' durations.
const nameWidth = 48

// stepLine is the one line a step prints: its result, name and duration,
// and for a go test run its counts; a skipped step says why instead.
func stepLine(s Step) string {
	if s.Result == resultSkip {
		reason := ""
		if len(s.Skips) > 0 {
			reason = s.Skips[0].Reason
		}
		return fmt.Sprintf("%-4s  %s: %s", s.Result, s.Name, reason)
	}
	line := fmt.Sprintf("%-4s  %-*s %7.1fs", s.Result, nameWidth, s.Name, s.Seconds)
	if s.GoTest {
		line += "  " + counts(s.Passed, s.Failed, s.Skipped)
	}
	return line
}

// counts is the closing line's form, used for a step's and for the run's.
func counts(passed, failed, skipped int) string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", passed, failed, skipped)
}

// summary closes the run: every skip with its reason, every failure, then
// the totals over all steps. failed tells whether anything failed.
func summary(steps []Step, module string) (text string, failed bool) {
	var b strings.Builder
	var passed, nfailed, skipped int
	for _, s := range steps {
		passed += s.Passed
		nfailed += s.Failed
		skipped += s.Skipped
	}
	section := func(title string, pick func(Step) []Entry) {
		first := true
		for _, s := range steps {
			for _, e := range pick(s) {
				if first {
					b.WriteString(title + ":\n")
					first = false
				}
				b.WriteString(entryLine(s.Name, e, module))
			}
		}
	}
	section("skipped", func(s Step) []Entry { return s.Skips })
	section("failed", func(s Step) []Entry { return s.Failures })
	b.WriteString(counts(passed, nfailed, skipped) + "\n")
	return b.String(), nfailed > 0
}

// entryLine names a skipped or failed item (package relative to the
// module, test, and the step in brackets) and gives its reason, a reason
// of several lines indented under it.
func entryLine(step string, e Entry, module string) string {
	var name string
	switch {
	case e.Package == "":
		name = step
	case e.Test == "":
		name = fmt.Sprintf("%s [%s]", relPackage(e.Package, module), step)
	default:
		name = fmt.Sprintf("%s %s [%s]", relPackage(e.Package, module), e.Test, step)
	}
	if e.Reason == "" {
		return "  " + name + "\n"
	}
	lines := strings.Split(e.Reason, "\n")
	out := "  " + name + ": " + lines[0] + "\n"
	for _, l := range lines[1:] {
		out += "      " + l + "\n"
	}
	return out
}

// relPackage is an import path relative to the module ("." for its root).
func relPackage(path, module string) string {
	switch {
	case module == "":
		return path
	case path == module:
		return "."
	case strings.HasPrefix(path, module+"/"):
		return strings.TrimPrefix(path, module+"/")
	}
	return path
}
