package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ibpath/ibpath/store"
	"github.com/ibpath/ibpath/verbs"
)

func TestPushReachesThePeer(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, dir, 1, "127.0.0.1", nil, nil)
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, nil)
	c := startNode(t, dir, 3, "127.0.0.3", []string{a.r.Addr()}, nil)
	waitMembers(t, a, b, c)

	if m, ok := a.r.Resolve(Route{LID: 102}); !ok || m.Name != "node2" || m.State != StateAlive || len(m.GIDs) != 1 || m.GIDs[0] != nodeGID(2) {
		t.Fatalf("Resolve(LID 102) = %+v, %v", m, ok)
	}
	if _, ok := a.r.Resolve(Route{GID: nodeGID(9)}); ok {
		t.Fatal("an unknown GID resolved")
	}
	// Anti-entropy is off (1 h): only the push can carry the entry.
	k := qpOn(1, 1)
	if err := a.r.PublishQP(owner(1), k, backup(1), routeOf(2)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the entry on node2", func() bool {
		v, o, err := b.st.GetQP(k)
		return err == nil && v == backup(1) && o == owner(1)
	})
	want, _ := a.st.Record(store.QPRef(k))
	if got, _ := b.st.Record(store.QPRef(k)); got != want {
		t.Fatalf("node2 holds %+v, node1 %+v: the version must travel unchanged", got, want)
	}
	if _, _, err := c.st.GetQP(k); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("node3 was pushed an entry meant for node2: %v", err)
	}
	mk := store.MRKey{GID: nodeGID(1), RKey: 7}
	if err := a.r.PublishMR(owner(1), mk, store.MRBackup{RKey: 8}, []Route{routeOf(2), routeOf(3), {LID: 103}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the MR on node2 and node3", func() bool {
		_, _, e1 := b.st.GetMR(mk)
		_, _, e2 := c.st.GetMR(mk)
		return e1 == nil && e2 == nil
	})
	as, bs := a.r.Stats(), b.r.Stats()
	if as.PushesSent != 3 || bs.PushesReceived != 2 || bs.LagSamples != 2 || bs.LagP99 <= 0 || bs.LagP99 > time.Second {
		t.Fatalf("stats: node1 %+v, node2 %+v", as, bs)
	}
	for _, m := range b.r.Members() {
		if want := map[string]int{"node1": 2}[m.Name]; m.Entries != want {
			t.Fatalf("node2 sees %d entries of %s, want %d", m.Entries, m.Name, want)
		}
	}
	// A route nobody holds: stored locally, ErrNoRoute returned.
	if err := a.r.PublishQP(owner(1), qpOn(1, 2), backup(2), routeOf(9)); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("publish to an unknown route: %v", err)
	}
	if _, _, err := a.st.GetQP(qpOn(1, 2)); err != nil {
		t.Fatalf("the entry was not stored locally: %v", err)
	}
	// Local conflict rules still apply.
	if err := b.r.PublishQP(owner(2), k, backup(9), routeOf(1)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("conflicting publish: %v", err)
	}
}

func TestPullOnMiss(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, dir, 1, "127.0.0.1", nil, nil)
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, nil)
	waitMembers(t, a, b)
	k := qpOn(2, 1)
	if err := b.r.PublishQP(owner(2), k, backup(1), routeOf(9)); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("publish: %v", err)
	}
	mk := store.MRKey{LID: 102, RKey: 5}
	if err := b.st.PutMR(owner(2), mk, store.MRBackup{RKey: 6}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, o, err := a.r.LookupQP(ctx, k)
	if err != nil || v != backup(1) || o != owner(2) {
		t.Fatalf("LookupQP = %+v %v %v", v, o, err)
	}
	if _, _, err := a.st.GetQP(k); err != nil {
		t.Fatalf("the pulled entry was not stored: %v", err)
	}
	if m, _, err := a.r.LookupMR(ctx, mk); err != nil || m.RKey != 6 {
		t.Fatalf("LookupMR by LID = %+v %v", m, err)
	}
	if _, _, err := a.r.LookupQP(ctx, qpOn(2, 99)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pull of a missing key: %v", err)
	}
	if _, _, err := a.r.LookupQP(ctx, qpOn(7, 1)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lookup with no route: %v", err)
	}
	if s := a.r.Stats(); s.Pulls != 3 || s.PullHits != 2 {
		t.Fatalf("stats %+v, want 3 pulls, 2 hits", s)
	}
}

func TestTombstonesReplicate(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, dir, 1, "127.0.0.1", nil, nil)
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, nil)
	waitMembers(t, a, b)
	for i := range 3 {
		if err := a.r.PublishQP(owner(1), qpOn(1, i), backup(i), routeOf(2)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "3 entries on node2", func() bool { q, _ := b.st.Entries(); return q == 3 })
	old, _ := b.st.Record(store.QPRef(qpOn(1, 0)))
	if n, err := a.r.RemoveOwner(owner(1)); err != nil || n != 3 {
		t.Fatalf("RemoveOwner = %d, %v", n, err)
	}
	eventually(t, 5*time.Second, "the removal on node2", func() bool {
		q, _ := b.st.Entries()
		return q == 0 && b.st.Tombstones() == 3
	})
	// An old copy arriving late does not come back.
	if n, err := b.r.apply([]store.Record{old}); err != nil || n != 0 {
		t.Fatalf("old entry re-applied: %d, %v", n, err)
	}
	if !sameState(a.st, b.st) {
		t.Fatalf("digests differ: %+v / %+v", a.st.Digests(), b.st.Digests())
	}
}

func TestPartitionHealsByAntiEntropy(t *testing.T) {
	dir := t.TempDir()
	p := &partition{}
	ae := func(self string) func(*Config) {
		return func(c *Config) { c.AntiEntropyInterval = 100 * time.Millisecond; c.wrap = p.wrap(self) }
	}
	a := startNode(t, dir, 1, "127.0.0.1", nil, ae("127.0.0.1"))
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, ae("127.0.0.2"))
	waitMembers(t, a, b)
	if err := a.r.PublishQP(owner(1), qpOn(1, 0), backup(0), routeOf(2)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the first entry on node2", func() bool { q, _ := b.st.Entries(); return q == 1 })

	p.set("127.0.0.2")
	// Writes on both sides during the partition, and a removal.
	for i := 1; i < 4; i++ {
		if err := a.r.PublishQP(owner(1), qpOn(1, i), backup(i), routeOf(2)); err == nil {
			t.Fatal("a push crossed the partition")
		}
	}
	if err := b.r.PublishMR(owner(2), store.MRKey{GID: nodeGID(2), RKey: 1}, store.MRBackup{RKey: 2}, []Route{routeOf(1)}); err == nil {
		t.Fatal("a push crossed the partition")
	}
	gone := store.Owner{Node: "node1", PID: 1003, Incarnation: 1} // another process of node1
	if err := a.st.PutQP(gone, qpOn(1, 9), backup(30)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.r.RemoveOwner(gone); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // several anti-entropy rounds that cannot cross
	if sameState(a.st, b.st) {
		t.Fatal("converged across a partition")
	}
	p.set()
	eventually(t, 15*time.Second, "convergence after the partition", func() bool { return sameState(a.st, b.st) })
	if q, m := b.st.Entries(); q != 4 || m != 1 || b.st.Tombstones() != 1 {
		t.Fatalf("node2 after healing: %d QPs, %d MRs, %d tombstones", q, m, b.st.Tombstones())
	}
	if a.r.Stats().Repairs+b.r.Stats().Repairs < 3 {
		t.Fatalf("repairs: %+v / %+v", a.r.Stats(), b.r.Stats())
	}
}

func TestRestartFromFileConverges(t *testing.T) {
	dir := t.TempDir()
	fast := func(c *Config) { c.AntiEntropyInterval = 100 * time.Millisecond }
	a := startNode(t, dir, 1, "127.0.0.1", nil, fast)
	b := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, fast)
	waitMembers(t, a, b)
	if err := b.r.PublishQP(owner(2), qpOn(2, 0), backup(0), routeOf(1)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "node2's entry on node1", func() bool { q, _ := a.st.Entries(); return q == 1 })
	port := b.port()
	b.kill()
	// While node2 is down: node1 writes, and removes node2's dead process.
	for i := 1; i < 5; i++ {
		if err := a.st.PutQP(owner(1), qpOn(1, i), backup(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := a.st.RemoveOwner(owner(2)); err != nil || n != 1 {
		t.Fatalf("RemoveOwner = %d, %v", n, err)
	}
	b.cfg.BindPort = port
	b.start()
	if q, _ := b.st.Entries(); q != 1 {
		t.Fatalf("node2 restarted with %d entries, want its 1 from the file", q)
	}
	eventually(t, 15*time.Second, "convergence after restart", func() bool { return sameState(a.st, b.st) })
	if q, _ := b.st.Entries(); q != 4 || b.st.Tombstones() != 1 {
		t.Fatalf("node2 after restart: %d QPs, %d tombstones", q, b.st.Tombstones())
	}
}

func TestUnauthenticatedPeerRefused(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, dir, 1, "127.0.0.1", nil, nil)
	wrong := startNode(t, dir, 2, "127.0.0.2", []string{a.r.Addr()}, func(c *Config) { c.Key = []byte("fedcba9876543210") })
	none := startNode(t, dir, 3, "127.0.0.3", []string{a.r.Addr()}, func(c *Config) { c.Key, c.Insecure = nil, true })
	// both connect from 127.0.0.1: one peer host, two refusals at least
	eventually(t, 5*time.Second, "refusals counted", func() bool { s := a.r.Stats(); return s.PeersRefused >= 1 && s.RefusedTraffic >= 2 })
	time.Sleep(200 * time.Millisecond)
	if n := aliveCount(a.r); n != 1 {
		t.Fatalf("node1 sees %d alive members: %+v", n, a.r.Members())
	}
	if aliveCount(wrong.r) != 1 || aliveCount(none.r) != 1 {
		t.Fatalf("a refused node joined: %+v / %+v", wrong.r.Members(), none.r.Members())
	}
	// A refused node cannot push either.
	if err := wrong.r.PublishQP(owner(2), qpOn(2, 0), backup(0), routeOf(1)); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("push from a refused node: %v", err)
	}
}

func TestStartValidation(t *testing.T) {
	st, err := store.Open(t.TempDir()+"/s.db", store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := Start(st, Config{Name: "x", BindAddr: "127.0.0.1"}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("no key: %v", err)
	}
	if _, err := Start(st, Config{Name: "x", BindAddr: "127.0.0.1", Key: []byte("short")}); err == nil {
		t.Fatal("a 5-byte key was accepted")
	}
	big := Meta{GIDs: make([]verbs.GID, 32)}
	if _, err := Start(st, Config{Name: "x", BindAddr: "127.0.0.1", Key: testKey, Meta: big}); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("32 GIDs: %v", err)
	}
}
