package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/loadgen"
)

func TestPubSubCountsEveryMessage(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	cfg := loadgen.DefaultConfig
	cfg.URL, cfg.Rate, cfg.Duration, cfg.Connections, cfg.Size = broker.ClientURL(), 2000, 500*time.Millisecond, 3, 256
	res, err := loadgen.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 3 schedules of 1/3 each: 1,000 messages in half a second.
	if res.Sent != 1000 || res.Received != res.Sent || res.Failed != 0 {
		t.Fatalf("sent %d, received %d, failed %d; want 1000 delivered", res.Sent, res.Received, res.Failed)
	}
	if res.Corrected.TotalCount() != res.Sent || res.Uncorrected.TotalCount() != res.Sent || res.SendLag.TotalCount() != res.Sent {
		t.Fatalf("histogram counts %d, %d, %d; want %d each", res.Corrected.TotalCount(), res.Uncorrected.TotalCount(), res.SendLag.TotalCount(), res.Sent)
	}
	var out bytes.Buffer
	if err := res.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var s loadgen.Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || s.Received != 1000 || s.Corrected.Percentiles["99.9999"] == 0 || s.Corrected.Histogram == nil {
		t.Fatalf("JSON summary %+v, %v", s, err)
	}
	prefix := filepath.Join(t.TempDir(), "run")
	if err := res.WritePlotterFiles(prefix); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"corrected", "uncorrected", "sendlag"} {
		b, err := os.ReadFile(prefix + "." + name + ".hgrm")
		if err != nil || !strings.Contains(string(b), "Total count    =         1000]") {
			t.Fatalf("%s plotter file: %v\n%s", name, err, b)
		}
	}
}

func TestConfigIsValidated(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*loadgen.Config)
		want   string
	}{
		{"unknown mode", func(c *loadgen.Config) { c.Mode = "firehose" }, `mode "firehose"`},
		{"zero rate", func(c *loadgen.Config) { c.Rate = 0 }, "must be positive"},
		{"no connections", func(c *loadgen.Config) { c.Connections = 0 }, "must be positive"},
		{"too small for the timestamps", func(c *loadgen.Config) { c.Size = 23 }, "at least 24 bytes"},
		{"too fast per connection", func(c *loadgen.Config) { c.Rate = 2e6 }, "at most 1,000,000/s per connection"},
		{"negative spin", func(c *loadgen.Config) { c.Spin = -time.Microsecond }, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loadgen.DefaultConfig
			tc.mutate(&cfg)
			if _, err := loadgen.Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
