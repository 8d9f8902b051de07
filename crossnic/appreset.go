package crossnic

import (
	"errors"

	"github.com/ibpath/ibpath/verbs"
)

// AppReset: the application moved the default QP to RESET (a teardown,
// or a reset before it connects the QP again, to the same peer or
// another) while the Conn carried its traffic. A QP in RESET holds no
// WR and no receive, and plain verbs report none of them (mlx5 even
// cleans their completions from the CQ). So what the Conn holds for the
// application vanishes the same way: the backup QP goes to RESET, the
// rings forget every outstanding WR and receive, and nothing the backup
// reports later reaches the application. The Conn then surfaces
// (reason) if it had not: with the queues emptied and held by the
// default QP, the surfacing moves neither QP (the default QP is the
// application's alone from now on, and a surfaced Conn never modifies
// it). Its posts and polls pass through to it, the new connection's
// traffic with them.
func (c *Conn) AppReset(reason string) {
	if c.bakReady && !c.bakGone {
		if err := c.bak.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState); errors.Is(err, verbs.EIO) {
			c.bakDead = true
		}
	}
	c.bakGone = true // what it reports later is of the reset incarnation: hidden
	c.sring.truncate(c.sring.head)
	for c.rring.Len() > 0 {
		_ = c.rring.Complete(false)
	}
	c.defHolds, c.recvsOnBak, c.recvsOffEnd = true, false, 0
	c.unpostedDue, c.faultWCSet = false, false
	c.bakFrom = c.sring.tail
	c.Surface(reason)
}
