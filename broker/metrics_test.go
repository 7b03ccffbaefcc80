package broker_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/weighstation/weighstation/broker"
)

// scrape reads the broker's /metrics into name -> value.
func scrape(t *testing.T, addr net.Addr) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func TestTheBrokersMetricsCountWhatPassed(t *testing.T) {
	o := broker.DefaultOptions
	o.Listen, o.Token = "127.0.0.1:0", "s"
	s := startServer(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done, err := broker.NewMetrics(s).Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(s.ClientURL(), nats.Token("s"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	before := scrape(t, addr)
	sub, err := nc.SubscribeSync("orders")
	if err != nil {
		t.Fatal(err)
	}
	const sent = 25
	for range sent {
		if err := nc.Publish("orders", []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	for range sent { // every message went through before the scrape
		if _, err := sub.NextMsg(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	got := scrape(t, addr)
	for name, want := range map[string]float64{
		"weighstation_broker_connections":          1,
		"weighstation_broker_subscriptions":        before["weighstation_broker_subscriptions"] + 1,
		"weighstation_broker_in_messages_total":    sent,
		"weighstation_broker_out_messages_total":   sent,
		"weighstation_broker_in_bytes_total":       10 * sent,
		"weighstation_broker_max_connections":      float64(o.MaxConnections),
		"weighstation_broker_max_payload_bytes":    float64(o.MaxPayload),
		"weighstation_broker_slow_consumers_total": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}

	resp, err := http.Get("http://" + addr.String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "ok") {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serving ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the metrics server did not stop with its context")
	}
}

func TestABusyMetricsPortFailsNamingTheFlag(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	o := broker.DefaultOptions
	o.Listen, o.Token = "127.0.0.1:0", "s"
	s, err := broker.New(o)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = broker.NewMetrics(s).Serve(context.Background(), busy.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "-metrics-listen") {
		t.Fatalf("serving on a busy port: %v, want an error naming -metrics-listen", err)
	}
}
