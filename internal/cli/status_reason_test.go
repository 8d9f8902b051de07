package cli

import (
	"testing"

	"github.com/ibpath/ibpath/internal/status"
)

// TestQPReasonNamesKeptEvents: the REASON column adds the async events the
// shim kept from the QP's application to the status's reason.
func TestQPReasonNamesKeptEvents(t *testing.T) {
	for _, c := range []struct {
		q    status.QP
		want string
	}{
		{status.QP{Reason: "RoCE"}, "RoCE"},
		{status.QP{KeptEvents: "QP_FATAL"}, "events kept from the application: QP_FATAL"},
		{status.QP{Reason: "layer 2: failed over", KeptEvents: "QP_FATAL, DEVICE_FATAL"},
			"layer 2: failed over; events kept from the application: QP_FATAL, DEVICE_FATAL"},
	} {
		if got := qpReason(c.q); got != c.want {
			t.Errorf("%+v: %q, want %q", c.q, got, c.want)
		}
	}
}
