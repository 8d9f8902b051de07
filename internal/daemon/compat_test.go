package daemon

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
)

// TestProtocol1Session: a process that loaded a libibpath of owner
// protocol 1 before ibpathd was upgraded keeps its session: its QP
// report, in protocol 1's strings, is shown as objects (its paths on the
// QP's device, with this node's LID), and its command results decode.
func TestProtocol1Session(t *testing.T) {
	d, c := testDaemon(t, nil)
	nc, br := rawUpgrade(t, d.cfg.Socket)
	h := selfHello(t)
	fmt.Fprintf(nc, `{"type":"hello","hello":{"proto":1,"pid":%d,"incarnation":%d,"comm":"old"}}`+"\n", h.PID, h.Incarnation)
	oc := ownerproto.NewConn(nc, br)
	if m, err := oc.Recv(); err != nil || m.Type != ownerproto.TypeWelcome {
		t.Fatalf("welcome: %+v %v", m, err)
	}
	// exactly what a protocol-1 shim wrote
	fmt.Fprintf(nc, `{"type":"qp","qp":{"device":"mlx5_0","qpn":451,"port":2,"owner_pid":0,"owner_uid":0,"layer":"apm","apm":"armed","primary":"port 2","alternate":"port 2+1","home":"port 1","migrations":1,"backup":"mlx5_1 qpn 0x1c3","failovers":0,"switchbacks":0,"remote":"lid 33 qpn 0x1e2"}}`+"\n")
	ctx := context.Background()
	var q status.QP
	eventually(t, "the protocol-1 QP", func() bool {
		n, _ := c.Status(ctx)
		for _, x := range n.QPs {
			if x.OwnerPID == os.Getpid() {
				q = x
				return true
			}
		}
		return false
	})
	n, _ := c.Status(ctx)
	lid := lidOf(t, n, "mlx5_0", 2)
	if q.Primary.Device != "mlx5_0" || q.Primary.Port != 2 || q.Primary.LID != lid || q.Alternate.PathBits != 1 ||
		q.Alternate.LID != lid+1 || q.Home.Port != 1 || q.Backup != (status.Backup{Device: "mlx5_1", QPN: 0x1c3, Connected: true}) ||
		q.Remote != (status.Remote{LID: 33, QPN: 0x1e2}) {
		t.Fatalf("protocol-1 QP shown as %+v", q)
	}
	if n.Owners[0].Proto != 1 {
		t.Fatalf("owner %+v", n.Owners[0])
	}
	m, err := ownerproto.Decode([]byte(`{"type":"result","id":3,"result":{"ok":true,"before":"armed port 1","after":"migrated port 2"}}`))
	if err != nil || m.Result.Before.APM != "armed" || m.Result.After.Primary.Port != 2 {
		t.Fatalf("protocol-1 result: %+v %v", m.Result, err)
	}
}
