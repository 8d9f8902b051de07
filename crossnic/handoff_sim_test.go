package crossnic_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ibpath/ibpath/crossnic"
	"github.com/ibpath/ibpath/fsm"
	"github.com/ibpath/ibpath/verbs"
	"github.com/ibpath/ibpath/verbs/sim"
)

// pollConnN polls x's Conn once with room for n completions.
func (x *adoptApp) pollConnN(t *testing.T, n int) []verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, n)
	k, err := x.conn.Poll(wc)
	must(t, err)
	return wc[:k]
}

// TestConnSettlesAndHandsOver: a Conn is settled (its traffic can be
// handed to another data path) only once a failover put both queues on
// the backup and the application polled everything the Conn owed it;
// Lane and BackupKey then describe the backup data path, and a Conn that
// may switch back is never settled.
func TestConnSettlesAndHandsOver(t *testing.T) {
	f, a, b, dir := adoptPairDir(t, 24)
	var err error
	a.recvDirect(t, 0) // A's receive queue has something to move too
	a.conn, err = a.shadow.Adopt(a.qp, a.cq, a.direct.resume())
	must(t, err)
	b.conn, err = b.shadow.Adopt(b.qp, b.cq, b.direct.resume())
	must(t, err)

	sent, done := 0, 0
	send := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			_, err := a.conn.PostSend(a.round(b, sent, false))
			must(t, err)
			sent++
		}
	}
	pump := func() {
		t.Helper()
		for _, wc := range a.pollConn(t) {
			if wc.Status != verbs.WCSuccess || wc.QPNum != a.qp.QPN() || wc.WRID != uint64(2*done+1) {
				t.Fatalf("A's completion %d: %+v", done, wc)
			}
			done++
		}
		b.pollConn(t)
	}
	send(2)
	f.RunFor(50 * time.Microsecond)
	pump()
	if done != 2 || a.conn.Settled() || b.conn.Settled() {
		t.Fatalf("before the fault: %d done, settled A %v B %v", done, a.conn.Settled(), b.conn.Settled())
	}

	must(t, f.SetLink(a.ctx.(*sim.Context).HCA().Port(1), false))
	a.conn.HandleEvent(a.ctx, verbs.AsyncEvent{Type: verbs.EventPortErr, Port: 1}, 1)
	send(2) // recorded during the handshake, replayed after it
	if a.conn.Settled() {
		t.Fatal("settled during the handshake")
	}
	for i := 0; i < 200 && (done < sent || !a.conn.Settled() || !b.conn.Settled()); i++ {
		f.RunFor(10 * time.Microsecond)
		pump()
	}
	sq, rq := a.conn.State()
	if done != sent || sq != fsm.SQFallback || rq != fsm.RQFallback || !a.conn.Settled() || !b.conn.Settled() {
		t.Fatalf("after the failover: %d of %d done, A %v/%v, settled A %v B %v", done, sent, sq, rq, a.conn.Settled(), b.conn.Settled())
	}

	// Two completions owed: the application polls one, the other waits
	// in the Conn, which is not settled until it is polled too.
	send(2)
	f.RunFor(50 * time.Microsecond)
	if got := a.pollConnN(t, 1); len(got) != 1 || got[0].WRID != uint64(2*done+1) {
		t.Fatalf("first poll: %+v", got)
	}
	done++
	if a.conn.Settled() {
		t.Fatal("settled with a completion waiting in the Conn")
	}
	if got := a.pollConnN(t, 4); len(got) != 1 || got[0].WRID != uint64(2*done+1) {
		t.Fatalf("second poll: %+v", got)
	}
	done++
	if !a.conn.Settled() {
		t.Fatal("not settled once the application polled everything")
	}

	// Lane: the backup leg and the numbers the application sees.
	l := a.conn.Lane()
	bk, connected, ok := a.shadow.BackupOf(a.qp)
	if !ok || !connected || l.Backup.QP == nil || l.Backup.QP.QPN() != bk.QPN || l.Backup.Ctx != a.bakCtx ||
		l.Backup.CQ == nil || l.Backup.CQ == a.cq {
		t.Fatalf("lane %+v, backup %+v", l, bk)
	}
	if q, ok := a.shadow.DefaultOf(l.Backup.CQ); !ok || q != a.qp {
		t.Fatal("the lane's backup CQ is not the backup of A's QP")
	}
	if l.DefQPN != a.qp.QPN() || l.PeerQPN != b.qp.QPN() {
		t.Fatalf("lane numbers %#x/%#x, want %#x/%#x", l.DefQPN, l.PeerQPN, a.qp.QPN(), b.qp.QPN())
	}
	lk := a.mr.LKey()
	want, ok := a.shadow.BackupLKey(lk)
	if !ok || len(l.LKeys) != 1 || l.LKeys[lk] != want {
		t.Fatalf("lane lkeys %v, want {%#x: %#x}", l.LKeys, lk, want)
	}
	// LKeys is a copy.
	l.LKeys[lk], l.LKeys[0x1234] = want+1, 0x5678
	if k, ok := a.conn.BackupKey(false, lk); !ok || k != want {
		t.Fatalf("BackupKey after editing the lane's copy: %#x %v", k, ok)
	}
	if _, ok := a.conn.BackupKey(false, 0x1234); ok {
		t.Fatal("an lkey added to the lane's copy reached the Conn")
	}
	if l2 := a.conn.Lane(); len(l2.LKeys) != 1 || l2.LKeys[lk] != want {
		t.Fatalf("lane lkeys %v after editing an earlier copy", l2.LKeys)
	}
	a.conn.MapLKey(0x77, 0x88)
	if k, ok := a.conn.BackupKey(false, 0x77); !ok || k != 0x88 || a.conn.Lane().LKeys[0x77] != 0x88 {
		t.Fatalf("a key mapped later: %#x %v, lane %v", k, ok, a.conn.Lane().LKeys)
	}

	// BackupKey: the peer's rkeys through the directory.
	pb, err := b.ctx.QueryPort(1)
	must(t, err)
	wantR, ok := dir.LookupMR(crossnic.MRRef{LID: pb.LID, RKey: b.mr.RKey()})
	if !ok {
		t.Fatal("B's rkey is not in the directory")
	}
	if k, ok := a.conn.BackupKey(true, b.mr.RKey()); !ok || k != wantR {
		t.Fatalf("BackupKey(rkey %#x) = %#x %v, want %#x", b.mr.RKey(), k, ok, wantR)
	}
	if _, ok := a.conn.BackupKey(true, b.mr.RKey()^0xdead); ok {
		t.Fatal("an unknown rkey has a backup")
	}
	if _, ok := a.conn.BackupKey(false, lk^0xdead); ok {
		t.Fatal("an unknown lkey has a backup")
	}

	// A Conn that may switch back is never handed over. (A switch back
	// needs mailboxes at both ends.)
	if err := a.conn.EnableRecovery(crossnic.Recovery{Clock: f}); !errors.Is(err, crossnic.ErrNoMailbox) {
		t.Fatalf("recovery without mailboxes: %v, want %v", err, crossnic.ErrNoMailbox)
	}
	if !a.conn.Settled() {
		t.Fatal("not settled after a refused recovery")
	}
	ma, err := a.conn.OpenMailbox()
	must(t, err)
	mb, err := b.conn.OpenMailbox()
	must(t, err)
	must(t, a.conn.SetPeerMailbox(mb))
	must(t, b.conn.SetPeerMailbox(ma))
	must(t, a.conn.EnableRecovery(crossnic.Recovery{Clock: f}))
	if a.conn.Settled() {
		t.Fatal("settled with recovery configured")
	}
}
