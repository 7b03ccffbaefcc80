package report

import "github.com/prometheus/client_golang/prometheus"

// Prometheus metrics, read from the Reporter's Stats at scrape time, as the
// sidecar's own are read from its accounting.
var (
	descSent = prometheus.NewDesc("weighstation_sidecar_reports_sent_total",
		"Reports written to the operator's Reports stream, resends included.", nil, nil)
	descResent = prometheus.NewDesc("weighstation_sidecar_reports_resent_total",
		"Reports written again, unchanged, because the operator had not acknowledged them when a stream ended.", nil, nil)
	descAcknowledged = prometheus.NewDesc("weighstation_sidecar_reports_acknowledged_total",
		"Reports the operator acknowledged.", nil, nil)
	descDropped = prometheus.NewDesc("weighstation_sidecar_reports_dropped_total",
		"Reports dropped unacknowledged, by reason: overflow (the queue of unacknowledged reports was full; the oldest went), "+
			"refused (the operator refused it). Their latency values are lost; their counters are totals, which the next report carries.",
		[]string{"reason"}, nil)
	descStreamErrors = prometheus.NewDesc("weighstation_sidecar_report_stream_errors_total",
		"Reports streams that ended, by gRPC code (Unknown for a failure before the stream, such as an unreadable token file).",
		[]string{"code"}, nil)
	descPending = prometheus.NewDesc("weighstation_sidecar_reports_pending",
		"Reports waiting for the operator's acknowledgement.", nil, nil)
	descConnected = prometheus.NewDesc("weighstation_sidecar_report_stream_connected",
		"1 while a Reports stream to the operator is open.", nil, nil)
)

type collector struct{ r *Reporter }

// Collector returns a Prometheus collector of the Reporter's metrics.
func (r *Reporter) Collector() prometheus.Collector { return collector{r} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSent, descResent, descAcknowledged, descDropped, descStreamErrors, descPending, descConnected} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.r.Stats()
	ch <- prometheus.MustNewConstMetric(descSent, prometheus.CounterValue, float64(s.Sent))
	ch <- prometheus.MustNewConstMetric(descResent, prometheus.CounterValue, float64(s.Resent))
	ch <- prometheus.MustNewConstMetric(descAcknowledged, prometheus.CounterValue, float64(s.Acknowledged))
	// Both reasons always, so that a rate over the series starts at zero.
	for _, reason := range []string{DropOverflow, DropRefused} {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.Dropped[reason]), reason)
	}
	for code, n := range s.StreamErrors {
		ch <- prometheus.MustNewConstMetric(descStreamErrors, prometheus.CounterValue, float64(n), code)
	}
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.Pending))
	connected := 0.0
	if s.Connected {
		connected = 1
	}
	ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, connected)
}
