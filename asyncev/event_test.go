package asyncev

import (
	"testing"

	"github.com/ibpath/ibpath/verbs"
)

func TestEventString(t *testing.T) {
	for _, c := range []struct {
		e    Event
		want string
	}{
		{Event{"mlx5_0", verbs.AsyncEvent{Type: verbs.EventPortErr, Port: 1}}, "mlx5_0 PORT_ERR port 1"},
		{Event{"mlx5_1", verbs.AsyncEvent{Type: verbs.EventPortActive, Port: 2}}, "mlx5_1 PORT_ACTIVE port 2"},
		{Event{"mlx5_0", verbs.AsyncEvent{Type: verbs.EventPathMig}}, "mlx5_0 PATH_MIG qp ?"},
		{Event{"mlx5_0", verbs.AsyncEvent{Type: verbs.EventCQErr}}, "mlx5_0 CQ_ERR cq"},
		{Event{"rxe0", verbs.AsyncEvent{Type: verbs.EventDeviceFatal}}, "rxe0 DEVICE_FATAL"},
	} {
		if got := c.e.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}
