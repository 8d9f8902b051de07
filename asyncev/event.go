package asyncev

import (
	"fmt"

	"github.com/ibpath/ibpath/verbs"
)

// Event is an async event of one device, as a pump delivers it.
type Event struct {
	Device string // device name, e.g. "mlx5_0"
	verbs.AsyncEvent
}

// String renders the event as "mlx5_0 PORT_ERR port 1",
// "mlx5_0 PATH_MIG qp 0x100", "mlx5_0 CQ_ERR cq" or "mlx5_0 DEVICE_FATAL".
func (e Event) String() string {
	switch e.Type.Scope() {
	case verbs.ScopePort:
		return fmt.Sprintf("%s %v port %d", e.Device, e.Type, e.Port)
	case verbs.ScopeQP:
		if e.QP == nil {
			return fmt.Sprintf("%s %v qp ?", e.Device, e.Type)
		}
		return fmt.Sprintf("%s %v qp %#x", e.Device, e.Type, e.QP.QPN())
	case verbs.ScopeCQ:
		return fmt.Sprintf("%s %v cq", e.Device, e.Type)
	default:
		return fmt.Sprintf("%s %v", e.Device, e.Type)
	}
}
