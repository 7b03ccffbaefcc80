package reports

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	accepted     prometheus.Counter
	duplicates   prometheus.Counter
	refused      *prometheus.CounterVec
	decodeErrors prometheus.Counter
	// counterShrinks counts report totals smaller than the series' last,
	// counted as no growth.
	counterShrinks prometheus.Counter
	series         prometheus.Gauge
	bytes          prometheus.Gauge
	// shed counts the Subscription reports whose histograms were left out
	// at the memory cap.
	shed     prometheus.Counter
	maxBytes prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		accepted:       prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_reports_accepted_total", Help: "Sidecar reports accepted and stored."}),
		duplicates:     prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_reports_duplicates_total", Help: "Sidecar reports acknowledged again without being counted (resent after a lost acknowledgement)."}),
		refused:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weighstation_operator_reports_refused_total", Help: "Sidecar reports and report streams refused, by reason."}, []string{"reason"}),
		decodeErrors:   prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_reports_decode_errors_total", Help: "Report histograms that did not decode, or not with the expected geometry."}),
		counterShrinks: prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_reports_counter_shrinks_total", Help: "Report totals (delivered, dropped, publish counts) smaller than the same sidecar's previous report's, counted as no growth: a sidecar bug."}),
		series:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "weighstation_operator_reports_series", Help: "Report series (sidecar processes) held in the window."}),
		bytes:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "weighstation_operator_reports_memory_bytes", Help: "Estimated memory of the reports held in the window."}),
		shed:           prometheus.NewCounter(prometheus.CounterOpts{Name: "weighstation_operator_reports_latency_shed_total", Help: "Subscriptions' latency histograms left out of accepted reports because the reports' memory estimate was past its cap (weighstation_operator_reports_memory_cap_bytes); their counters and kill states were kept."}),
		maxBytes:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "weighstation_operator_reports_memory_cap_bytes", Help: "The reports' memory cap (-report-max-bytes, or a quarter of GOMEMLIMIT): past it, reports' latency histograms are shed."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.accepted, m.duplicates, m.refused, m.decodeErrors, m.counterShrinks, m.series, m.bytes, m.shed, m.maxBytes} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
