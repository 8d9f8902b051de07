package replica

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"
)

// The peers file (Config.PeersFile) keeps the addresses of the peers this
// node last saw alive, one host:port per line, so that a node restarted
// without seeds, or whose seeds are down, finds its cluster again at once
// instead of waiting for a peer's periodic push-pull to reach it.

// loadPeers reads a peers file; a missing file is no peers.
func loadPeers(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("peers file: %w", err)
	}
	var addrs []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			addrs = append(addrs, l)
		}
	}
	return addrs, nil
}

// savePeers replaces the peers file with addrs (a new file renamed over
// the old one: a crash leaves one or the other whole).
func savePeers(path string, addrs []string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".peers-*")
	if err != nil {
		return fmt.Errorf("peers file: %w", err)
	}
	_, err = tmp.WriteString(strings.Join(addrs, "\n") + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("peers file: %w", err)
	}
	return nil
}

// rememberPeers writes the addresses of alive, the other members alive
// now, to the peers file when they differ from what it holds. A node
// alone keeps the file as it is: its last peers are the ones to try.
func (r *Replicator) rememberPeers(alive []*memberlist.Node) {
	if r.cfg.PeersFile == "" {
		return
	}
	addrs := make([]string, 0, len(alive))
	for _, n := range alive {
		addrs = append(addrs, n.Address())
	}
	slices.Sort(addrs)
	r.peersMu.Lock()
	defer r.peersMu.Unlock()
	if len(addrs) == 0 || slices.Equal(addrs, r.remembered) {
		return
	}
	if err := savePeers(r.cfg.PeersFile, addrs); err != nil {
		if !r.peersErr {
			r.log.Warn("replica: cannot remember the peers alive; a restart will rely on the seeds", "path", r.cfg.PeersFile, "err", err)
		}
		r.peersErr = true
		return
	}
	r.peersErr = false
	r.remembered = addrs
}

// rememberedPeers is what the peers file holds (as loaded or last written).
func (r *Replicator) rememberedPeers() []string {
	r.peersMu.Lock()
	defer r.peersMu.Unlock()
	return slices.Clone(r.remembered)
}
