package daemon

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/ibpath/ibpath/internal/status"
)

// serveMetrics renders the status in the Prometheus text exposition
// format (version 0.0.4).
func (d *Daemon) serveMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	WriteMetrics(w, d.StatusOf(0)) // the counts, without the QP rows
}

// WriteMetrics writes the metrics of a status. Every metric is derived
// from status.Node, the one status type.
func WriteMetrics(w io.Writer, n status.Node) {
	m := metricWriter{w: w}
	m.metric("ibpath_migrations_total", "counter", "Path migrations (layer 1) seen since ibpathd started.", nil, float64(n.Totals.Migrations))
	m.metric("ibpath_failovers_total", "counter", "Cross-NIC failovers (layer 2) reported since ibpathd started.", nil, float64(n.Totals.Failovers))
	m.metric("ibpath_switchbacks_total", "counter", "Cross-NIC switch-backs to the default path since ibpathd started.", nil, float64(n.Totals.Switchbacks))
	m.metric("ibpath_armed_qps", "gauge", "QPs whose alternate path is armed.", nil, float64(n.Totals.ArmedQPs))
	// labels from a known set (status.Node.Layers): a process reports
	// its QPs' layer, and a label value per distinct report would grow
	// the series without end
	layers := map[string]int{}
	for _, l := range []string{status.LayerAPM, status.LayerCrossNIC, status.LayerNone, status.LayerOther} {
		layers[l] = n.Layers[l]
	}
	m.family("ibpath_qps", "gauge", "QPs by the layer protecting them.")
	for _, l := range sortedKeys(layers) {
		m.sample("ibpath_qps", [][2]string{{"layer", l}}, float64(layers[l]))
	}
	m.family("ibpath_port_up", "gauge", "1 when the port is ACTIVE.")
	for _, h := range n.HCAs {
		for _, p := range h.Ports {
			up := 0.0
			if p.State == "ACTIVE" {
				up = 1
			}
			m.sample("ibpath_port_up", [][2]string{{"device", h.Name}, {"port", fmt.Sprint(p.Num)}}, up)
		}
	}
	m.metric("ibpath_owners", "gauge", "Processes attached over the owner protocol.", nil, float64(len(n.Owners)))
	peers := map[string]int{status.PeerAlive: 0, status.PeerSuspect: 0, status.PeerDead: 0, status.PeerLeft: 0}
	for _, p := range n.Peers {
		peers[p.State]++
	}
	m.family("ibpath_peers", "gauge", "Replication peers by state.")
	for _, s := range sortedKeys(peers) {
		m.sample("ibpath_peers", [][2]string{{"state", s}}, float64(peers[s]))
	}
	m.family("ibpath_store_entries", "gauge", "Entries of the local store.")
	m.sample("ibpath_store_entries", [][2]string{{"kind", "qp"}}, float64(n.Store.QPs))
	m.sample("ibpath_store_entries", [][2]string{{"kind", "mr"}}, float64(n.Store.MRs))
	m.sample("ibpath_store_entries", [][2]string{{"kind", "tombstone"}}, float64(n.Store.Tombstones))
	m.family("ibpath_replication_lag_seconds", "gauge", "Lag of received replication pushes, from the origin's write.")
	m.sample("ibpath_replication_lag_seconds", [][2]string{{"quantile", "0.5"}}, n.Totals.ReplicationLagP50)
	m.sample("ibpath_replication_lag_seconds", [][2]string{{"quantile", "0.99"}}, n.Totals.ReplicationLagP99)
	m.metric("ibpath_peers_refused_total", "counter", "Peers refused for failing the cluster key.", nil, float64(n.Totals.PeersRefused))
	m.metric("ibpath_records_refused_total", "counter", "Replicated records refused: their route is not their owner's node's, or they came from another node.", nil, float64(n.Totals.RecordsRefused))
	m.metric("ibpath_replays_refused_total", "counter", "Peer messages refused as replays: sent to another node, outside the replay window, or seen before.", nil, float64(n.Totals.MessagesRefused))
	m.metric("ibpath_owner_refusals_total", "counter", "QP reports, publications and events of local processes refused.", nil, float64(n.Totals.OwnerRefusals))
	m.metric("ibpath_connections_refused_total", "counter", "Socket connections closed at once: their user held the most allowed.", nil, float64(n.Totals.ConnectionsRefused))
	sim := 0.0
	if n.Fabric.Kind == status.FabricSim {
		sim = 1
	}
	m.metric("ibpath_fabric_simulated", "gauge", "1 when ibpathd runs on the embedded simulated fabric.", nil, sim)
}

type metricWriter struct{ w io.Writer }

func (m metricWriter) family(name, typ, help string) {
	fmt.Fprintf(m.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (m metricWriter) sample(name string, labels [][2]string, v float64) {
	if len(labels) == 0 {
		fmt.Fprintf(m.w, "%s %g\n", name, v)
		return
	}
	var b strings.Builder
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=\"%s\"", l[0], escapeLabel(l[1]))
	}
	fmt.Fprintf(m.w, "%s{%s} %g\n", name, b.String(), v)
}

func (m metricWriter) metric(name, typ, help string, labels [][2]string, v float64) {
	m.family(name, typ, help)
	m.sample(name, labels, v)
}

// escapeLabel renders a label value as the text exposition format
// wants: UTF-8, with backslash, double quote and line feed escaped
// (Go's %q escapes more, as \x01, which Prometheus rejects); invalid
// UTF-8 becomes U+FFFD.
func escapeLabel(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
