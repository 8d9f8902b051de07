// Package demo owns `ibpath sim`: scenarios of faults played on the
// production code of the shim, as internal/simrun runs it (its runtime
// with layers 1 and 2 in a process per host and connection, stepped in
// virtual time over a simulated rail-optimized fabric of 2 hosts x 2
// HCAs, the applications' traffic checked at every completion), the
// timeline of what happened at three levels of detail, the closing
// summary and the verdict: what was checked, and whether it held.
//
// The scripted scenario (the default) pulls a cable under QP A (layer 1
// migrates, then fails back), pulls both cables of QP B's HCA (layer 1
// hands over to layer 2, which fails over and switches back once they
// are plugged) and kills that HCA (QP B stays on its backup). A random
// scenario draws a schedule of faults from the seed (cables pulled or
// flapping, a leaf switch, loss, delay; then, perhaps, an HCA or a whole
// host dying). The same options replay byte for byte.
package demo
