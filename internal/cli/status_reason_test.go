package cli

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/status"
)

// TestQPReasonNamesKeptEvents: the REASON column adds to the status's
// reason until when flap damping holds the QP's failback, and the async
// events the shim kept from the QP's application.
func TestQPReasonNamesKeptEvents(t *testing.T) {
	held := time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		q    status.QP
		want string
	}{
		{status.QP{Reason: "RoCE"}, "RoCE"},
		{status.QP{KeptEvents: "QP_FATAL"}, "events kept from the application: QP_FATAL"},
		{status.QP{Reason: "layer 2: failed over", KeptEvents: "QP_FATAL, DEVICE_FATAL"},
			"layer 2: failed over; events kept from the application: QP_FATAL, DEVICE_FATAL"},
		{status.QP{FailbackHeldUntil: held}, "failback held until 2026-11-30T03:04:05Z (home port or path flapped)"},
		{status.QP{Reason: "layer 2: failed over", SwitchbackHeldUntil: held},
			"layer 2: failed over; switch back held until 2026-11-30T03:04:05Z (home port flapped)"},
		{status.QP{KeptEvents: "QP_FATAL", FailbackHeldUntil: held},
			"failback held until 2026-11-30T03:04:05Z (home port or path flapped); events kept from the application: QP_FATAL"},
	} {
		if got := qpReason(c.q); got != c.want {
			t.Errorf("%+v: %q, want %q", c.q, got, c.want)
		}
	}
}
