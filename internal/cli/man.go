package cli

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// ManSection is the manual section of ibpath(1).
const ManSection = 1

func manCommand() *cli.Command {
	return &cli.Command{
		Name:  "man",
		Usage: "print the manual page (roff), e.g. ibpath man | man -l -",
		Action: func(c *cli.Context) error {
			if _, err := positional(c, 0, 0, ""); err != nil {
				return err
			}
			page, err := ManPage()
			if err != nil {
				return err
			}
			_, err = io.WriteString(c.App.Writer, page)
			return err
		},
	}
}

// ManPage renders the manual page of ibpath from a fresh app, so that
// neither the environment (IBPATH_SOCKET) nor the command line being run
// changes it. docs/man/ibpath.1 is this text.
func ManPage() (string, error) {
	page, err := NewApp(io.Discard, io.Discard).ToManWithSection(ManSection)
	if err != nil {
		return "", fmt.Errorf("man page: %w", err)
	}
	return page, nil
}
