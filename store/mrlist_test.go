package store

import (
	"path/filepath"
	"testing"
)

func rkeys(es []MREntry) []uint32 {
	var out []uint32
	for _, e := range es {
		out = append(out, e.Key.RKey)
	}
	return out
}

func sameRKeys(t *testing.T, what string, got []MREntry, want ...uint32) {
	t.Helper()
	g := rkeys(got)
	if len(g) != len(want) {
		t.Fatalf("%s: rkeys %#x, want %#x", what, g, want)
	}
	for i := range g {
		if g[i] != want[i] {
			t.Fatalf("%s: rkeys %#x, want %#x", what, g, want)
		}
	}
}

// MRsSince lists a port's entries in the order memory took them, pages
// them, goes on from a mark, lists a changed entry again, skips other
// ports and removed entries, and lists all again from a mark of an
// earlier life of the daemon.
func TestMRsSince(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := open(t, path)
	p1, p2 := Port{LID: 1}, Port{LID: 2}
	put := func(o Owner, lid uint16, rkey, backup uint32) {
		t.Helper()
		if err := s.PutMR(o, MRKey{LID: lid, RKey: rkey}, MRBackup{RKey: backup}); err != nil {
			t.Fatal(err)
		}
	}
	put(alice, 1, 0x30, 0x40)
	put(alice, 2, 0x31, 0x41) // another port
	put(alice, 1, 0x10, 0x50)
	// a replicated entry of the port, from a peer
	if _, err := s.ApplyMR(MREntry{Key: MRKey{LID: 1, RKey: 0x20}, Value: MRBackup{RKey: 0x60}, Owner: bob, Version: 5}); err != nil {
		t.Fatal(err)
	}
	all, mark, more, err := s.MRsSince([]Port{p1}, 0, 10)
	if err != nil || more {
		t.Fatalf("MRsSince: more %v err %v", more, err)
	}
	sameRKeys(t, "port 1 from 0", all, 0x30, 0x10, 0x20)
	if all[2].Value.RKey != 0x60 || all[2].Owner != bob {
		t.Fatalf("the applied entry listed as %+v", all[2])
	}
	// pages of two
	page, m1, more, _ := s.MRsSince([]Port{p1}, 0, 2)
	sameRKeys(t, "first page", page, 0x30, 0x10)
	if !more {
		t.Fatal("a cut list says no more")
	}
	page, m2, more, _ := s.MRsSince([]Port{p1}, m1, 2)
	sameRKeys(t, "second page", page, 0x20)
	if more || m2 != mark {
		t.Fatalf("last page: more %v mark %d, want false %d", more, m2, mark)
	}
	// nothing new: nothing listed, the same mark
	none, m3, _, _ := s.MRsSince([]Port{p1, p2}, mark, 10)
	if len(none) != 0 || m3 != mark {
		t.Fatalf("from the last mark: %#x, mark %d (want none, %d)", rkeys(none), m3, mark)
	}
	// the same values again are not news; other values are
	put(alice, 1, 0x10, 0x50)
	put(alice, 1, 0x11, 0x51)
	if err := s.PutMR(alice, MRKey{LID: 1, RKey: 0x30}, MRBackup{RKey: 0x70}); err != nil {
		t.Fatal(err)
	}
	news, mark2, _, _ := s.MRsSince([]Port{p1}, mark, 10)
	sameRKeys(t, "news", news, 0x11, 0x30)
	// removed entries are gone from the list
	if _, err := s.RemoveOwner(bob); err != nil {
		t.Fatal(err)
	}
	all, _, _, _ = s.MRsSince([]Port{p1, p2}, 0, 10)
	sameRKeys(t, "after bob's removal", all, 0x31, 0x10, 0x11, 0x30)
	// a reopened store counts afresh: a mark of the earlier life lists all
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	defer s.Close()
	all, _, _, _ = s.MRsSince([]Port{p1}, mark2+100, 10)
	if len(all) != 3 {
		t.Fatalf("a mark from before the restart listed %#x, want the port's 3 entries", rkeys(all))
	}
	if l, m, _, _ := s.MRsSince([]Port{p1}, 0, 0); l != nil || m != 0 {
		t.Fatalf("limit 0 listed %v, mark %d", l, m)
	}
}
