package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

// maxQPN: QPNs are 24 bits.
const maxQPN = 1<<24 - 1

func armCommand() *cli.Command {
	return &cli.Command{
		Name:      "arm",
		Usage:     "load and arm the alternate path (APM) of a QP, of every QP of a port, or of every QP",
		ArgsUsage: "DEVICE QPN | --port DEVICE:PORT | --all",
		Description: "arm asks the owner of each QP to load its alternate path and arm it (layer 1). " +
			"QPN is hex (0x1c3) or decimal (451). Exit code 5 when some QPs could not be armed.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "port", Usage: "every QP whose primary path is on this port, as DEVICE:PORT (mlx5_0:1)"},
			&cli.BoolFlag{Name: "all", Usage: "every QP of the node"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			t, err := parseTarget(c, true)
			if err != nil {
				return err
			}
			r, err := client(c).Arm(c.Context, t)
			if err != nil {
				return callErr(c, err)
			}
			return printResult(c, r)
		},
	}
}

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:      "migrate",
		Usage:     "move a QP, or every QP off a port (for maintenance), to its alternate path",
		ArgsUsage: "DEVICE QPN | --port DEVICE:PORT",
		Description: "migrate asks the owner of each QP to migrate it to its armed alternate path (layer 1); with " +
			"--port it moves every QP whose primary path is on that port, so the port can be taken down. " +
			"--dry-run prints what would move and moves nothing. Exit code 5 when some QPs could not be " +
			"(or, on a dry run, would not be) moved.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "port", Usage: "every QP whose primary path is on this port, as DEVICE:PORT (mlx5_0:1)"},
			&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "print what would move; move nothing"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			t, err := parseTarget(c, false)
			if err != nil {
				return err
			}
			r, err := client(c).Migrate(c.Context, t, c.Bool("dry-run"))
			if err != nil {
				return callErr(c, err)
			}
			return printResult(c, r)
		},
	}
}

// parseTarget reads the target of arm or migrate: DEVICE QPN, --port
// DEVICE:PORT or (when allowAll) --all, exactly one of them.
func parseTarget(c *cli.Context, allowAll bool) (api.Target, error) {
	name := cmdPath(c)
	usage := "DEVICE QPN | --port DEVICE:PORT"
	if allowAll {
		usage += " | --all"
	}
	args, err := positional(c, 0, 2, usage)
	if err != nil {
		return api.Target{}, err
	}
	port := c.String("port")
	all := allowAll && c.Bool("all")
	forms := 0
	for _, given := range []bool{len(args) > 0, port != "", all} {
		if given {
			forms++
		}
	}
	switch {
	case forms == 0:
		return api.Target{}, usagef("%s: name a target (usage: ibpath %s %s)", name, name, usage)
	case forms > 1:
		return api.Target{}, usagef("%s: give only one target (usage: ibpath %s %s)", name, name, usage)
	case all:
		return api.Target{All: true}, nil
	case port != "":
		dev, num, err := parsePort(port)
		if err != nil {
			return api.Target{}, usagef("%s: --port: %w", name, err)
		}
		return api.Target{Device: dev, Port: num}, nil
	case len(args) < 2:
		return api.Target{}, usagef("%s: missing QPN after device %q (usage: ibpath %s %s)", name, args[0], name, usage)
	}
	qpn, err := parseQPN(args[1])
	if err != nil {
		return api.Target{}, usagef("%s: %w", name, err)
	}
	return api.Target{Device: args[0], QPN: qpn}, nil
}

// parseQPN reads a QPN in hex (0x1c3) or decimal (451).
func parseQPN(s string) (uint32, error) {
	digits, base := s, 10
	if rest, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		digits, base = rest, 16
	}
	v, err := strconv.ParseUint(digits, base, 32)
	if err != nil || v == 0 || v > maxQPN {
		return 0, fmt.Errorf("bad QPN %q: want 1 to %#x, in hex (0x1c3) or decimal (451)", s, maxQPN)
	}
	return uint32(v), nil
}

// parsePort reads DEVICE:PORT (mlx5_0:1).
func parsePort(s string) (string, uint8, error) {
	dev, p, ok := strings.Cut(s, ":")
	if !ok || dev == "" || p == "" {
		return "", 0, fmt.Errorf("bad port %q: want DEVICE:PORT (mlx5_0:1)", s)
	}
	v, err := strconv.ParseUint(p, 10, 8)
	if err != nil || v == 0 {
		return "", 0, fmt.Errorf("bad port %q: want DEVICE:PORT with PORT from 1 to 255 (mlx5_0:1)", s)
	}
	return dev, uint8(v), nil
}

// printResult prints an action's result, as a table or JSON, and returns
// a partialError when some QPs failed.
func printResult(c *cli.Context, r api.ActionResult) error {
	if r.Results == nil {
		r.Results = []api.QPResult{}
	}
	var err error
	if wantJSON(c) {
		err = printJSON(c.App.Writer, r)
	} else {
		err = renderResult(c.App.Writer, r)
	}
	if err != nil {
		return err
	}
	if f := r.Failed(); f > 0 {
		action := r.Action
		if r.DryRun {
			action += " (dry run)"
		}
		return &partialError{action: action, failed: f, total: len(r.Results)}
	}
	return nil
}

// renderResult prints a header line, then a row per QP.
func renderResult(w io.Writer, r api.ActionResult) error {
	head := fmt.Sprintf("%s %s", r.Action, r.Target)
	if r.DryRun {
		head += " (dry run: nothing moved)"
	}
	ok := len(r.Results) - r.Failed()
	verb := "ok"
	if r.DryRun {
		verb = "would move"
	}
	if len(r.Results) == 0 {
		fmt.Fprintf(w, "%s: no QP matched\n", head)
		return nil
	}
	fmt.Fprintf(w, "%s: %s, %d %s, %d failed\n", head, plural(len(r.Results), "QP", "QPs"), ok, verb, r.Failed())
	t := newTable(w, "DEVICE", "QPN", "OWNER", "OK", "BEFORE -> AFTER", "ERROR")
	for _, q := range r.Results {
		change := q.Before.String()
		if q.After != (status.QPState{}) {
			change += " -> " + q.After.String()
		}
		t.row(q.Device, hex(q.QPN), owner(q.OwnerPID), yesNo(q.OK), change, q.Error)
	}
	return t.flush()
}
