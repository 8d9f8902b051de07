package simrun

import (
	"fmt"

	"github.com/ibpath/ibpath/internal/status"
)

// Verdict is what a run checked and what held.
type Verdict struct {
	// QPs are the QPs' outcomes, in the world's order.
	QPs []Outcome
	// WRs counts the signaled WRs that completed (each checked once, in
	// order), Messages the messages delivered (each checked once, in
	// order, with its data).
	WRs, Messages int
	// Violations are what must not be, in order: what the applications
	// saw (as it happened) and what they never got (at the end).
	Violations []string
}

// OK reports whether nothing was violated.
func (v Verdict) OK() bool { return len(v.Violations) == 0 }

// Outcome is one QP's end.
type Outcome struct {
	QP       *QP
	Status   status.QP // the runtime's last view of it
	Surfaced string    // the first error its application saw ("" none)
}

// Verdict checks the run, best after Quiesce: the violations the
// applications saw as they polled, then what must hold at the end. An
// error may reach an application only where AllowSurface said so (layer
// 3: nothing healthy was left). A QP whose application saw no error must
// have every SEND it posted completed, and every message its peer posted
// delivered, unless the peer's application saw an error; one that saw an
// error must still have had every message whose SEND completed at the
// peer delivered, unless an error may reach either application.
func (w *World) Verdict() Verdict {
	var v Verdict
	for _, q := range w.QPs {
		v.QPs = append(v.QPs, Outcome{QP: q, Status: q.Status(), Surfaced: q.surfaced})
		v.WRs += q.sigDone
		v.Messages += q.Recvd
		for _, t := range q.violations {
			v.Violations = append(v.Violations, fmt.Sprintf("%s QP %#x: %s", q.Name(), q.QPN(), t))
		}
	}
	for _, q := range w.QPs {
		if q.Proc.killed {
			continue // its application is gone: nothing of it is owed
		}
		bad := func(format string, args ...any) {
			v.Violations = append(v.Violations, fmt.Sprintf("%s QP %#x: ", q.Name(), q.QPN())+fmt.Sprintf(format, args...))
		}
		switch {
		case q.surfaced != "" && q.maySurface == "":
			bad("an error reached the application (%s) although a healthy path was left", q.surfaced)
		case q.surfaced == "" && q.sigDone != q.Sent:
			bad("%d of its %d SENDs never completed", q.Sent-q.sigDone, q.Sent)
		}
		switch {
		case q.surfaced == "" && q.Peer.surfaced == "" && q.Recvd != q.Peer.Sent:
			bad("%d of the %d messages its peer sent never arrived", q.Peer.Sent-q.Recvd, q.Peer.Sent)
		case q.maySurface == "" && q.Peer.maySurface == "" && q.Recvd < q.Peer.SendDone:
			bad("%d messages its peer's SENDs completed for never arrived", q.Peer.SendDone-q.Recvd)
		}
	}
	return v
}
