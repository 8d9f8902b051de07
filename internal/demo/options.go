package demo

import (
	"fmt"

	"github.com/ibpath/ibpath/internal/simrun"
	"github.com/ibpath/ibpath/verbs"
)

// Options tune a run.
type Options struct {
	// Seed drives the fabric's random draws and, with Random, the
	// schedule of faults.
	Seed uint64
	// Random plays a schedule of faults drawn from Seed instead of the
	// scripted scenario.
	Random bool
	// Verbose is the level of detail of the timeline: VerboseTimeline,
	// VerboseDecisions or VerboseTrace.
	Verbose int
	// LinkLayer of the fabric: InfiniBand (also LinkLayerUnspecified),
	// or Ethernet (RoCE: no APM, so layer 2 alone).
	LinkLayer verbs.LinkLayer
	// Tamper, when set, edits what each poll of an application returned
	// before the application checks it: it plants a violation (tests).
	Tamper func(q *simrun.QP, wcs []verbs.WC) []verbs.WC
	// OlderIbpathd plays every node's ibpathd as one older than
	// lookup_mrs (simrun.Config.OlderIbpathd): a failover asks for each
	// peer rkey (tests).
	OlderIbpathd bool
}

// Levels of Options.Verbose.
const (
	// VerboseTimeline: the faults, what the applications saw (async
	// events, errors, pauses), what the layers did (armed, migrated,
	// handed over, failed over, switched back), the traffic, the summary
	// and the verdict.
	VerboseTimeline = 0
	// VerboseDecisions adds every status change the runtimes reported
	// and their log lines: the layers' decisions and their reasons.
	VerboseDecisions = 1
	// VerboseTrace adds the fabric's trace: losses, retries, migrations,
	// QP transitions, port changes, async events, faults (not every
	// packet and completion) and the runtimes' debug lines.
	VerboseTrace = 2
)

// LinkLayerNames are the names ParseLinkLayer accepts, default first.
var LinkLayerNames = []string{"ib", "roce"}

// ParseLinkLayer maps a name of LinkLayerNames to a link layer: "ib" is
// InfiniBand, "roce" Ethernet. Any other name is an error that lists the
// allowed ones.
func ParseLinkLayer(name string) (verbs.LinkLayer, error) {
	switch name {
	case "ib":
		return verbs.LinkLayerInfiniBand, nil
	case "roce":
		return verbs.LinkLayerEthernet, nil
	}
	return verbs.LinkLayerUnspecified, fmt.Errorf("unknown link layer %q: want ib or roce", name)
}

// check refuses options it cannot play.
func (o Options) check() error {
	switch o.LinkLayer {
	case verbs.LinkLayerUnspecified, verbs.LinkLayerInfiniBand, verbs.LinkLayerEthernet:
	default:
		return fmt.Errorf("demo: unknown link layer %d (want %v or %v)", o.LinkLayer, verbs.LinkLayerInfiniBand, verbs.LinkLayerEthernet)
	}
	if o.Verbose < VerboseTimeline || o.Verbose > VerboseTrace {
		return fmt.Errorf("demo: verbose level %d: want %d to %d", o.Verbose, VerboseTimeline, VerboseTrace)
	}
	return nil
}

func (o Options) roce() bool { return o.LinkLayer == verbs.LinkLayerEthernet }
