package replica

import (
	"testing"
	"time"

	"github.com/ibpath/ibpath/store"
)

// TestRecordsAdmittedFromTheirNode: a node applies a peer's record only
// when the record's key route is one its owner's node advertises, and a
// push only from that node itself. A node that stored an entry under
// another node's route (a local process posing as a QP of node2), and
// a push carrying records another node wrote, change nothing on node2;
// the refusals are counted. A consistent record still moves.
func TestRecordsAdmittedFromTheirNode(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, dir, 1, "127.0.0.1", nil, nil)
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, nil)
	waitMembers(t, a, b)

	// node1 publishes under node2's route: pushed to node2, refused there
	if err := a.r.PublishQP(owner(1), qpOn(2, 0), backup(0), routeOf(2)); err != nil {
		t.Fatal(err)
	}
	// a push from node1 of a record node2's owner would have written
	forged := store.Record{Stamp: store.Stamp{Ref: store.QPRef(qpOn(2, 1)), Owner: owner(2), Version: 1 << 20}, QP: backup(1)}
	if err := a.r.send(b.name, message{Type: msgPush, Records: []store.Record{forged}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "two records refused on node2", func() bool { return b.r.Stats().RecordsRefused == 2 })
	if q, _ := b.st.Entries(); q != 0 {
		t.Fatalf("node2 applied %d refused records", q)
	}
	// node1's own entry, pushed to node2, is applied there
	if err := a.r.PublishQP(owner(1), qpOn(1, 2), backup(2), routeOf(2)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "node1's own entry on node2", func() bool { q, _ := b.st.Entries(); return q == 1 })
	if _, o, err := b.st.GetQP(qpOn(1, 2)); err != nil || o != owner(1) {
		t.Fatalf("node2 holds %v (owner %v)", err, o)
	}
	if n := b.r.Stats().RecordsRefused; n != 2 {
		t.Fatalf("%d records refused, want 2", n)
	}
}
