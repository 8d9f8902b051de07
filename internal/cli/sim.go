package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/demo"
)

// simCommand plays a fault scenario on the simulated fabric with the
// shim's runtime in each process, and ends with the verdict; it needs no
// daemon.
func simCommand() *cli.Command {
	return &cli.Command{
		Name:    "sim",
		Aliases: []string{"demo"},
		Usage: "play a fault scenario on the simulated fabric, the shim's runtime (layer 1 APM, layer 2 cross-NIC) in every process, " +
			"every completion checked, and end with the verdict (exit 6 on a violation); scripted by default (cable pull and plug; " +
			"every cable of an HCA pulled and plugged, with layer 2 switching back; HCA death), or drawn from --seed with --random",
		Flags: []cli.Flag{
			&cli.UintFlag{Name: "seed", Value: 1, Usage: "seed of the simulated fabric and, with --random, of the fault schedule"},
			&cli.BoolFlag{Name: "random", Usage: "play a schedule of faults drawn from --seed (cables pulled or flapping, a leaf switch, loss, delay; " +
				"ibpathd away around one of them; then perhaps an HCA or a host dying, a process killed, or a backup failing during the failover) instead of the script"},
			&verboseFlag{&cli.GenericFlag{Name: "verbose", Aliases: []string{"v"}, Value: &verbosity{},
				Usage: "detail of the timeline: -v or --verbose=1 adds the layers' decisions (every status change, the runtimes' log), " +
					"--verbose=2 also the fabric's trace (losses, retries, migrations, events; not every packet)"}},
			&cli.StringFlag{Name: "link-layer", Value: demo.LinkLayerNames[0],
				Usage: "link layer of the simulated fabric: " + strings.Join(demo.LinkLayerNames, " or ") +
					" (roce: no APM, so layer 2 alone hides every fault)"},
		},
		Action: func(c *cli.Context) error {
			if _, err := positional(c, 0, 0, "[--seed N] [--random] [-v | --verbose=0|1|2] [--link-layer ib|roce]"); err != nil {
				return err
			}
			ll, err := demo.ParseLinkLayer(c.String("link-layer"))
			if err != nil {
				return &usageError{err: fmt.Errorf("sim: --link-layer: %w", err)}
			}
			o := demo.Options{Seed: uint64(c.Uint("seed")), Random: c.Bool("random"), LinkLayer: ll,
				Verbose: c.Generic("verbose").(*verbosity).level}
			if simHook != nil {
				simHook(&o)
			}
			rep, err := demo.Run(c.App.Writer, o)
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			if !rep.OK() {
				return &violationError{n: len(rep.Verdict.Violations)}
			}
			return nil
		},
	}
}

// simHook, when set, edits the options of `ibpath sim` before the run
// (tests plant a violation with it).
var simHook func(*demo.Options)

// verbosity is the value of --verbose: a level from 0 to 2; the flag
// without a value (-v, --verbose) is level 1.
type verbosity struct{ level int }

func (v *verbosity) String() string {
	if v == nil {
		return "0"
	}
	return strconv.Itoa(v.level)
}

// Set takes the flag's value: "true" when given without one.
func (v *verbosity) Set(s string) error {
	switch s {
	case "true":
		v.level = demo.VerboseDecisions
		return nil
	case "false":
		v.level = demo.VerboseTimeline
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < demo.VerboseTimeline || n > demo.VerboseTrace {
		return fmt.Errorf("verbose level %q: want %d, %d or %d", s, demo.VerboseTimeline, demo.VerboseDecisions, demo.VerboseTrace)
	}
	v.level = n
	return nil
}

// IsBoolFlag lets the flag stand without a value (-v).
func (v *verbosity) IsBoolFlag() bool { return true }

// verboseFlag is --verbose as help, the man page and completions show
// it: a flag that may stand alone (-v) or take a level (--verbose=2).
type verboseFlag struct{ *cli.GenericFlag }

// TakesValue: -v stands alone; a level is given as --verbose=N.
func (f *verboseFlag) TakesValue() bool { return false }

func (f *verboseFlag) String() string { return cli.FlagStringer(f) }

// violationError: `ibpath sim` ran and its verdict is FAIL; the
// violations were printed.
type violationError struct{ n int }

func (e *violationError) Error() string {
	return fmt.Sprintf("sim: verdict FAIL: %d violations of what ibpath guarantees (listed above the verdict)", e.n)
}

// isViolation reports whether err is a FAIL verdict of `ibpath sim`.
func isViolation(err error) bool { return errors.As(err, new(*violationError)) }
