package e2e

import "testing"

const sidecarScrape = `# HELP weighstation_sidecar_broker_connected 1 while the connection to the broker is up.
# TYPE weighstation_sidecar_broker_connected gauge
weighstation_sidecar_broker_connected 1
weighstation_sidecar_broker_reconnects_total 2
weighstation_sidecar_broker_in_doubt_total 0
weighstation_sidecar_dropped_total{reason="overflow",subscription="e2e-stream"} 3
weighstation_sidecar_dropped_total{reason="killed",subscription="e2e-stream"} 4
weighstation_sidecar_dropped_total{reason="killed",subscription="odd \"name\""} 5
weighstation_sidecar_latency_seconds{kind="dwell",subscription="e2e-stream",quantile="0.5"} 1.5e-05
weighstation_sidecar_latency_seconds_count{kind="dwell",subscription="e2e-stream"} 10 1700000000000
`

func TestParseMetrics(t *testing.T) {
	s, err := ParseMetrics(sidecarScrape)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := s.Sum("weighstation_sidecar_broker_connected", nil); !ok || v != 1 {
		t.Errorf("connected = %v, %v", v, ok)
	}
	if v, _ := s.Sum("weighstation_sidecar_dropped_total", map[string]string{"subscription": "e2e-stream"}); v != 7 {
		t.Errorf("dropped for e2e-stream = %v, want 7", v)
	}
	if v, _ := s.Sum("weighstation_sidecar_dropped_total", map[string]string{"subscription": `odd "name"`}); v != 5 {
		t.Errorf("an escaped label value: %v, want 5", v)
	}
	if by := s.ByLabel("weighstation_sidecar_dropped_total", "reason"); by["killed"] != 9 || by["overflow"] != 3 {
		t.Errorf("by reason %v", by)
	}
	if v, _ := s.Sum("weighstation_sidecar_latency_seconds_count", nil); v != 10 {
		t.Errorf("a sample with a timestamp: %v", v)
	}
	if _, ok := s.Sum("weighstation_sidecar_nothing", nil); ok {
		t.Error("found a metric that is not there")
	}
	for _, bad := range []string{"novalue", `x{a="1" 2`, "x notanumber"} {
		if _, err := ParseMetrics(bad); err == nil {
			t.Errorf("ParseMetrics(%q) accepted it", bad)
		}
	}
}
