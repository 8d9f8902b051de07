package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibpath/ibpath/store"
)

// TestLockedStoreNamesItsHolder: a store another open store holds is an
// error that names the holder's pid (from /proc/locks) and says what to
// do, not bbolt's bare "timeout".
func TestLockedStoreNamesItsHolder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "store.db")
	held, err := store.Open(path, store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, _, err = openStore(path, 50*time.Millisecond, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("a locked store opened")
	}
	msg := err.Error()
	for _, want := range []string{"store " + path + " is in use", "--state-dir, now " + dir} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if _, err := os.Stat("/proc/locks"); err == nil && !strings.Contains(msg, fmt.Sprintf("process %d (", os.Getpid())) {
		t.Errorf("error %q does not name this process (pid %d), which holds the lock", msg, os.Getpid())
	}
	if strings.Contains(msg, "store: store:") || strings.Contains(msg, "timeout") || !errors.Is(err, store.ErrLocked) {
		t.Errorf("error %q repeats itself, or is not store.ErrLocked", msg)
	}
}

func TestLockPID(t *testing.T) {
	const locks = "1: FLOCK  ADVISORY  WRITE 4242 fe:00:777 0 EOF\n" +
		"1: -> FLOCK  ADVISORY  WRITE 4343 fe:00:888 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 4444 08:01:888 0 EOF\n" +
		"3: POSIX  ADVISORY  READ 4545 fe:00:999 0 EOF\n"
	dev := uint64(0xfe00) // major 0xfe, minor 0
	for _, c := range []struct {
		dev, ino uint64
		want     int
	}{
		{dev, 777, 4242},
		{dev, 888, 0}, // only waited for on this device
		{0x801, 888, 4444},
		{dev, 999, 4545},
		{dev, 1, 0},
	} {
		if got := lockPID(strings.NewReader(locks), c.dev, c.ino); got != c.want {
			t.Errorf("lockPID(dev %#x, ino %d) = %d, want %d", c.dev, c.ino, got, c.want)
		}
	}
}

func TestLockedStoreErrorWords(t *testing.T) {
	for _, c := range []struct {
		h    lockHolder
		want string
	}{
		{lockHolder{pid: 77, comm: "ibpathd"}, "another ibpathd (pid 77) holds its lock"},
		{lockHolder{pid: 78, comm: "bbolt"}, "process 78 (bbolt) holds its lock"},
		{lockHolder{pid: 79}, "process 79 holds its lock"},
		{lockHolder{}, "another process holds its lock (another ibpathd on this state directory?)"},
	} {
		err := lockedStoreError("/s/store.db", "/s", c.h, store.ErrLocked)
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--state-dir") || !errors.Is(err, store.ErrLocked) {
			t.Errorf("%+v: %q lacks %q", c.h, err, c.want)
		}
	}
}
