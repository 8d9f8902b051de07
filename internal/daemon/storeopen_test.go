package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ibpath/ibpath/store"
)

// TestDamagedStoreMovedAside: ibpathd starts on a store file that is
// garbage, or whose one entry has a flipped byte. It neither crashes nor
// serves the file: the file is moved aside (kept), the store starts
// empty, and the status and the log say so. A 0-byte file starts empty
// with a note too; a good file opens as it was, without one.
func TestDamagedStoreMovedAside(t *testing.T) {
	owner := store.Owner{Node: "node7", PID: 1, Incarnation: 1}
	good := func(t *testing.T, path string) {
		st, err := store.Open(path, store.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutQP(owner, store.QPKey{LID: 77, QPN: 0x42}, store.QPBackup{Device: "mlx5_damaged", Port: 1, LID: 78, QPN: 0x43}); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		make    func(t *testing.T, path string)
		moved   bool
		note    string // in the status' store note ("" : none)
		entries int
	}{
		{"good", good, false, "", 1},
		{"garbage", func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("not a bbolt file "), 2000), 0o600); err != nil {
				t.Fatal(err)
			}
		}, true, "damaged at start", 0},
		{"flipped value byte", func(t *testing.T, path string) {
			good(t, path)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			i := bytes.Index(b, []byte("mlx5_damaged"))
			if i < 0 {
				t.Fatal("the entry's device name is not in the file")
			}
			b[i+5] ^= 0x20
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true, "damaged at start", 0},
		{"empty", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, false, "was empty (0 bytes)", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "store.db")
			tc.make(t, path)
			_, c := testDaemon(t, func(cfg *Config) { cfg.StateDir = dir })
			n, err := c.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tc.note == "" && n.Store.Note != "" || !strings.Contains(n.Store.Note, tc.note) {
				t.Fatalf("store note %q, want one with %q", n.Store.Note, tc.note)
			}
			if n.Store.QPs != tc.entries {
				t.Fatalf("%d QP entries, want %d", n.Store.QPs, tc.entries)
			}
			aside, _ := filepath.Glob(path + ".damaged-*")
			if moved := len(aside) == 1; moved != tc.moved {
				t.Fatalf("files moved aside: %v", aside)
			}
			if tc.moved && !strings.Contains(n.Store.Note, aside[0]) {
				t.Fatalf("the note %q does not name %s", n.Store.Note, aside[0])
			}
		})
	}
}

// TestStateModesEnforced: a state directory and a store file that exist
// with looser modes (made by hand, or by an older version) are set to
// 0700 and 0600 at start.
func TestStateModesEnforced(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "store.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := os.Chmod(filepath.Join(dir, "store.db"), 0o644); err != nil {
		t.Fatal(err)
	}
	testDaemon(t, func(cfg *Config) { cfg.StateDir = dir })
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "store.db"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %o, want %o", path, fi.Mode().Perm(), want)
		}
	}
}
