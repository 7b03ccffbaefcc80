package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics serves the broker's state for Prometheus, from nats-server's
// own counters (Varz) read at each scrape: nats-server's monitoring port
// speaks JSON, which Prometheus does not scrape without an exporter
// beside it. /healthz is nats-server's health check.
type Metrics struct {
	srv *server.Server
	reg *prometheus.Registry
}

// NewMetrics returns the metrics of s.
func NewMetrics(s *server.Server) *Metrics {
	m := &Metrics{srv: s, reg: prometheus.NewRegistry()}
	m.reg.MustRegister(varzCollector{s: s})
	return m
}

// Handler serves /metrics and /healthz.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if st := m.srv.Healthz(nil); st.Error != "" {
			http.Error(w, st.Error, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Serve listens on addr (it fails at once if it cannot, so that a busy
// port stops the broker instead of leaving it unwatched) and serves until
// ctx ends.
func (m *Metrics) Serve(ctx context.Context, addr string) (net.Addr, <-chan error, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("-metrics-listen %s: %w", addr, err)
	}
	hs := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() {
		err := hs.Serve(lis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(shutdownCtx)
	}()
	return lis.Addr(), done, nil
}

// varzCollector turns one Varz into metrics at each scrape.
type varzCollector struct{ s *server.Server }

var (
	descConnections   = prometheus.NewDesc("weighstation_broker_connections", "Client connections (sidecars) open.", nil, nil)
	descTotalConns    = prometheus.NewDesc("weighstation_broker_connections_total", "Client connections accepted since start.", nil, nil)
	descMaxConns      = prometheus.NewDesc("weighstation_broker_max_connections", "The limit of client connections (-max-connections).", nil, nil)
	descSubscriptions = prometheus.NewDesc("weighstation_broker_subscriptions", "Subscriptions held, the broker's own (system requests, about 60) included.", nil, nil)
	descRoutes        = prometheus.NewDesc("weighstation_broker_routes", "Routes to other brokers open.", nil, nil)
	descSlow          = prometheus.NewDesc("weighstation_broker_slow_consumers_total", "Clients disconnected for pending more than -max-pending bytes.", nil, nil)
	descInMsgs        = prometheus.NewDesc("weighstation_broker_in_messages_total", "Messages received.", nil, nil)
	descOutMsgs       = prometheus.NewDesc("weighstation_broker_out_messages_total", "Messages sent.", nil, nil)
	descInBytes       = prometheus.NewDesc("weighstation_broker_in_bytes_total", "Payload bytes received.", nil, nil)
	descOutBytes      = prometheus.NewDesc("weighstation_broker_out_bytes_total", "Payload bytes sent.", nil, nil)
	descMaxPayload    = prometheus.NewDesc("weighstation_broker_max_payload_bytes", "The largest message accepted (-max-payload).", nil, nil)
)

func (varzCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnections, descTotalConns, descMaxConns, descSubscriptions, descRoutes, descSlow, descInMsgs, descOutMsgs, descInBytes, descOutBytes, descMaxPayload} {
		ch <- d
	}
}

func (c varzCollector) Collect(ch chan<- prometheus.Metric) {
	v, err := c.s.Varz(nil)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descConnections, fmt.Errorf("reading the broker's state: %w", err))
		return
	}
	gauge := func(d *prometheus.Desc, x float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x) }
	counter := func(d *prometheus.Desc, x float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, x)
	}
	gauge(descConnections, float64(v.Connections))
	counter(descTotalConns, float64(v.TotalConnections))
	gauge(descMaxConns, float64(v.MaxConn))
	gauge(descSubscriptions, float64(v.Subscriptions))
	gauge(descRoutes, float64(v.Routes))
	counter(descSlow, float64(v.SlowConsumers))
	counter(descInMsgs, float64(v.InMsgs))
	counter(descOutMsgs, float64(v.OutMsgs))
	counter(descInBytes, float64(v.InBytes))
	counter(descOutBytes, float64(v.OutBytes))
	gauge(descMaxPayload, float64(v.MaxPayload))
}
