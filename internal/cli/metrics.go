package cli

import (
	"io"

	"github.com/urfave/cli/v2"
)

func metricsCommand() *cli.Command {
	return &cli.Command{
		Name:  "metrics",
		Usage: "print ibpathd's metrics in the Prometheus text exposition format, as served",
		Description: "metrics prints the text ibpathd serves at /v1/metrics unchanged; with --json, that text as " +
			"one JSON string.",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if _, err := positional(c, 0, 0, "[--json]"); err != nil {
				return err
			}
			text, err := client(c).Metrics(c.Context)
			if err != nil {
				return callErr(c, err)
			}
			if wantJSON(c) {
				return printJSON(c.App.Writer, text)
			}
			_, err = io.WriteString(c.App.Writer, text)
			return err
		},
	}
}
