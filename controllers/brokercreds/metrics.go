package brokercreds

import "github.com/prometheus/client_golang/prometheus"

// Metrics count what the package issues, refuses, revokes and pushes.
type Metrics struct {
	issued            prometheus.Counter
	refused           *prometheus.CounterVec
	revoked           prometheus.Counter
	droppedEarly      prometheus.Counter
	revocationEntries prometheus.Gauge
	pushes            *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg (nil: none registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		issued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weighstation_operator_broker_credentials_issued_total",
			Help: "Broker credentials issued to sidecars.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weighstation_operator_broker_credentials_refused_total",
			Help: "Requests for a broker credential refused, by reason (not_injected: the pod lacks the injector's annotation; wrong_pod: the request names another pod's UID; not_ready: the keys are not read yet).",
		}, []string{"reason"}),
		revoked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weighstation_operator_broker_credentials_revoked_total",
			Help: "Broker credentials revoked: their pod was deleted, finished or left the mesh, or its sidecar was replaced.",
		}),
		droppedEarly: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weighstation_operator_broker_revocations_dropped_early_total",
			Help: "Revocations folded, past -broker-max-revocations, into a revocation of every older credential of their namespace.",
		}),
		revocationEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weighstation_operator_broker_revocation_entries",
			Help: "Entries of the namespaces' revocation lists, as last written.",
		}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weighstation_operator_broker_account_pushes_total",
			Help: "Pushes of a namespace's account JWT to the brokers, by result (applied or failed).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.issued, m.refused, m.revoked, m.droppedEarly, m.revocationEntries, m.pushes)
	}
	return m
}
