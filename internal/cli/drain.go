package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

// drainPoll is how often --wait reads the status.
const drainPoll = 200 * time.Millisecond

func drainCommand() *cli.Command {
	return &cli.Command{
		Name:      "drain",
		Usage:     "take a port out of service for maintenance, and keep every QP's traffic off it until undrain",
		ArgsUsage: "--port DEVICE:PORT [--wait DURATION]",
		Description: "drain tells every process holding QPs (and ibpathd's own simulated workload) to move the " +
			"traffic of their QPs off the port — layer 1 to an alternate path where one exists, layer 2 to the " +
			"backup device otherwise — and to keep it off: no fail-back, no switch back onto it, new QPs leave it. " +
			"Peers are shown the port DOWN. The drain is kept across restarts of ibpathd until 'ibpath undrain'. " +
			"With --wait it blocks until no QP's traffic uses the port, printing what is left; exit code 5 when " +
			"some is still there when the wait ends (or when a process did not answer).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "port", Usage: "the port, as DEVICE:PORT (mlx5_0:1)"},
			&cli.DurationFlag{Name: "wait", Usage: "wait up to this long for every QP to leave the port (0: do not wait)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error { return drainAction(c, true) },
	}
}

func undrainCommand() *cli.Command {
	return &cli.Command{
		Name:      "undrain",
		Usage:     "put a drained port back in service",
		ArgsUsage: "--port DEVICE:PORT",
		Description: "undrain lifts a drain: layer 1 fails QPs back to the port by its failback policy, layer 2 " +
			"switches them back where switch back is on. Undraining a port that is not drained is not an error " +
			"(the output says it changed nothing).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "port", Usage: "the port, as DEVICE:PORT (mlx5_0:1)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error { return drainAction(c, false) },
	}
}

func drainAction(c *cli.Context, on bool) error {
	name := cmdPath(c)
	if _, err := positional(c, 0, 0, "--port DEVICE:PORT"); err != nil {
		return err
	}
	if c.String("port") == "" {
		return usagef("%s: --port DEVICE:PORT is required (mlx5_0:1)", name)
	}
	dev, port, err := parsePort(c.String("port"))
	if err != nil {
		return usagef("%s: --port: %w", name, err)
	}
	wait := time.Duration(0)
	if on {
		if wait = c.Duration("wait"); wait < 0 {
			return usagef("%s: --wait %v: must not be negative", name, wait)
		}
	}
	req := api.PortRequest{Device: dev, Port: port}
	cl := client(c)
	var r api.DrainResult
	if on {
		r, err = cl.Drain(c.Context, req)
	} else {
		r, err = cl.Undrain(c.Context, req)
	}
	if err != nil {
		return callErr(c, err)
	}
	failed := 0
	for _, o := range r.Owners {
		if !o.OK {
			failed++
		}
	}
	if r.Owners == nil {
		r.Owners = []api.OwnerAnswer{}
	}
	var left *status.Drain
	if wait > 0 {
		if left, err = waitDrained(c, cl, req, wait); err != nil {
			return err
		}
	}
	if wantJSON(c) {
		out := struct {
			api.DrainResult
			Left *status.Drain `json:"left,omitempty"`
		}{r, left}
		if err := printJSON(c.App.Writer, out); err != nil {
			return err
		}
	} else if err := renderDrain(c.App.Writer, r, left, wait); err != nil {
		return err
	}
	if failed > 0 {
		return &partialError{action: r.Action, failed: failed, total: len(r.Owners), unit: "processes"}
	}
	if left != nil && left.QPsLeft > 0 {
		return &partialError{msg: fmt.Sprintf("drain: after %v, QPs still carrying traffic on %s: %d (see above)",
			wait, req, left.QPsLeft)}
	}
	return nil
}

// waitDrained reads the status until no QP's traffic uses the port or
// wait passes, and returns the port's drain as last seen.
func waitDrained(c *cli.Context, cl *api.Client, req api.PortRequest, wait time.Duration) (*status.Drain, error) {
	deadline := time.Now().Add(wait)
	for {
		n, err := cl.StatusQPs(c.Context, 0)
		if err != nil {
			return nil, callErr(c, err)
		}
		var d *status.Drain
		for i := range n.Drains {
			if n.Drains[i].Device == req.Device && n.Drains[i].Port == req.Port {
				d = &n.Drains[i]
			}
		}
		if d == nil {
			return nil, fmt.Errorf("drain --wait: %s is not drained any more (undrained meanwhile?)", req)
		}
		if d.QPsLeft == 0 || !time.Now().Before(deadline) {
			return d, nil
		}
		select {
		case <-c.Context.Done():
			return d, nil
		case <-time.After(min(drainPoll, time.Until(deadline))):
		}
	}
}

// renderDrain prints the outcome, the processes' answers and, after a
// wait, the QPs still on the port.
func renderDrain(w io.Writer, r api.DrainResult, left *status.Drain, wait time.Duration) error {
	p := fmt.Sprintf("%s:%d", r.Device, r.Port)
	switch {
	case r.Drained && r.Changed:
		fmt.Fprintf(w, "%s drained\n", p)
	case r.Drained:
		fmt.Fprintf(w, "%s was drained already\n", p)
	case r.Changed:
		fmt.Fprintf(w, "%s undrained\n", p)
	default:
		fmt.Fprintf(w, "%s was not drained: nothing changed\n", p)
	}
	if r.Note != "" {
		fmt.Fprintln(w, r.Note)
	}
	if len(r.Owners) > 0 {
		t := newTable(w, "OWNER", "OK", "ANSWER", "ERROR")
		for _, o := range r.Owners {
			t.row(owner(o.PID), yesNo(o.OK), o.After, o.Error)
		}
		if err := t.flush(); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w, "no process holds QPs on this node")
	}
	if left == nil {
		return nil
	}
	if left.QPsLeft == 0 {
		fmt.Fprintf(w, "no QP's traffic uses %s\n", p)
		return nil
	}
	fmt.Fprintf(w, "after %v, QPs still carrying traffic on %s: %d\n", wait, p, left.QPsLeft)
	return renderDrainQPs(w, left.QPs)
}

// renderDrainQPs is the table of QPs still on a drained port.
func renderDrainQPs(w io.Writer, qs []status.DrainQP) error {
	t := newTable(w, "OWNER", "QPN", "LAYER", "WHY")
	for _, q := range qs {
		t.row(owner(q.OwnerPID), hex(q.QPN), q.Layer, q.Why)
	}
	return t.flush()
}

// renderDrains is the status's section of drained ports (none: no
// section), each with the QPs still on it.
func renderDrains(w io.Writer, ds []status.Drain) error {
	if len(ds) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\ndrained ports:\n")
	for _, d := range ds {
		left := "no QP's traffic uses it"
		if d.QPsLeft > 0 {
			left = fmt.Sprintf("QPs still on it: %d", d.QPsLeft)
		}
		by := fmt.Sprintf("by uid %d", d.ByUID)
		if d.Reason != "" {
			by = "by ibpathd, " + d.Reason
		}
		fmt.Fprintf(w, "  %s:%d since %s %s: %s\n", d.Device, d.Port, when(d.Since), by, left)
		if len(d.QPs) > 0 {
			if err := renderDrainQPs(w, d.QPs); err != nil {
				return err
			}
		}
		if d.QPsLeft > len(d.QPs) {
			fmt.Fprintf(w, "  ... %d of %d listed\n", len(d.QPs), d.QPsLeft)
		}
	}
	return nil
}
