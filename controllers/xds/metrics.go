package xds

import "github.com/prometheus/client_golang/prometheus"

type serverMetrics struct {
	streams     prometheus.Gauge
	pushes      prometheus.Counter
	acks        prometheus.Counter
	nacks       prometheus.Counter
	pushLatency prometheus.Histogram
	refused     *prometheus.CounterVec
	// refusedConnsClosed counts the connections closed after a refusal of
	// this replica's (connTracker), which makes their sidecars dial again.
	refusedConnsClosed prometheus.Counter
	// nackReasonsTruncated counts NACK reasons cut to MaxNACKReasonBytes.
	nackReasonsTruncated prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	m := &serverMetrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weighstation_operator_xds_streams", Help: "Connected sidecar xDS streams."}),
		pushes:  prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_xds_pushes_total", Help: "Responses sent to sidecars."}),
		acks:    prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_xds_acks_total", Help: "Responses sidecars applied (ACK)."}),
		nacks:   prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_xds_nacks_total", Help: "Responses sidecars refused (NACK)."}),
		pushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "weighstation_operator_xds_push_latency_seconds",
			Help:    "From a resource's change in the operator's cache to its push on a stream that held the earlier version.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100 µs to about 3 s
		}),
		refused:              prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weighstation_operator_xds_refused_total", Help: "Streams and requests refused, by reason."}, []string{"reason"}),
		nackReasonsTruncated: prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_xds_nack_reasons_truncated_total", Help: "NACK reasons longer than the operator keeps (MaxNACKReasonBytes), cut."}),
		refusedConnsClosed:   prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_xds_refused_connections_closed_total", Help: "Connections closed after this replica refused a stream on them for not serving (not the leader, or not synced), so that their sidecars dial the xDS Service again."}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.pushes, m.acks, m.nacks, m.pushLatency, m.refused, m.refusedConnsClosed, m.nackReasonsTruncated)
	}
	return m
}
