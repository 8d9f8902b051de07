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
	c.hs = &handshakeBound{clock: clock, timeout: timeout}
	return nil
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
