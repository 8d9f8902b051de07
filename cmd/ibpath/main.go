// Command ibpath is the command-line tool of ibpath, which keeps RDMA
// traffic alive through InfiniBand hardware faults. For now it has one
// command, `sim`, which plays a scripted fault scenario on the simulated
// fabric and prints what an application sees through verbs and what
// layer 1 (APM) and layer 2 (cross-NIC failover) of ibpath do about it.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/demo"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "ibpath: %v\n", err)
		os.Exit(1)
	}
}

// newApp builds the CLI. Output goes to app.Writer.
func newApp() *cli.App {
	return &cli.App{
		Name:  "ibpath",
		Usage: "keep RDMA traffic alive through InfiniBand hardware faults",
		Commands: []*cli.Command{{
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
				ll, err := demo.ParseLinkLayer(c.String("link-layer"))
				if err != nil {
					return fmt.Errorf("sim: --link-layer: %w", err)
				}
				err = demo.Run(c.App.Writer, demo.Options{Seed: uint64(c.Uint("seed")), Verbose: c.Bool("verbose"), LinkLayer: ll})
				if err != nil {
					return fmt.Errorf("sim: %w", err)
				}
				return nil
			},
		}},
	}
}
