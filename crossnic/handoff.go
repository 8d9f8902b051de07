package crossnic

import "github.com/ibpath/ibpath/fsm"

// Handing a settled Conn's traffic to another data path. Once a failover
// has settled (both queues on the backup, nothing held, nothing owed to
// the application) and no switch back is configured, what the Conn does
// with each WR and completion is fixed: WRs go to the backup QP with
// their keys translated; backup completions reach the application with
// the default QP's numbers, the Conn's own control WRs dropped; an error
// on the backup or the peer's refusal surfaces the error; the default
// QP's flushes stay hidden. A data path that can do that faster (the
// shim's express lane, in C) takes the traffic over from Lane on, and
// the Conn is no longer used for data: only Surface, Close and the key
// lookups below.

// Lane is what a data path needs to carry a settled Conn's traffic.
type Lane struct {
	Backup  Leg
	DefQPN  uint32 // qp_num of every completion the application sees
	PeerQPN uint32 // src_qp of its receive completions
	// LKeys are the local key translations known so far (a copy); others
	// come from BackupKey.
	LKeys map[uint32]uint32
}

// Settled reports whether the Conn's traffic can be handed over: both
// queues in Fallback with every WR on the backup, no switch back
// configured, no completion waiting for the application, no replay held
// (HoldReplay), and nothing of a handshake through the mailbox left on
// the backup: the fillers owed sent and their fence completed (whose
// completion names none of the application's WRs), the peer's fillers
// taken (their receive completions name stale receives, hidden here).
func (c *Conn) Settled() bool {
	return c.m.SQ == fsm.SQFallback && c.m.RQ == fsm.RQFallback && c.rec == nil && c.bakReady && !c.bakDirty &&
		len(c.ready) == 0 && c.bakFrom >= c.sring.tail && !c.replayHeld &&
		c.fillersOwed == 0 && !c.bakFence && c.fillersDue == 0
}

// Lane describes the settled Conn's data path (call Settled first). From
// then on the Conn's rings no longer see the traffic: if its error
// surfaces, it moves its QPs to ERR but completes nothing from its rings.
func (c *Conn) Lane() Lane {
	c.laneOut = true
	lk := make(map[uint32]uint32, len(c.keys.LKeys))
	for k, v := range c.keys.LKeys {
		lk[k] = v
	}
	return Lane{Backup: c.bak, DefQPN: c.defQPN, PeerQPN: c.peerQPN, LKeys: lk}
}

// BackupKey translates one key of the default HCA to the backup's: a
// local lkey, or (remote) the peer's rkey through the key map's lookup.
func (c *Conn) BackupKey(remote bool, key uint32) (uint32, bool) {
	if !remote {
		k, ok := c.keys.LKeys[key]
		return k, ok
	}
	if c.keys.RKey == nil {
		return 0, false
	}
	return c.keys.RKey(key)
}
