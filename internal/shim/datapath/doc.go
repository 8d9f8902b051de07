// Package datapath owns the contract between the shim's runtime
// (internal/shim: layer 2's failover, switch back and express lane, and
// layer 1's nudge and follow) and the data path it drives, the C hot path
// of cmd/libibpath (hotpath.c, divert.c, express.c, nudge.c, channel.c):
// what one hands the other (AppQP, Rings, ExpressLane, ExpressStats), what
// the runtime asks of the data path (Hotpath and the optional Progresser,
// Nudger, Undiverter, Waker, SRQHotpath and Express), what the data path
// calls in the runtime (Runtime), and the runtime's answers that make the
// data path dispatch a call again (ErrExpress, ErrHome).
//
// It imports only verbs, so that a data path written in Go (the stand-in
// of internal/shim/shimtest, which runs the runtime without C) implements
// it without importing the runtime.
package datapath
