// Command ibpathd is the ibpath daemon, one per node: it discovers HCAs
// and ports (or runs the embedded simulated fabric when the node has
// none), keeps the node's status, relays arm and migrate to the processes
// that own QPs, stores and replicates backup attributes, and serves the
// local API, D-Bus and metrics. See docs/DAEMON.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "ibpathd: %v\n", err)
		os.Exit(1)
	}
}
