package crossnic

import (
	"fmt"
	"time"

	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
)

// handshakeBound bounds the wait for the peer's answer to this side's
// fallback notification: BoundHandshake's, or EnableRecovery's Clock and
// HandshakeTimeout (which take its place).
type handshakeBound struct {
	clock   verbs.Clock
	timeout time.Duration
}

// BoundHandshake bounds the wait for the peer's answer to the fallback
// notification this side sends when it sees the fault: once timeout has
// passed on clock since the fault without an answer, Tick surfaces the
// error, as plain verbs would have reported the fault. Without a bound
// (and without recovery, whose HandshakeTimeout bounds it then) a peer
// whose process is alive but never answers leaves the Conn waiting for
// ever. Call it before the fault, and Tick regularly while State says
// SQAwaitAck.
func (c *Conn) BoundHandshake(clock verbs.Clock, timeout time.Duration) error {
	if clock == nil {
		return fmt.Errorf("crossnic: bound the handshake: a clock is required")
	}
	if timeout <= 0 {
		return fmt.Errorf("crossnic: bound the handshake: timeout %v is not positive", timeout)
	}
	if a, _, err := c.bak.QP.Query(verbs.QPAttrTimeout | verbs.QPAttrRetryCnt); err == nil {
		timeout = waitBound(timeout, a)
	}
	c.hs = &handshakeBound{clock: clock, timeout: timeout}
	return nil
}

// waitBound is how long a wait for the answer to a message sent on a QP
// with attributes a lasts: the configured time, and never less than the
// QP itself retransmits an unanswered packet before it reports an error
// (retry_cnt+1 local ACK timeouts, a quarter more for late timers). On a
// fabric whose timeout is 20 (4.3 s per try) a lost packet is sent again
// only after 4.3 s: a shorter wait would surface an error the hardware
// was about to repair.
func waitBound(configured time.Duration, a verbs.QPAttr) time.Duration {
	g := verbs.TimeoutDuration(a.Timeout) * time.Duration(int(a.RetryCnt)+1)
	return max(configured, g+g/4)
}

// tickHandshake surfaces the error when the peer has not answered this
// side's fallback notification in time.
func (c *Conn) tickHandshake(now time.Duration) {
	if c.m.SQ != fsm.SQAwaitAck || c.hs == nil || now-c.faultAt <= c.hs.timeout {
		return
	}
	c.act(c.m.Step(fsm.CNEvent{Kind: fsm.CNBackupFault,
		Reason: fmt.Sprintf("the peer did not answer the fallback notification within %v", c.hs.timeout)}))
}
