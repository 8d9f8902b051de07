// Command testreport is ./test.sh's report: it turns each step's outcome
// (a command's exit status and output, or a `go test -json` stream) into
// one line, shows what failed in full, keeps a ledger of the steps, and
// closes the run with every skipped test and its reason, every failure,
// and `N passed, N failed, N skipped`. It also lists the tree's shell and
// Python scripts for the steps that check them.
//
//	testreport step -ledger FILE -name NAME -since T -rc N [-log FILE] [-go-json FILE]
//	testreport step -ledger FILE -name NAME -skip REASON
//	testreport summary -ledger FILE [-module PATH]
//	testreport scripts shell|python [DIR]
//
// step prints the step's line (and, when it failed, the failing tests'
// output as plain `go test` shows it, or the command's output) and
// appends the step to the ledger; -since is when the step started, in
// seconds since the epoch (bash's EPOCHREALTIME). summary prints the
// close and exits 1 when anything failed. Usage and I/O errors exit 2.
//
// The counts are of every test and subtest result in every go test run
// (a test run by two steps counts twice; a parent counts besides its
// subtests), a package that failed with no test failing (a build failure)
// once, and every other step once, in its result's column.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// now is the clock steps are timed by.
var now = time.Now

// errFailed is summary's answer when something failed: exit 1, with
// nothing more to say than the summary said.
var errFailed = errors.New("something failed")

func main() {
	err := run(os.Args[1:], os.Stdout)
	switch {
	case err == nil:
	case errors.Is(err, errFailed):
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
}

const usage = `usage:
  testreport step -ledger FILE -name NAME -since T -rc N [-log FILE] [-go-json FILE]
  testreport step -ledger FILE -name NAME -skip REASON
  testreport summary -ledger FILE [-module PATH]
  testreport scripts shell|python [DIR]`

// run carries out one command line, writing the report to out.
func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	switch args[0] {
	case "step":
		return runStep(args[1:], out)
	case "summary":
		return runSummary(args[1:], out)
	case "scripts":
		return runScripts(args[1:], out)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func runStep(args []string, out io.Writer) error {
	fs := newFlags("step")
	ledger := fs.String("ledger", "", "the ledger file")
	name := fs.String("name", "", "the step's name")
	since := fs.String("since", "", "when the step started (seconds since the epoch)")
	rc := fs.String("rc", "", "the step's exit status")
	logFile := fs.String("log", "", "the step's output (a go test run's stderr)")
	goJSON := fs.String("go-json", "", "the go test -json stream of a go test run")
	skip := fs.String("skip", "", "why the step did not run")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("step: %w\n%s", err, usage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("step: unexpected argument %q\n%s", fs.Arg(0), usage)
	}
	if *ledger == "" || *name == "" {
		return fmt.Errorf("step: -ledger and -name are required\n%s", usage)
	}
	in := stepInput{name: *name, skip: *skip}
	if *skip != "" {
		if *since != "" || *rc != "" || *logFile != "" || *goJSON != "" {
			return fmt.Errorf("step %q: -skip goes alone, without -since, -rc, -log or -go-json", *name)
		}
	} else {
		if *since == "" || *rc == "" {
			return fmt.Errorf("step %q: -since and -rc are required (or -skip)", *name)
		}
		start, err := parseSince(*since)
		if err != nil {
			return fmt.Errorf("step %q: %w", *name, err)
		}
		in.seconds = now().Sub(start).Seconds()
		if in.rc, err = strconv.Atoi(*rc); err != nil {
			return fmt.Errorf("step %q: -rc %q is not an exit status: %w", *name, *rc, err)
		}
		if *logFile != "" {
			b, err := os.ReadFile(*logFile)
			if err != nil {
				return fmt.Errorf("step %q: read its output: %w", *name, err)
			}
			in.log = string(b)
		}
		if *goJSON != "" {
			f, err := os.Open(*goJSON)
			if err != nil {
				return fmt.Errorf("step %q: open its go test -json stream: %w", *name, err)
			}
			defer f.Close()
			in.goJSON = f
		}
	}
	s, detail, err := makeStep(in)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(out, stepLine(s)); err != nil {
		return fmt.Errorf("write step line: %w", err)
	}
	if detail != "" {
		if !strings.HasSuffix(detail, "\n") {
			detail += "\n"
		}
		if _, err := io.WriteString(out, detail); err != nil {
			return fmt.Errorf("write step output: %w", err)
		}
	}
	return appendStep(*ledger, s)
}

// parseSince reads a time in seconds since the epoch with a fraction
// ("1700000000.123456"; bash writes a comma in some locales).
func parseSince(s string) (time.Time, error) {
	f, err := strconv.ParseFloat(strings.Replace(s, ",", ".", 1), 64)
	if err != nil || f <= 0 {
		return time.Time{}, fmt.Errorf("-since %q is not a time in seconds since the epoch", s)
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)), nil
}

func runSummary(args []string, out io.Writer) error {
	fs := newFlags("summary")
	ledger := fs.String("ledger", "", "the ledger file")
	module := fs.String("module", "", "the module path, left out of package names")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("summary: %w\n%s", err, usage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("summary: unexpected argument %q\n%s", fs.Arg(0), usage)
	}
	if *ledger == "" {
		return fmt.Errorf("summary: -ledger is required\n%s", usage)
	}
	steps, err := readLedger(*ledger)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	text, failed := summary(steps, *module)
	if _, err := io.WriteString(out, text); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	if failed {
		return errFailed
	}
	return nil
}

func runScripts(args []string, out io.Writer) error {
	if len(args) < 1 || len(args) > 2 {
		return fmt.Errorf("scripts: want a kind and at most one directory\n%s", usage)
	}
	root := "."
	if len(args) == 2 {
		root = args[1]
	}
	found, err := findScripts(root, args[0])
	if err != nil {
		return fmt.Errorf("scripts: %w", err)
	}
	for _, p := range found {
		if _, err := fmt.Fprintln(out, p); err != nil {
			return fmt.Errorf("write script list: %w", err)
		}
	}
	return nil
}
