package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ibpath/ibpath/internal/api"
	"github.com/ibpath/ibpath/internal/status"
)

// defaultQPRows is how many QPs `ibpath status` lists by default.
const defaultQPRows = 100

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the node: fabric, HCAs and ports, protected QPs with their layer and state, owners, peers, store, totals",
		Description: "status prints what ibpathd knows about its node. With --json it prints the status document " +
			"(status.Node, whose \"schema\" field is its version). The QP table lists the first --qps QPs " +
			"(by owner, device and QPN; the counts cover them all); --json lists every QP unless --qps is given.",
		Flags: []cli.Flag{jsonFlag(), &cli.IntFlag{Name: "qps", Value: defaultQPRows,
			Usage: "list at most `N` QPs (-1: every one); a node with many QPs answers a short list at once"}},
		Action: func(c *cli.Context) error {
			if _, err := positional(c, 0, 0, "[--json] [--qps N]"); err != nil {
				return err
			}
			if wantJSON(c) {
				return printStatusJSON(c)
			}
			n, err := client(c).StatusQPs(c.Context, c.Int("qps"))
			if err != nil {
				return callErr(c, err)
			}
			return renderStatus(c.App.Writer, n)
		},
	}
}

// printStatusJSON prints the daemon's status document as it came,
// indented, so fields newer than this ibpath are kept. It must still be a
// status document.
func printStatusJSON(c *cli.Context) error {
	rows := -1
	if c.IsSet("qps") {
		rows = c.Int("qps")
	}
	raw, err := client(c).StatusRawQPs(c.Context, rows)
	if err != nil {
		return callErr(c, err)
	}
	var n status.Node
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("status: socket %s: %w (its answer is not a status document): %w", c.String("socket"), api.ErrNotIbpathd, err)
	}
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	b.WriteByte('\n')
	_, err = c.App.Writer.Write(b.Bytes())
	return err
}

// renderStatus prints a node's status as sections of tables. Rows are
// sorted (HCAs by name, ports by number, QPs by device and QPN, owners by
// PID, peers by name) so that the output does not depend on the daemon's
// order.
func renderStatus(w io.Writer, n status.Node) error {
	fmt.Fprintf(w, "node: %s (ibpathd %s, schema %d, started %s)\n", n.Node, orDash(n.Version), n.Schema, when(n.Started))
	fmt.Fprintf(w, "fabric: %s\n", fabricSummary(n.Fabric))
	if n.Fabric.Error != "" {
		fmt.Fprintf(w, "fabric error: %s\n", n.Fabric.Error)
	}
	if n.Damping != "" {
		fmt.Fprintf(w, "flap damping: %s\n", n.Damping)
	}
	if n.Health != "" {
		fmt.Fprintf(w, "port health: %s\n", n.Health)
	}

	fmt.Fprintf(w, "\nHCAs and ports:\n")
	if len(n.HCAs) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		t := newTable(w, "DEVICE", "PORT", "STATE", "PHYS", "LINK LAYER", "LID", "LMC", "RATE", "APM", "HEALTH", "FLAP DAMPING")
		for _, h := range sorted(n.HCAs, func(a, b status.HCA) int { return cmp.Compare(a.Name, b.Name) }) {
			if len(h.Ports) == 0 {
				t.row(h.Name, "", "", "", "", "", "", "", yesNo(h.APM), "", "")
			}
			for _, p := range sorted(h.Ports, func(a, b status.Port) int { return cmp.Compare(a.Num, b.Num) }) {
				t.row(h.Name, num(p.Num), p.State, p.PhysState, p.LinkLayer, lid(p.LID), num(p.LMC), p.Rate, yesNo(h.APM), health(p.Health), damping(p.Damping))
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "\nQPs:\n")
	if len(n.QPs) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		t := newTable(w, "DEVICE", "QPN", "OWNER", "LAYER", "APM", "PRIMARY", "ALTERNATE", "MIGRATIONS", "CROSS-NIC",
			"FAILOVERS", "BACKUP", "REASON")
		qps := sorted(n.QPs, func(a, b status.QP) int {
			return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.QPN, b.QPN))
		})
		for _, q := range qps {
			t.row(q.Device, hex(q.QPN), owner(q.OwnerPID), q.Layer, q.APM, q.Primary.String(), q.Alternate.String(), num(q.Migrations),
				q.CrossNIC, num(q.Failovers), q.Backup.String(), qpReason(q))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if n.QPsTotal > len(n.QPs) {
		fmt.Fprintf(w, "  ... %d of %d QPs listed (apm %d, crossnic %d, none %d); --qps N lists more, --qps -1 every one\n",
			len(n.QPs), n.QPsTotal, n.Layers[status.LayerAPM], n.Layers[status.LayerCrossNIC], n.Layers[status.LayerNone])
	}

	if err := renderDrains(w, n.Drains); err != nil {
		return err
	}

	fmt.Fprintf(w, "\nowners:\n")
	if len(n.Owners) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		t := newTable(w, "PID", "UID", "COMM", "INCARNATION", "ATTACHED", "QPS")
		for _, o := range sorted(n.Owners, func(a, b status.Owner) int { return cmp.Compare(a.PID, b.PID) }) {
			t.row(num(o.PID), num(o.UID), o.Comm, num(o.Incarnation), when(o.Attached), num(o.QPs))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "\npeers: %s\n", peersSummary(n.Peers))
	fmt.Fprintf(w, "replication: %s\n", replSummary(n.Repl))

	s := n.Store
	fmt.Fprintf(w, "store: %s: %s, %s, %s\n", orDash(s.Path), plural(s.QPs, "QP", "QPs"), plural(s.MRs, "MR", "MRs"),
		plural(s.Tombstones, "tombstone", "tombstones"))
	if s.Note != "" {
		fmt.Fprintf(w, "store note: %s\n", s.Note)
	}

	tot := n.Totals
	fmt.Fprintf(w, "totals: %s armed; %d migrations, %d failovers, %d switchbacks; replication lag p50 %s p99 %s; %d peers refused, %d records refused; %d owner messages refused\n",
		plural(tot.ArmedQPs, "QP", "QPs"), tot.Migrations, tot.Failovers, tot.Switchbacks,
		seconds(tot.ReplicationLagP50Seconds), seconds(tot.ReplicationLagP99Seconds), tot.PeersRefused, tot.RecordsRefused, tot.OwnerRefusals)
	return nil
}

// fabricSummary says what ibpathd runs on and why: "hardware (2 RDMA
// devices under /sys/class/infiniband)", "sim, seed 1, host node0 of 2
// (no RDMA device under /sys/class/infiniband)".
func fabricSummary(f status.Fabric) string {
	out := orDash(f.Kind)
	if f.Sim != (status.SimFabric{}) {
		out += fmt.Sprintf(", seed %d, host %s of %d", f.Sim.Seed, f.Sim.Host, f.Sim.Hosts)
	}
	if f.Reason != "" {
		out += " (" + f.Reason + ")"
	}
	return out
}

// replSummary says how the node replicates: "keyed, gossip on 10.0.0.1:7946".
func replSummary(r status.Repl) string {
	if r.Mode == "" {
		return "-"
	}
	out := r.Mode
	if r.Addr != "" {
		out += ", gossip on " + r.Addr
	}
	if r.Reason != "" {
		out += " (" + r.Reason + ")"
	}
	return out
}

// peersSummary counts the peers by state: "3 (2 alive, 1 suspect)".
func peersSummary(peers []status.Peer) string {
	if len(peers) == 0 {
		return "none"
	}
	count := map[string]int{}
	for _, p := range peers {
		count[p.State]++
	}
	var parts []string
	for _, st := range []string{status.PeerAlive, status.PeerSuspect, status.PeerDead, status.PeerLeft} {
		if count[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", count[st], st))
			delete(count, st)
		}
	}
	for _, st := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%d %s", count[st], orDash(st)))
	}
	return fmt.Sprintf("%d (%s)", len(peers), strings.Join(parts, ", "))
}

// owner names a QP's owner: its PID, or ibpathd for the QPs of the
// embedded simulated fabric's workload.
func owner(pid int) string {
	if pid == 0 {
		return "ibpathd"
	}
	return num(pid)
}

// when prints a time in UTC, RFC 3339, or "-" for the zero time.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// seconds prints a duration given in seconds.
// health renders a port's health: "-" when never judged, else its state,
// whether it is out of service (why: the drained ports' section) and its
// congestion signs per second from one a second on, or that its counters
// cannot be read.
func health(h *status.PortHealth) string {
	switch {
	case h == nil:
		return "-"
	case h.Error != "":
		return "counters unreadable"
	}
	s := h.State
	if h.OutOfService {
		s += ", out of service"
	}
	if h.CongestionPerSecond >= 1 {
		s += fmt.Sprintf(", congested %.0f/s", h.CongestionPerSecond)
	}
	return s
}

// damping renders a port's flap damping: "-" without a penalty, else
// the penalty, the flaps and, while suppressed, until when.
func damping(d *status.PortDamping) string {
	if d == nil {
		return "-"
	}
	s := fmt.Sprintf("penalty %.0f, %s", d.Penalty, plural(d.Flaps, "flap", "flaps"))
	if d.Suppressed {
		s += ", suppressed until " + when(d.ReuseAt)
	}
	return s
}

func seconds(s float64) string {
	if s == 0 {
		return "-"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sorted returns a sorted copy of s.
func sorted[T any](s []T, cmp func(a, b T) int) []T {
	out := slices.Clone(s)
	slices.SortStableFunc(out, cmp)
	return out
}

// qpReason is a QP's REASON column: its status's reason, until when
// layer 1 holds its failback and layer 2 its switch back (flap damping),
// and the async events the
// shim kept from its application because layer 2 carried it.
func qpReason(q status.QP) string {
	var w []string
	if q.Reason != "" {
		w = append(w, q.Reason)
	}
	if !q.FailbackHeldUntil.IsZero() {
		w = append(w, "failback held until "+q.FailbackHeldUntil.UTC().Format(time.RFC3339)+" (home port or path flapped)")
	}
	if !q.SwitchbackHeldUntil.IsZero() {
		w = append(w, "switch back held until "+q.SwitchbackHeldUntil.UTC().Format(time.RFC3339)+" (home port flapped)")
	}
	if q.KeptEvents != "" {
		w = append(w, "events kept from the application: "+q.KeptEvents)
	}
	return strings.Join(w, "; ")
}
