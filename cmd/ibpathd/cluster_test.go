package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/internal/ownerproto"
	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/store"
)

const (
	testKey  = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	wrongKey = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
)

// clusterNode starts node i of a simulated cluster of 3 hosts on
// 127.0.0.(i+1), joining join when not empty.
func clusterNode(t *testing.T, i int, dir, key, join string) *daemonProc {
	t.Helper()
	args := []string{"--fabric", "sim", "--sim-hosts", "3", "--sim-index", string(rune('0' + i)), "--sim-qps", "1",
		"--gossip-bind", "127.0.0." + string(rune('1'+i)) + ":0", "--cluster-key-file", key, "--anti-entropy", "300ms"}
	if join != "" {
		args = append(args, "--join", join)
	}
	return startDaemon(t, "node"+string(rune('0'+i)), dir, args...)
}

// pinGossip makes a restart bind the gossip address the node has now.
func (p *daemonProc) pinGossip() {
	addr := p.status().Repl.Addr
	for i, a := range p.args {
		if a == "--gossip-bind" {
			p.args[i+1] = addr
		}
	}
}

func hasQP(t *testing.T, p *daemonProc, qpn uint32) bool {
	qps, err := p.client.StoreQPs(context.Background(), "")
	if err != nil {
		return false
	}
	for _, q := range qps {
		if q.QPN == qpn {
			return true
		}
	}
	return false
}

func alivePeers(n status.Node) int {
	k := 0
	for _, p := range n.Peers {
		if p.State == status.PeerAlive {
			k++
		}
	}
	return k
}

// attach opens an owner session from this test process, standing in for
// the shim of an application on that node.
func attach(t *testing.T, p *daemonProc) *ownerproto.Session {
	t.Helper()
	inc, err := ownerproto.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ownerproto.Dial(context.Background(), p.socket, ownerproto.Hello{PID: os.Getpid(), Incarnation: inc, Comm: "cluster.test"}, nil)
	if err != nil {
		t.Fatalf("attach to %s: %v", p.name, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestClusterConvergesSurvivesKillAndRefusesStrangers runs three ibpathd
// processes on 127.0.0.1-3 over the simulated fabric:
//   - an entry published on node0 for a QP whose other end is on node1 is
//     pushed to node1, and reaches node2 by anti-entropy;
//   - node1 killed with SIGKILL and restarted keeps every committed entry
//     and gets, by anti-entropy, the one published while it was dead;
//   - a node with another cluster key is refused, counted and logged.
func TestClusterConvergesSurvivesKillAndRefusesStrangers(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	key := keyFile(t, dirs[0], testKey)
	n0 := clusterNode(t, 0, dirs[0], key, "")
	seed := n0.status().Repl.Addr
	if n0.status().Repl.Mode != status.ReplKeyed || seed == "" {
		t.Fatalf("node0 replication %+v", n0.status().Repl)
	}
	n1 := clusterNode(t, 1, dirs[1], key, seed)
	n2 := clusterNode(t, 2, dirs[2], key, seed)
	for _, p := range []*daemonProc{n0, n1, n2} {
		eventually(t, 15*time.Second, p.name+" sees two live peers", func() bool { return alivePeers(p.status()) == 2 })
	}
	// node1's LID, as node0's QP would have it in its address vector.
	lid1 := n1.status().HCAs[0].Ports[0].LID
	lid0 := n0.status().HCAs[0].Ports[0].LID
	s := attach(t, n0)
	ctx := context.Background()
	publish := func(qpn uint32) {
		t.Helper()
		// the QP first: ibpathd takes entries only of a process's own QPs
		if err := s.ReportQP(status.QP{Device: n0.status().HCAs[0].Name, QPN: qpn, Port: 1}); err != nil {
			t.Fatalf("report QP %#x: %v", qpn, err)
		}
		err := s.PublishQP(ctx, ownerproto.PublishQP{Key: store.QPKey{LID: lid0, QPN: qpn},
			Backup: store.QPBackup{Device: "mlx5_1", Port: 1, LID: lid0 + 4, QPN: qpn + 1}, Remote: ownerproto.Route{LID: lid1}})
		if err != nil {
			t.Fatalf("publish QP %#x: %v", qpn, err)
		}
	}
	start := time.Now()
	publish(0x1100)
	eventually(t, 5*time.Second, "the entry pushed to node1", func() bool { return hasQP(t, n1, 0x1100) })
	t.Logf("node1 had the entry %v after the publish", time.Since(start))
	eventually(t, 15*time.Second, "the entry on node2 by anti-entropy", func() bool { return hasQP(t, n2, 0x1100) })
	// A shim on node2 finds it.
	s2 := attach(t, n2)
	if v, err := s2.LookupQP(ctx, store.QPKey{LID: lid0, QPN: 0x1100}); err != nil || v.QPN != 0x1101 {
		t.Fatalf("lookup on node2: %+v %v", v, err)
	}

	// SIGKILL node1, publish while it is dead, restart it on its file.
	// It comes back on the same gossip address, as with a configured port.
	n1.pinGossip()
	n1.kill9()
	publish(0x1200) // the push to node1 fails; the entry is durable on node0
	n1.run()
	if !hasQP(t, n1, 0x1100) {
		t.Fatalf("node1 lost a committed entry across kill -9:\n%s", n1.out)
	}
	eventually(t, 20*time.Second, "the entry published while node1 was dead reaches it", func() bool { return hasQP(t, n1, 0x1200) })

	// node0 itself crashes and restarts: its own owner's entries stay.
	n0.pinGossip()
	n0.kill9()
	n0.run()
	if !hasQP(t, n0, 0x1100) || !hasQP(t, n0, 0x1200) {
		t.Fatalf("node0 lost committed entries across kill -9:\n%s", n0.out)
	}
	// It joined no one at its first start; now it rejoins the peers its
	// state dir remembers (peers), not waiting for theirs to find it.
	mustContain(t, "restarted node0's log", n0.out.String(), "joining the peers alive before the restart too")

	// A stranger with another key is refused: it never becomes a peer,
	// node0 counts and logs the refusal.
	bad := keyFile(t, dirs[3], wrongKey)
	n3 := startDaemon(t, "node3", dirs[3], "--fabric", "sim", "--sim-hosts", "4", "--sim-index", "3",
		"--gossip-bind", "127.0.0.4:0", "--cluster-key-file", bad, "--join", n0.status().Repl.Addr)
	eventually(t, 15*time.Second, "node0 counts the refused peer", func() bool { return n0.status().Totals.PeersRefused > 0 })
	for _, p := range n0.status().Peers {
		if p.Name == "node3" {
			t.Fatalf("a peer with the wrong key joined: %+v", p)
		}
	}
	if len(n3.status().Peers) != 0 {
		t.Fatalf("the stranger sees peers: %+v", n3.status().Peers)
	}
	mustContain(t, "node0's log", n0.out.String(), "refused")
	if hasQP(t, n3, 0x1100) {
		t.Fatal("the stranger got an entry")
	}
	// The restarted node0 is back with its old peers.
	eventually(t, 20*time.Second, "node0 back with two live peers", func() bool { return alivePeers(n0.status()) == 2 })
	m, err := n0.client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "node0's metrics", m, `ibpath_peers{state="alive"} 2`, "ibpath_peers_refused_total ")
}

// TestDamagedStoreRelearnedFromPeers: node1's store file is damaged
// while it is down (a page of garbage where its entries were). It starts
// anyway, with the file moved aside and an empty store, and anti-entropy
// brings back the entry node0 had published for node1.
func TestDamagedStoreRelearnedFromPeers(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	key := keyFile(t, dirs[0], testKey)
	n0 := clusterNode(t, 0, dirs[0], key, "")
	n1 := clusterNode(t, 1, dirs[1], key, n0.status().Repl.Addr)
	for _, p := range []*daemonProc{n0, n1} {
		eventually(t, 15*time.Second, p.name+" sees its peer", func() bool { return alivePeers(p.status()) == 1 })
	}
	lid0, lid1 := n0.status().HCAs[0].Ports[0].LID, n1.status().HCAs[0].Ports[0].LID
	s := attach(t, n0)
	if err := s.ReportQP(status.QP{Device: n0.status().HCAs[0].Name, QPN: 0x1300, Port: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishQP(context.Background(), ownerproto.PublishQP{Key: store.QPKey{LID: lid0, QPN: 0x1300},
		Backup: store.QPBackup{Device: "mlx5_1", Port: 1, LID: lid0 + 4, QPN: 0x1301}, Remote: ownerproto.Route{LID: lid1}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the entry on node1", func() bool { return hasQP(t, n1, 0x1300) })
	n1.pinGossip()
	n1.stop()
	path := filepath.Join(dirs[1], "store.db")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2 * 4096; i < min(len(b), 4*4096); i++ { // the pages after the meta pages
		b[i] = 0xa5
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	n1.run()
	if note := n1.status().Store.Note; !strings.Contains(note, "damaged at start") {
		t.Fatalf("node1's store note %q", note)
	}
	if aside, _ := filepath.Glob(path + ".damaged-*"); len(aside) != 1 {
		t.Fatalf("files moved aside: %v", aside)
	}
	eventually(t, 20*time.Second, "the entry back on node1 from node0", func() bool { return hasQP(t, n1, 0x1300) })
}
