package replica

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ibpath/ibpath/store"
)

// TestReplayedMessagesRefused: a push captured on its way to node2 (the
// cluster key authenticates it) and delivered again, to node2 or to
// node3, after its owner's entries were removed, brings nothing back: a
// message is taken only by the member it names, within the replay
// window, once. A message sent too long ago is refused too.
func TestReplayedMessagesRefused(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, dir, 1, "127.0.0.1", nil, nil)
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, nil)
	c := startNode(t, dir, 3, "127.0.0.3", []string{a.r.Addr()}, nil)
	waitMembers(t, a, b, c)
	rec := store.Record{Stamp: store.Stamp{Ref: store.QPRef(qpOn(1, 0)), Owner: owner(1), Version: 1 << 30}, QP: backup(0)}
	push := func(to string, at time.Time) []byte {
		t.Helper()
		raw, err := encode(message{Type: msgPush, From: "node1", To: to, SentAt: at.UnixNano(), Seq: a.r.replay.next(),
			WrittenAt: at.UnixNano(), Records: []store.Record{rec}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	captured := push("node2", time.Now())
	(*delegate)(b.r).NotifyMsg(captured)
	eventually(t, 5*time.Second, "the push taken by node2", func() bool { q, _ := b.st.Entries(); return q == 1 })
	// the owner goes; its removal reaches every node
	if err := a.st.PutQP(owner(1), qpOn(1, 0), backup(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.r.RemoveOwner(owner(1)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the removal on node2 and node3", func() bool {
		q2, _ := b.st.Entries()
		return q2 == 0 && b.st.Tombstones() == 1 && c.st.Tombstones() == 1
	})
	// the captured push again, to node2 and to node3; and one sent long ago
	(*delegate)(b.r).NotifyMsg(captured)
	(*delegate)(c.r).NotifyMsg(captured)
	(*delegate)(c.r).NotifyMsg(push("node3", time.Now().Add(-time.Hour)))
	eventually(t, 5*time.Second, "three messages refused", func() bool {
		return b.r.Stats().MessagesRefused+c.r.Stats().MessagesRefused == 3
	})
	q2, _ := b.st.Entries()
	q3, _ := c.st.Entries()
	if q2 != 0 || q3 != 0 {
		t.Fatalf("a replayed push brought the removed entry back: %d on node2, %d on node3", q2, q3)
	}
}

// TestOtherLabelRefused: a node with the cluster key but another
// memberlist label (another cluster), or none (an older ibpath), cannot
// join.
func TestOtherLabelRefused(t *testing.T) {
	for i, label := range []string{"another-cluster", ""} {
		dir := t.TempDir()
		a := startNode(t, dir, 1, "127.0.0.1", nil, nil)
		other := startNode(t, dir, 2+i, fmt.Sprintf("127.0.0.%d", 2+i), []string{a.r.Addr()}, func(c *Config) {
			c.tune = func(mc *memberlist.Config) { fastTimers(mc); mc.Label = label }
		})
		time.Sleep(500 * time.Millisecond)
		if n := aliveCount(a.r); n != 1 {
			t.Fatalf("label %q: node1 sees %d alive members: %+v", label, n, a.r.Members())
		}
		if aliveCount(other.r) != 1 {
			t.Fatalf("label %q: the node joined: %+v", label, other.r.Members())
		}
		a.stop()
		other.stop()
	}
}
