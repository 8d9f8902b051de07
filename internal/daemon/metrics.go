package daemon

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/ibpath/ibpath/internal/status"
	"github.com/ibpath/ibpath/internal/version"
)

// The metrics go through the Prometheus client library: the status as
// constant metrics made at each scrape (statusCollector, from the counts
// of StatusOf(0): no QP rows), and the histograms of the recovery times
// processes report with their events (timings). Label values come from
// known sets, or from this node's own devices; the library escapes them
// as the exposition format wants.

// Descriptions of the status metrics, one per family.
var (
	descMigrations  = prometheus.NewDesc("ibpath_migrations_total", "Path migrations (layer 1) seen since ibpathd started.", nil, nil)
	descFailovers   = prometheus.NewDesc("ibpath_failovers_total", "Cross-NIC failovers (layer 2) reported since ibpathd started.", nil, nil)
	descSwitchbacks = prometheus.NewDesc("ibpath_switchbacks_total", "Cross-NIC switch-backs to the default path since ibpathd started.", nil, nil)
	descArmed       = prometheus.NewDesc("ibpath_armed_qps", "QPs whose alternate path is armed.", nil, nil)
	descQPs         = prometheus.NewDesc("ibpath_qps", "QPs by the layer protecting them.", []string{"layer"}, nil)
	descPortUp      = prometheus.NewDesc("ibpath_port_up", "1 when the port is ACTIVE.", []string{"device", "port"}, nil)
	descPenalty     = prometheus.NewDesc("ibpath_port_flap_penalty", "The port's flap damping penalty now (decays with the half-life; 0: none).", []string{"device", "port"}, nil)
	descSuppressed  = prometheus.NewDesc("ibpath_port_suppressed", "1 while the port's flap damping keeps traffic from returning to it.", []string{"device", "port"}, nil)
	descDegraded    = prometheus.NewDesc("ibpath_port_out_of_service", "1 while ibpathd keeps the port out of service for its health (found degraded from its counters).", []string{"device", "port"}, nil)
	descSeqErrs     = prometheus.NewDesc("ibpath_port_seq_errors_per_second", "Sequence errors of the port per second (gaps its requesters were told of or its responders saw), over the health rule's window.", []string{"device", "port"}, nil)
	descCongestion  = prometheus.NewDesc("ibpath_port_congestion_per_second", "Congestion signs of the port per second (ECN-marked packets received, CNPs sent and handled, PortXmitWait ticks), over the health rule's window.", []string{"device", "port"}, nil)
	descLinkErrs    = prometheus.NewDesc("ibpath_port_link_errors_per_second", "Link errors of the port per second, over the health rule's window.", []string{"device", "port"}, nil)
	descOwners      = prometheus.NewDesc("ibpath_owners", "Processes attached over the owner protocol.", nil, nil)
	descPeers       = prometheus.NewDesc("ibpath_peers", "Replication peers by state.", []string{"state"}, nil)
	descEntries     = prometheus.NewDesc("ibpath_store_entries", "Entries of the local store.", []string{"kind"}, nil)
	descLag         = prometheus.NewDesc("ibpath_replication_lag_seconds", "Lag of received replication pushes, from the origin's write.", []string{"quantile"}, nil)
	descPeersRef    = prometheus.NewDesc("ibpath_peers_refused_total", "Peer hosts refused for failing the cluster key or the label.", nil, nil)
	descRecordsRef  = prometheus.NewDesc("ibpath_records_refused_total", "Replicated records refused: their route is not their owner's node's, or they came from another node.", nil, nil)
	descReplaysRef  = prometheus.NewDesc("ibpath_replays_refused_total", "Peer messages refused as replays: sent to another node, outside the replay window, or seen before.", nil, nil)
	descOwnerRef    = prometheus.NewDesc("ibpath_owner_refusals_total", "QP reports, publications and events of local processes refused.", nil, nil)
	descConnsRef    = prometheus.NewDesc("ibpath_connections_refused_total", "Socket connections closed at once: their user held the most allowed.", nil, nil)
	descDrainLeft   = prometheus.NewDesc("ibpath_drained_port_qps", "QPs whose traffic still uses a port an operator drained (one series per drained port; 0: the drain is complete).", []string{"device", "port"}, nil)
	descSimulated   = prometheus.NewDesc("ibpath_fabric_simulated", "1 when ibpathd runs on the embedded simulated fabric.", nil, nil)
)

// statusCollector makes the status metrics from a status at each scrape.
type statusCollector struct{ status func() status.Node }

// Describe sends every description without making a status (the
// registry asks at registration, before the daemon is up).
func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMigrations, descFailovers, descSwitchbacks, descArmed, descQPs, descPortUp,
		descPenalty, descSuppressed, descDegraded, descSeqErrs, descLinkErrs, descCongestion, descOwners, descPeers, descEntries, descLag, descPeersRef, descRecordsRef, descReplaysRef, descOwnerRef, descConnsRef,
		descSimulated, descDrainLeft} {
		ch <- d
	}
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.status()
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	t := n.Totals
	counter(descMigrations, float64(t.Migrations))
	counter(descFailovers, float64(t.Failovers))
	counter(descSwitchbacks, float64(t.Switchbacks))
	gauge(descArmed, float64(t.ArmedQPs))
	// labels from a known set (status.Node.Layers): a process reports
	// its QPs' layer, and a label value per distinct report would grow
	// the series without end
	for _, l := range []string{status.LayerAPM, status.LayerCrossNIC, status.LayerNone, status.LayerOther} {
		gauge(descQPs, float64(n.Layers[l]), l)
	}
	for _, h := range n.HCAs {
		for _, p := range h.Ports {
			up := 0.0
			if p.State == "ACTIVE" {
				up = 1
			}
			dev, num := strings.ToValidUTF8(h.Name, "\uFFFD"), fmt.Sprint(p.Num)
			gauge(descPortUp, up, dev, num)
			pen, sup := 0.0, 0.0
			if d := p.Damping; d != nil {
				pen = d.Penalty
				if d.Suppressed {
					sup = 1
				}
			}
			gauge(descPenalty, pen, dev, num)
			gauge(descSuppressed, sup, dev, num)
			if ph := p.Health; ph != nil {
				out := 0.0
				if ph.OutOfService {
					out = 1
				}
				gauge(descDegraded, out, dev, num)
				gauge(descSeqErrs, ph.SeqErrorsPerSecond, dev, num)
				gauge(descLinkErrs, ph.LinkErrorsPerSecond, dev, num)
				gauge(descCongestion, ph.CongestionPerSecond, dev, num)
			}
		}
	}
	for _, x := range n.Drains {
		gauge(descDrainLeft, float64(x.QPsLeft), strings.ToValidUTF8(x.Device, "\uFFFD"), fmt.Sprint(x.Port))
	}
	gauge(descOwners, float64(len(n.Owners)))
	peers := map[string]int{status.PeerAlive: 0, status.PeerSuspect: 0, status.PeerDead: 0, status.PeerLeft: 0}
	for _, p := range n.Peers {
		if _, ok := peers[p.State]; ok {
			peers[p.State]++
		}
	}
	for s, v := range peers {
		gauge(descPeers, float64(v), s)
	}
	gauge(descEntries, float64(n.Store.QPs), "qp")
	gauge(descEntries, float64(n.Store.MRs), "mr")
	gauge(descEntries, float64(n.Store.Tombstones), "tombstone")
	gauge(descLag, t.ReplicationLagP50Seconds, "0.5")
	gauge(descLag, t.ReplicationLagP99Seconds, "0.99")
	counter(descPeersRef, float64(t.PeersRefused))
	counter(descRecordsRef, float64(t.RecordsRefused))
	counter(descReplaysRef, float64(t.MessagesRefused))
	counter(descOwnerRef, float64(t.OwnerRefusals))
	counter(descConnsRef, float64(t.ConnectionsRefused))
	sim := 0.0
	if n.Fabric.Kind == status.FabricSim {
		sim = 1
	}
	gauge(descSimulated, sim)
}

// timings are the histograms of the recovery times reported with events
// (status.Event.Took): a layer 1 migration from the port's error to the
// move, a layer 2 failover from the fault to the traffic on the backup.
type timings struct {
	migration, failover prometheus.Histogram
}

// maxTook bounds a reported time taken for a histogram: anything longer
// (or not positive) is not a recovery time but a process's mistake.
const maxTook = time.Hour

func newTimings() timings {
	buckets := prometheus.ExponentialBuckets(0.001, 2, 16) // 1 ms to 33 s
	return timings{
		migration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ibpath_migration_seconds",
			Help: "Layer 1 path migrations reported by processes: from the port's error to the move.", Buckets: buckets}),
		failover: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ibpath_failover_seconds",
			Help: "Layer 2 failovers reported by processes: from the fault to the traffic on the backup.", Buckets: buckets}),
	}
}

// observe adds an event's time taken to its histogram.
func (t timings) observe(e status.Event) {
	if e.Took <= 0 || e.Took > maxTook {
		return
	}
	switch e.Kind {
	case status.EvPathMigrated:
		t.migration.Observe(e.Took.Seconds())
	case status.EvFailover:
		t.failover.Observe(e.Took.Seconds())
	}
}

// buildInfo is ibpath_build_info: always 1, the build in its labels.
func buildInfo(b version.Info) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ibpath_build_info",
		Help:        "1, labelled with the version, VCS revision and Go version ibpathd was built with.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion}})
	g.Set(1)
	return g
}

// registry is the daemon's: the build, the status metrics and the
// timings.
func (d *Daemon) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfo(d.cfg.Build), statusCollector{status: func() status.Node { return d.StatusOf(0) }},
		d.timings.migration, d.timings.failover)
	return reg
}

// serveMetrics serves the metrics, in the format the scraper asks for.
func (d *Daemon) serveMetrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// WriteMetrics writes the status metrics of n in the text exposition
// format.
func WriteMetrics(w io.Writer, n status.Node) error {
	reg := prometheus.NewRegistry()
	if err := reg.Register(statusCollector{status: func() status.Node { return n }}); err != nil {
		return fmt.Errorf("metrics: register: %w", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("metrics: gather: %w", err)
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("metrics: encode: %w", err)
		}
	}
	return nil
}
