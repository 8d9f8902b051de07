package fsm

import "fmt"

// SQState is the cross-NIC state of a QP's send queue (SHIFT's four states,
// with the handshake and switch-back waits made explicit).
type SQState uint8

// Send-queue states.
const (
	SQDefault      SQState = iota // traffic on the default QP
	SQAwaitAck                    // fault seen here; handshake sent, waiting for the peer's ack
	SQFallback                    // traffic on the backup QP; the default is probed
	SQWaitSignaled                // the default answered the probe; the next signaled WR is the fence
	SQWaitDrained                 // fence posted on the backup; later WRs held on the default
	SQWaitNotify                  // fence completed; only the switch-back notification is released
	SQSurfaced                    // no replay possible: the error reached the application. Final
)

var sqNames = [...]string{"default", "await-ack", "fallback", "wait-signaled", "wait-drained", "wait-notify", "surfaced"}

func (s SQState) String() string {
	if int(s) < len(sqNames) {
		return sqNames[s]
	}
	return fmt.Sprintf("SQState(%d)", uint8(s))
}

// RQState is the cross-NIC state of a QP's receive queue.
type RQState uint8

// Receive-queue states.
const (
	RQDefault  RQState = iota // receives posted on the default QP
	RQFallback                // receives reposted on the backup QP
)

func (s RQState) String() string {
	if s == RQFallback {
		return "fallback"
	}
	return "default"
}

// CNEventKind says what happened to a protected QP.
type CNEventKind uint8

// Events of the cross-NIC machine.
const (
	// CNFault: the default path failed (an error completion, a failed
	// post, PORT_ERR or DEVICE_FATAL with no APM alternative, a hand-over
	// from layer 1). ReplaySafe is false when an atomic is outstanding;
	// BackupReady is false when no backup QP is connected.
	CNFault CNEventKind = iota
	// CNPeerNotify: the peer's fallback notification arrived on the backup
	// QP, carrying its receive counter (PeerRecv).
	CNPeerNotify
	// CNPeerAck: the peer acknowledged our notification with its counter.
	CNPeerAck
	// CNProbeOK and CNProbeFailed: the zero-length WRITE probe on the
	// default QP completed, or failed.
	CNProbeOK
	CNProbeFailed
	// CNFencePosted: the application's next signaled WR went to the
	// backup QP as the fence.
	CNFencePosted
	// CNFenceCompleted: the fence's completion arrived: everything posted
	// on the backup has executed.
	CNFenceCompleted
	// CNNotifyCompleted: the switch-back notification on the default QP
	// completed: the peer reposts its receives on the default.
	CNNotifyCompleted
	// CNPeerSwitchBack: the peer's switch-back notification arrived on
	// our default QP.
	CNPeerSwitchBack
	// CNBackupFault: the backup path failed too.
	CNBackupFault
)

var cnNames = [...]string{"fault", "peer-notify", "peer-ack", "probe-ok", "probe-failed", "fence-posted",
	"fence-completed", "notify-completed", "peer-switch-back", "backup-fault"}

func (k CNEventKind) String() string {
	if int(k) < len(cnNames) {
		return cnNames[k]
	}
	return fmt.Sprintf("CNEventKind(%d)", uint8(k))
}

// CNEvent is one input of the cross-NIC machine.
type CNEvent struct {
	Kind        CNEventKind
	ReplaySafe  bool   // CNFault
	Unsafe      string // CNFault, when !ReplaySafe: why ("" : an atomic is outstanding)
	BackupReady bool   // CNFault
	// Mailbox (CNFault in wait-notify): the switch-back notification
	// failed, and the driver asks the peer what became of it through a
	// channel that consumes no receive (crossnic's mailbox) instead of
	// sending the held WRs to the backup
	Mailbox  bool
	PeerRecv uint64 // CNPeerNotify, CNPeerAck: the peer's completed-receive counter
	Reason   string
}

// CNActionKind is work the driver must do.
type CNActionKind uint8

// Actions of the cross-NIC machine.
const (
	// ActFlushDefault: move the default QP to ERR so it flushes at once
	// (after a local link-down, in-flight WRs may never complete) and
	// collect what it held.
	ActFlushDefault CNActionKind = iota
	// ActRepostRecvsBackup: repost the outstanding receive WRs on the backup.
	ActRepostRecvsBackup
	// ActSendNotify: send the fallback notification (WRITE_WITH_IMM with
	// our receive counter) to the peer's backup QP.
	ActSendNotify
	// ActSendAck: answer the peer's notification with our receive counter.
	ActSendAck
	// ActRewindSends: replay on the backup QP, keys translated, the
	// outstanding send WRs the peer did not consume (PeerRecv).
	ActRewindSends
	// ActResetDefault: take the default QP through RESET back to RTS and
	// schedule a probe.
	ActResetDefault
	// ActPostSwitchNotify: post the switch-back notification on the default
	// QP with its doorbell withheld, and hold every later WR behind it.
	ActPostSwitchNotify
	// ActReleaseNotify: ring the default QP's doorbell for the notification only.
	ActReleaseNotify
	// ActReleaseHeld: ring the doorbell for every held WR, in posting order.
	ActReleaseHeld
	// ActRepostRecvsDefault: repost the outstanding receive WRs on the default.
	ActRepostRecvsDefault
	// ActRedirectHeld: the default failed again during switch-back: move the
	// held WRs to the backup QP instead, in order.
	ActRedirectHeld
	// ActSurface: let the error reach the application as plain verbs
	// reported it (no replay).
	ActSurface
)

var cnActNames = [...]string{"flush-default", "repost-recvs-backup", "send-notify", "send-ack", "rewind-sends",
	"reset-default", "post-switch-notify", "release-notify", "release-held", "repost-recvs-default",
	"redirect-held", "surface"}

func (k CNActionKind) String() string {
	if int(k) < len(cnActNames) {
		return cnActNames[k]
	}
	return fmt.Sprintf("CNActionKind(%d)", uint8(k))
}

// CNAction is one output of the cross-NIC machine.
type CNAction struct {
	Kind     CNActionKind
	PeerRecv uint64 // ActRewindSends
	Reason   string // ActSurface
}

// CrossNIC is the cross-NIC machine of one QP: its send and receive
// queues' states. It is pure: Step returns the actions; the driver does
// them and feeds the outcomes back.
type CrossNIC struct {
	SQ     SQState
	RQ     RQState
	Reason string // why the QP surfaced
}

// Step applies one event.
func (m *CrossNIC) Step(ev CNEvent) []CNAction {
	if m.SQ == SQSurfaced {
		return nil
	}
	switch ev.Kind {
	case CNFault:
		return m.fault(ev)
	case CNPeerNotify:
		return m.peerNotify(ev)
	case CNPeerAck:
		if m.SQ != SQAwaitAck {
			return nil
		}
		m.SQ = SQFallback
		return []CNAction{{Kind: ActRewindSends, PeerRecv: ev.PeerRecv}, {Kind: ActResetDefault}}
	case CNProbeOK:
		if m.SQ != SQFallback {
			return nil
		}
		m.SQ = SQWaitSignaled
		return nil
	case CNProbeFailed:
		if m.SQ != SQFallback {
			return nil
		}
		return []CNAction{{Kind: ActResetDefault}}
	case CNFencePosted:
		if m.SQ != SQWaitSignaled {
			return nil
		}
		m.SQ = SQWaitDrained
		return []CNAction{{Kind: ActPostSwitchNotify}}
	case CNFenceCompleted:
		if m.SQ != SQWaitDrained {
			return nil
		}
		m.SQ = SQWaitNotify
		return []CNAction{{Kind: ActReleaseNotify}}
	case CNNotifyCompleted:
		if m.SQ != SQWaitNotify {
			return nil
		}
		m.SQ = SQDefault
		return []CNAction{{Kind: ActReleaseHeld}}
	case CNPeerSwitchBack:
		if m.RQ != RQFallback {
			return nil
		}
		m.RQ = RQDefault
		return []CNAction{{Kind: ActRepostRecvsDefault}}
	case CNBackupFault:
		return m.surface("the backup path failed too: " + ev.Reason)
	}
	return nil
}

func (m *CrossNIC) fault(ev CNEvent) []CNAction {
	switch m.SQ {
	case SQDefault:
		switch {
		case !ev.BackupReady:
			return m.surface("no backup QP: " + ev.Reason)
		case !ev.ReplaySafe:
			why := ev.Unsafe
			if why == "" {
				why = "an atomic is outstanding"
			}
			return m.surface(why + ": replay is unsafe: " + ev.Reason)
		}
		acts := []CNAction{{Kind: ActFlushDefault}, {Kind: ActRepostRecvsBackup}, {Kind: ActSendNotify}}
		if m.RQ == RQFallback {
			// Our sends came home, the peer's not yet: the receives are
			// on the backup already, and posting them again there would
			// leave each one twice.
			acts = []CNAction{{Kind: ActFlushDefault}, {Kind: ActSendNotify}}
		}
		m.SQ, m.RQ = SQAwaitAck, RQFallback
		return acts
	case SQWaitSignaled:
		// The default failed again before the switch: stay on the backup.
		m.SQ = SQFallback
		return []CNAction{{Kind: ActResetDefault}}
	case SQWaitNotify:
		if ev.Mailbox {
			// The notification failed, and the peer may have taken it
			// (its receives home then, behind stale copies on its
			// backup): a handshake as from Default, whose answer says
			// where the held WRs may go. The receives go to the backup.
			acts := []CNAction{{Kind: ActFlushDefault}, {Kind: ActRepostRecvsBackup}, {Kind: ActSendNotify}}
			if m.RQ == RQFallback {
				acts = []CNAction{{Kind: ActFlushDefault}, {Kind: ActSendNotify}}
			}
			m.SQ, m.RQ = SQAwaitAck, RQFallback
			return acts
		}
		// The default failed during the switch: the held WRs (and the
		// notification) never executed; they go to the backup, in order.
		m.SQ = SQFallback
		return []CNAction{{Kind: ActRedirectHeld}, {Kind: ActResetDefault}}
	case SQWaitDrained:
		m.SQ = SQFallback
		return []CNAction{{Kind: ActRedirectHeld}, {Kind: ActResetDefault}}
	}
	return nil // AwaitAck, Fallback: the default is already out of use
}

func (m *CrossNIC) peerNotify(ev CNEvent) []CNAction {
	switch m.SQ {
	case SQAwaitAck:
		// Both sides saw the fault: the peer's notification is its ack.
		m.SQ = SQFallback
		return []CNAction{{Kind: ActRewindSends, PeerRecv: ev.PeerRecv}, {Kind: ActResetDefault}}
	case SQDefault:
		acts := []CNAction{{Kind: ActFlushDefault}, {Kind: ActRepostRecvsBackup}, {Kind: ActSendAck},
			{Kind: ActRewindSends, PeerRecv: ev.PeerRecv}, {Kind: ActResetDefault}}
		if m.RQ == RQFallback {
			// Our sends came home, the peer's not yet (its notification
			// comes through a channel that consumes no receive): the
			// receives are on the backup already.
			acts = append(acts[:1], acts[2:]...)
		}
		m.SQ, m.RQ = SQFallback, RQFallback
		return acts
	}
	// Already on the backup: the peer fell back again after a switch-back
	// of its own direction; move receives over if they were back home.
	if m.RQ == RQDefault {
		m.RQ = RQFallback
		return []CNAction{{Kind: ActRepostRecvsBackup}, {Kind: ActSendAck}}
	}
	return []CNAction{{Kind: ActSendAck}}
}

func (m *CrossNIC) surface(reason string) []CNAction {
	m.SQ, m.Reason = SQSurfaced, reason
	return []CNAction{{Kind: ActSurface, Reason: reason}}
}
