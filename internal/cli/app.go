package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/version"
)

// Run runs ibpath with args (args[0] is the program name), printing to
// stdout and stderr, and returns the process exit code (see the Exit
// constants).
func Run(args []string, stdout, stderr io.Writer) int {
	err := NewApp(stdout, stderr).Run(args)
	return report(stderr, err, len(args) > 1 && jsonRequested(args[1:]))
}

// NewApp builds the ibpath application. Its commands print to stdout;
// urfave/cli's own messages go to stderr. The app never calls os.Exit.
func NewApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:  "ibpath",
		Usage: "keep RDMA traffic alive through InfiniBand hardware faults",
		Description: "ibpath inspects and steers ibpathd, the daemon that protects the RC QPs of a node: " +
			"layer 1 arms InfiniBand automatic path migration (APM) on every QP, layer 2 fails a QP over to " +
			"another HCA, layer 3 surfaces the error. Commands other than sim, man and completion talk to ibpathd " +
			"over its UNIX socket: --socket, else $IBPATH_SOCKET, else " + api.DefaultSocket + ". " +
			"Flags go before the arguments of a command. " +
			"Exit codes: 0 ok; 1 other error; 2 usage error; 3 no ibpathd on the socket (not running, " +
			"the path is no socket, or what answers is not ibpathd); 4 permission denied; 5 the action failed on some QPs. " +
			"With --json an error is one JSON object on stderr: {\"error\": {\"code\", \"message\", \"hint\"}}.",
		UsageText:            "ibpath [--socket PATH] [--json] [--timeout DURATION] COMMAND [COMMAND FLAGS] [ARGUMENTS...]",
		Version:              version.Get().String(),
		EnableBashCompletion: true,
		Writer:               stdout,
		ErrWriter:            stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Value: api.DefaultSocket, EnvVars: []string{"IBPATH_SOCKET"},
				Usage: "UNIX socket of ibpathd"},
			jsonFlag(),
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "give up on ibpathd after this long"},
		},
		Commands: []*cli.Command{
			statusCommand(),
			armCommand(),
			migrateCommand(),
			drainCommand(),
			undrainCommand(),
			peersCommand(),
			storeCommand(),
			metricsCommand(),
			manCommand(),
			completionCommand(),
			simCommand(),
		},
		Action:         unknownCommand,
		OnUsageError:   onUsageError,
		ExitErrHandler: func(*cli.Context, error) {}, // Run maps errors to exit codes
	}
	setUsageHandlers(app.Commands)
	return app
}

// setUsageHandlers makes every command report flag errors as usage
// errors, quietly (the hint to --help follows the message).
func setUsageHandlers(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		setUsageHandlers(c.Subcommands)
	}
}

func onUsageError(c *cli.Context, err error, _ bool) error {
	name := cmdPath(c)
	if name == "" {
		return &usageError{err: err}
	}
	return &usageError{err: fmt.Errorf("%s: %w", name, err)}
}

// unknownCommand is the action of a command that only has subcommands
// (and of the app itself): an argument is an unknown subcommand; none at
// all is a missing one.
func unknownCommand(c *cli.Context) error {
	prefix := ""
	if name := cmdPath(c); name != "" {
		prefix = name + ": "
	}
	if c.Args().Present() {
		return usagef("%sunknown command %q", prefix, c.Args().First())
	}
	return usagef("%sno command given", prefix)
}

// jsonFlag is --json, offered by the app and by every command that prints
// something ibpathd said, so that both `ibpath --json status` and
// `ibpath status --json` work.
func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print JSON instead of tables"}
}

// wantJSON: --json was given to the app or to any command on the way.
func wantJSON(c *cli.Context) bool {
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Bool("json") {
			return true
		}
	}
	return false
}

// client returns a client of the ibpathd the global flags name.
func client(c *cli.Context) *api.Client {
	return api.NewClient(c.String("socket"), c.Duration("timeout"))
}

// callErr turns an error of a client call into the error to report.
func callErr(c *cli.Context, err error) error {
	if err == nil {
		return nil
	}
	return clientError(c.String("socket"), err)
}

// positional returns the command's arguments after checking there are
// between min and max of them (max < 0: no limit) and that no flag follows
// them (flags go before the arguments; urfave/cli stops parsing flags at
// the first argument).
func positional(c *cli.Context, min, max int, usage string) ([]string, error) {
	name := cmdPath(c)
	args := c.Args().Slice()
	for _, a := range args {
		if isFlag(a) {
			return nil, usagef("%s: flag %s after the arguments: flags go before them (usage: ibpath %s %s)",
				name, a, name, usage)
		}
	}
	switch {
	case len(args) < min:
		return nil, usagef("%s: missing arguments (usage: ibpath %s %s)", name, name, usage)
	case max >= 0 && len(args) > max:
		return nil, usagef("%s: unexpected argument %q (usage: ibpath %s %s)", name, args[max], name, usage)
	}
	return args, nil
}

// isFlag: a looks like a flag (not "-", "--" or a negative number, which
// the commands reject as arguments of their own).
func isFlag(a string) bool {
	return len(a) > 1 && a[0] == '-' && a != "--" && (a[1] < '0' || a[1] > '9')
}

// cmdPath is the command's name with its parents' ("store qps"), or ""
// for the app itself.
func cmdPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != c.App.Name {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	return strings.Join(names, " ")
}

// isHelpExit: urfave/cli's help reports an unknown help topic as an
// ExitCoder of its own.
func isHelpExit(err error) bool {
	var ec cli.ExitCoder
	return errors.As(err, &ec)
}
