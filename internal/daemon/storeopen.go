package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ibpath/ibpath/store"
)

// storeLockWait is how long ibpathd waits for the store's lock at start.
const storeLockWait = 5 * time.Second

// openStore opens the store at path without letting a damaged file stop
// the node or be served. A file store.Open finds damaged (store.ErrDamaged:
// truncated, a page that does not parse, a value that fails its checksum)
// is renamed to path.damaged-TIME, kept for inspection, and an empty store
// is opened in its place: the entries come back from the attached
// processes, which publish again when they reattach, and, with
// replication, from the peers' anti-entropy (they hold copies of this
// node's entries). A 0-byte file (bbolt makes it an empty store) is said,
// not reset silently. note says what happened, for the status; "" when
// the file opened as it was.
//
// A file another process holds (another ibpathd on the same state
// directory) is an error that names that process when /proc/locks does,
// once lockWait has passed without the lock (an ibpathd restarting waits
// for the last one's exit).
func openStore(path string, lockWait time.Duration, log *slog.Logger) (st *store.Store, note string, err error) {
	opts := store.Options{Timeout: lockWait}
	if fi, serr := os.Stat(path); serr == nil && fi.Size() == 0 {
		note = fmt.Sprintf("%s was empty (0 bytes) at start: the store started empty", path)
		log.Warn("store file empty (0 bytes): starting with an empty store; the attached processes and the peers fill it again", "path", path)
	}
	st, err = store.Open(path, opts)
	if errors.Is(err, store.ErrLocked) {
		return nil, "", lockedStoreError(path, filepath.Dir(path), findLockHolder(path), err)
	}
	if err == nil || !errors.Is(err, store.ErrDamaged) {
		return st, note, err
	}
	aside := fmt.Sprintf("%s.damaged-%s", path, time.Now().UTC().Format("20060102T150405.000Z"))
	if rerr := os.Rename(path, aside); rerr != nil {
		return nil, "", fmt.Errorf("%w; and it cannot be moved aside: %w", err, rerr)
	}
	log.Error("store damaged: moved aside; starting with an empty store, which the attached processes and the peers fill again",
		"err", err, "moved_to", aside)
	st, oerr := store.Open(path, opts)
	if oerr != nil {
		return nil, "", fmt.Errorf("%w; moved to %s, and a new store cannot be opened: %w", err, aside, oerr)
	}
	return st, fmt.Sprintf("damaged at start (%v): moved to %s; the store started empty", err, aside), nil
}

// keepPrivate gives path the mode want when it has another (an existing
// state directory or store file keeps the mode it was made with; the
// store holds every local process's backup attributes), saying so.
func keepPrivate(path string, want fs.FileMode, log *slog.Logger) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() == want {
		return nil
	}
	if err := os.Chmod(path, want); err != nil {
		return fmt.Errorf("chmod %s %o: %w", path, want, err)
	}
	log.Warn("mode corrected", "path", path, "was", fmt.Sprintf("%o", fi.Mode().Perm()), "now", fmt.Sprintf("%o", want))
	return nil
}
