package crossnic

import (
	"fmt"

	"github.com/ibpath/ibpath/fsm"
)

// Handing a settled Conn's traffic to another data path. Once a failover
// has settled (both queues on the backup, nothing held, nothing owed to
// the application) and no switch back is under way, what the Conn does
// with each WR and completion is fixed: WRs go to the backup QP with
// their keys translated; backup completions reach the application with
// the default QP's numbers, the Conn's own control WRs dropped; an error
// on the backup or the peer's refusal surfaces the error; the default
// QP's flushes stay hidden. A data path that can do that faster (the
// shim's express lane, in C) takes the traffic over from Lane on, and
// the Conn is not used for data meanwhile: only Surface, Close and the
// key lookups below. A Conn with recovery settles while its default
// path is down and nothing of the switch back has begun; the data path
// then records what it posts and retires what completes, as the shim's
// hot path does on the default QP, and hands the Conn its rings back
// (LaneBack) before the switch back begins.

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
// queues in Fallback with every WR on the backup, no switch back under
// way (none configured, or one that waits for its default path: Parked),
// no completion waiting for the application, no replay held
// (HoldReplay), and nothing of a handshake through the mailbox left on
// the backup: the fillers owed sent and their fence completed (whose
// completion names none of the application's WRs), the peer's fillers
// taken (their receive completions name stale receives, hidden here).
func (c *Conn) Settled() bool {
	return c.m.SQ == fsm.SQFallback && c.m.RQ == fsm.RQFallback && c.bakReady && !c.bakDirty &&
		len(c.ready) == 0 && c.bakFrom >= c.sring.tail && !c.replayHeld &&
		c.fillersOwed == 0 && !c.bakFence && c.fillersDue == 0 && (c.rec == nil || c.Parked())
}

// Parked reports whether a Conn with recovery waits for its default path
// with nothing of the switch back begun: its last try to reset the
// default QP found the path down, and Recovery.PathUp still says so; no
// probe or notification on the default QP, no stale receive on the
// backup. Its Tick would do nothing but wait; a data path that records
// (LaneBack) can carry it. (Its share of the CQs' headroom, taken before
// the try, stays held: its switch back comes first when the path
// returns.)
func (c *Conn) Parked() bool {
	return c.rec != nil && c.resetErr == errPathDown && !c.defUsable && !c.defInit && !c.probing && c.probesOut == 0 && !c.resetHeld &&
		!c.collecting && !c.following && !c.annOwed && c.bakStale == 0 && !c.pathUp()
}

// Lane describes the settled Conn's data path (call Settled first). From
// then on the Conn's rings no longer see the traffic (until LaneBack): if
// its error surfaces, it moves its QPs to ERR but completes nothing from
// its rings.
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

// LaneBack takes the Conn's traffic back from the data path that carried
// it since Lane: st is what that data path recorded of the backup QP (the
// WRs it holds that the application has not seen complete, oldest first,
// and the handshake counters). The rings are loaded with it, every WR in
// them counted as posted on the backup, and the Conn carries the traffic
// again: its switch back may begin. An error (the Conn did not hand its
// traffic over, or is not on the backup) changes nothing; one of st
// (ErrResume: it does not fit the rings) leaves the rings empty and the
// traffic still handed over: the caller surfaces the error, which then
// completes nothing from the rings.
func (c *Conn) LaneBack(st Resume) error {
	switch {
	case !c.laneOut:
		return fmt.Errorf("crossnic: lane back QP %#x: its traffic was not handed over", c.defQPN)
	case c.m.SQ != fsm.SQFallback || c.m.RQ != fsm.RQFallback:
		return fmt.Errorf("crossnic: lane back QP %#x: in %v/%v, not on the backup", c.defQPN, c.m.SQ, c.m.RQ)
	}
	c.sring.head, c.sring.atomics, c.sring.foreign = c.sring.tail, 0, 0
	c.rring.head = c.rring.tail
	if err := c.resume(st); err != nil {
		c.sring.truncate(c.sring.head)
		c.rring.tail = c.rring.head
		return fmt.Errorf("crossnic: lane back QP %#x: %w", c.defQPN, err)
	}
	c.bakFrom, c.laneOut = c.sring.tail, false
	return nil
}
