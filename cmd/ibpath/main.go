// Command ibpath is the command-line tool of ibpath, which keeps RDMA
// traffic alive through InfiniBand hardware faults: it shows and steers
// ibpathd (status, arm, migrate, peers, store, metrics) and plays a fault
// scenario on the simulated fabric (sim). The app lives in internal/cli;
// see docs/CLI.md.
package main

import (
	"os"

	"github.com/ibpath/ibpath/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args, os.Stdout, os.Stderr))
}
