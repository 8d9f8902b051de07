package cli

import (
	"io"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/api"
)

func storeCommand() *cli.Command {
	node := func() cli.Flag {
		return &cli.StringFlag{Name: "node", Usage: "only the entries owned by this node"}
	}
	return &cli.Command{
		Name:  "store",
		Usage: "inspect the local store of backup attributes (QP and MR entries, the node's own and its peers')",
		Subcommands: []*cli.Command{
			{
				Name:  "qps",
				Usage: "list the QP entries: a QP and the backup QP that replaces it on failover",
				Flags: []cli.Flag{node(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if _, err := positional(c, 0, 0, "[--node NAME] [--json]"); err != nil {
						return err
					}
					qps, err := client(c).StoreQPs(c.Context, c.String("node"))
					if err != nil {
						return callErr(c, err)
					}
					if qps == nil {
						qps = []api.StoreQP{}
					}
					if wantJSON(c) {
						return printJSON(c.App.Writer, qps)
					}
					return renderStoreQPs(c.App.Writer, qps)
				},
			},
			{
				Name:  "mrs",
				Usage: "list the MR entries: an rkey and the backup rkey that replaces it on failover",
				Flags: []cli.Flag{node(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if _, err := positional(c, 0, 0, "[--node NAME] [--json]"); err != nil {
						return err
					}
					mrs, err := client(c).StoreMRs(c.Context, c.String("node"))
					if err != nil {
						return callErr(c, err)
					}
					if mrs == nil {
						mrs = []api.StoreMR{}
					}
					if wantJSON(c) {
						return printJSON(c.App.Writer, mrs)
					}
					return renderStoreMRs(c.App.Writer, mrs)
				},
			},
		},
		Action: unknownCommand,
	}
}

// renderStoreQPs prints the QP entries in the daemon's order (the store's
// key order). Endpoints show their LID when they have one, else their GID.
func renderStoreQPs(w io.Writer, qps []api.StoreQP) error {
	if len(qps) == 0 {
		_, err := io.WriteString(w, "no QP entries\n")
		return err
	}
	t := newTable(w, "OWNER", "ADDR", "QPN", "BACKUP DEVICE", "BACKUP PORT", "BACKUP ADDR", "BACKUP QPN", "VERSION")
	for _, q := range qps {
		t.row(q.Owner, addr(q.LID, q.GID), hex(q.QPN), q.Device, num(q.Port), addr(q.BLID, q.BGID), hex(q.BQPN), num(q.Version))
	}
	return t.flush()
}

// renderStoreMRs prints the MR entries in the daemon's order.
func renderStoreMRs(w io.Writer, mrs []api.StoreMR) error {
	if len(mrs) == 0 {
		_, err := io.WriteString(w, "no MR entries\n")
		return err
	}
	t := newTable(w, "OWNER", "ADDR", "RKEY", "BACKUP RKEY", "START", "LENGTH", "VERSION")
	for _, m := range mrs {
		start, length := "", ""
		if m.Length != 0 {
			start, length = hex(m.Addr), num(m.Length)
		}
		t.row(m.Owner, addr(m.LID, m.GID), hex(m.RKey), hex(m.BRKey), start, length, num(m.Version))
	}
	return t.flush()
}
