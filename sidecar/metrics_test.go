package sidecar_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/meshconfig"
)

func TestMetricsAndDebugLatency(t *testing.T) {
	r := newRig(t)
	cfg := configWith(meshconfig.TopicPolicy{Name: "orders", Subject: "orders.>", MaxMessageBytes: 10, MayPublish: true, StampHeader: true})
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{{Name: "billing", Subject: "orders.>", Essential: true,
		Limits: meshconfig.Limits{MaxPendingMessages: 100, MaxPendingBytes: 1 << 20, Overflow: "DropNewest"}}}
	if err := r.side.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	app := r.app(t)
	got := make(chan struct{}, 10)
	sub, err := app.Subscribe("orders.eu", func(*nats.Msg) { got <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	flush(t, app)
	for _, data := range []string{"ok", "ok", "far too long for ten bytes"} {
		if err := app.Publish("orders.eu", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, app)
	receive(t, "the first delivery", got)
	receive(t, "the second delivery", got)
	// Unsubscribing must not make the totals go backwards.
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	flush(t, app)

	srv := httptest.NewServer(r.side.Handler())
	defer srv.Close()
	metrics := fetch(t, srv.URL+"/metrics")
	for _, want := range []string{
		`weighstation_sidecar_arrived_total{subscription="billing"} 2`,
		`weighstation_sidecar_delivered_total{subscription="billing"} 2`,
		`weighstation_sidecar_dropped_total{reason="overflow",subscription="billing"} 0`,
		`weighstation_sidecar_publish_total{outcome="forwarded",topic="orders"} 2`,
		`weighstation_sidecar_publish_total{outcome="refused_size",topic="orders"} 1`,
		`weighstation_sidecar_latency_seconds_count{kind="dwell",subscription="billing"} 2`,
		`weighstation_sidecar_latency_seconds_count{kind="end_to_end",subscription="billing"} 2`,
		`weighstation_sidecar_memory_budget_bytes 6.7108864e+07`,
		`weighstation_sidecar_invalid_total 0`,
		`weighstation_sidecar_unrouted_total `,
		`weighstation_sidecar_broker_in_doubt_total 0`,
		`weighstation_sidecar_echo_suppressed_total 0`,
		`weighstation_sidecar_requests_untracked_total 0`,
		`weighstation_sidecar_no_responders_total{direction="received"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	debug := fetch(t, srv.URL+"/debug/latency")
	for _, want := range []string{"# subscription billing, dwell, microseconds", "# subscription billing, end-to-end", "Value", "Percentile", "TotalCount"} {
		if !strings.Contains(debug, want) {
			t.Errorf("/debug/latency lacks %q:\n%s", want, debug)
		}
	}
}

func fetch(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
