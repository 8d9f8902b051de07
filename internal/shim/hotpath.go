package shim

import "github.com/ibpath/ibpath/internal/shim/datapath"

// The contract between the runtime and its data path (the C hot path of
// cmd/libibpath, or a Go stand-in) is package datapath's; these are its
// names in the runtime's API.
type (
	Rings        = datapath.Rings
	AppQP        = datapath.AppQP
	Hotpath      = datapath.Hotpath
	Progresser   = datapath.Progresser
	Nudger       = datapath.Nudger
	Undiverter   = datapath.Undiverter
	Waker        = datapath.Waker
	EventGiver   = datapath.EventGiver
	SRQHotpath   = datapath.SRQHotpath
	ExpressLane  = datapath.ExpressLane
	ExpressStats = datapath.ExpressStats
	Express      = datapath.Express
)

// The runtime's answers that make the data path dispatch a call again.
var (
	ErrExpress = datapath.ErrExpress
	ErrHome    = datapath.ErrHome
)

// The runtime is what the data path calls back.
var _ datapath.Runtime = (*Runtime)(nil)
