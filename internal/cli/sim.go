package cli

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/demo"
)

// simCommand plays the demo scenario on the simulated fabric; it needs no
// daemon.
func simCommand() *cli.Command {
	return &cli.Command{
		Name:    "sim",
		Aliases: []string{"demo"},
		Usage: "play a scripted fault scenario (cable pull and plug; every cable of an HCA pulled and plugged, with layer 2 " +
			"switching back; HCA death) on the simulated fabric, with layer 1 (APM) and layer 2 (cross-NIC) at work",
		Flags: []cli.Flag{
			&cli.UintFlag{Name: "seed", Value: 1, Usage: "seed of the simulated fabric"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "also print every fabric trace record"},
			&cli.StringFlag{Name: "link-layer", Value: demo.LinkLayerNames[0],
				Usage: "link layer of the simulated fabric: " + strings.Join(demo.LinkLayerNames, " or ") +
					" (roce: no APM, so layer 1 cannot hide the cable pull; layer 2 still hides the pulled cable of QP B's NIC, switches back, and hides the NIC death)"},
		},
		Action: func(c *cli.Context) error {
			if _, err := positional(c, 0, 0, "[--seed N] [--verbose] [--link-layer ib|roce]"); err != nil {
				return err
			}
			ll, err := demo.ParseLinkLayer(c.String("link-layer"))
			if err != nil {
				return &usageError{err: fmt.Errorf("sim: --link-layer: %w", err)}
			}
			err = demo.Run(c.App.Writer, demo.Options{Seed: uint64(c.Uint("seed")), Verbose: c.Bool("verbose"), LinkLayer: ll})
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			return nil
		},
	}
}
