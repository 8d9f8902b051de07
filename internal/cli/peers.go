package cli

import (
	"cmp"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/status"
)

func peersCommand() *cli.Command {
	return &cli.Command{
		Name:  "peers",
		Usage: "list the replication peers (other ibpathd of the cluster) with their state and addresses",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if _, err := positional(c, 0, 0, "[--json]"); err != nil {
				return err
			}
			peers, err := client(c).Peers(c.Context)
			if err != nil {
				return callErr(c, err)
			}
			if peers == nil {
				peers = []status.Peer{}
			}
			if wantJSON(c) {
				return printJSON(c.App.Writer, peers)
			}
			return renderPeers(c.App.Writer, peers)
		},
	}
}

// renderPeers prints one row per peer, sorted by name.
func renderPeers(w io.Writer, peers []status.Peer) error {
	if len(peers) == 0 {
		_, err := io.WriteString(w, "no peers\n")
		return err
	}
	t := newTable(w, "NAME", "ADDR", "STATE", "GIDS", "LIDS", "ENTRIES")
	for _, p := range sorted(peers, func(a, b status.Peer) int { return cmp.Compare(a.Name, b.Name) }) {
		lids := make([]string, len(p.LIDs))
		for i, l := range p.LIDs {
			lids[i] = num(l)
		}
		t.row(p.Name, p.Addr, p.State, strings.Join(p.GIDs, ","), strings.Join(lids, ","), num(p.Entries))
	}
	return t.flush()
}
