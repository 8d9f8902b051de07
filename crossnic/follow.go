package crossnic

import (
	"time"

	"github.com/ibpath/ibpath/fsm"
)

// A side whose sends came home while the peer's are still on the backup
// cannot survive a second fault: its backup QP is not purged (the
// peer's sends use it), and a fallback handshake there would consume
// the application's receives (docs/CROSSNIC.md, "Limits"). The two ends
// switch back one after the other to keep that window short: the
// follower, the side whose PSN announced at the last handshake is the
// higher, holds its sends on the backup after its probe is answered
// until the peer's switch-back notification arrives, and switches at
// once then (its last probe answered within two ProbeIntervals: it
// keeps probing while it waits). The leader switches as soon as its
// probe is answered. A follower waits at most followWait (the leader
// may not switch back at all: no recovery there, its path still down):
// then it switches alone.

// followWaitProbes is how many ProbeIntervals a follower waits for the
// peer's sends to come home before it switches alone.
const followWaitProbes = 4

// follower reports whether this side switches back after the peer:
// both announced their PSNs at the last handshake, the peer's is the
// lower. (Equal PSNs make both leaders.)
func (c *Conn) follower() bool {
	return c.peerPSNSet && c.ownPSN > c.peerPSN
}

// holdForPeer is asked when a probe was answered: whether this side
// holds its sends on the backup for the peer's to come home first. It
// notes the answer, for the switch when the peer's notification comes.
func (c *Conn) holdForPeer(now time.Duration) bool {
	if !c.follower() || c.m.RQ == fsm.RQDefault {
		c.following = false
		return false
	}
	if !c.following {
		c.following, c.followFrom = true, now
	}
	if now-c.followFrom >= followWaitProbes*c.rec.ProbeInterval {
		c.following = false
		return false // the peer did not come: switch alone
	}
	c.probeOKAt = now
	c.nextProbe = now + c.rec.ProbeInterval
	c.stats.FollowHolds++
	return true
}

// peerCameHome: the peer's switch-back notification brought its sends
// home. A follower whose path was proven recently switches now.
func (c *Conn) peerCameHome(now time.Duration) {
	if !c.following || c.m.SQ != fsm.SQFallback || c.m.RQ != fsm.RQDefault {
		return
	}
	c.following = false
	if !c.defUsable || c.defErr || c.probesOut > 0 || now-c.probeOKAt > 2*c.rec.ProbeInterval {
		return // the next probe's answer switches it
	}
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNProbeOK}))
	c.switchIfIdle()
}
