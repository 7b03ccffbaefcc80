package loadgen_test

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/loadgen"
)

// TestCalibrationCtrlZ is the "CTRL+Z" test of coordinated omission: at a
// fixed rate of requests, the responder freezes once for 300 ms. A generator
// that does not coordinate with the system under test must show the queue
// of requests scheduled during the freeze: at least half of rate × freeze
// samples above a third of the freeze. Measured from the actual send, as a
// closed-loop tool would, only a handful show it.
func TestCalibrationCtrlZ(t *testing.T) {
	const (
		rate   = 1000.0
		freeze = 300 * time.Millisecond
	)
	broker := natstest.StartBroker(t, nil)
	responder := natstest.Connect(t, broker.ClientURL())
	var answered atomic.Int64
	if _, err := responder.Subscribe("calibrate", func(m *nats.Msg) {
		if answered.Add(1) == 300 { // a third of the way into the run
			time.Sleep(freeze)
		}
		_ = m.Respond(m.Data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}
	cfg := loadgen.DefaultConfig
	cfg.URL, cfg.Mode, cfg.Rate, cfg.Duration, cfg.Subject, cfg.Size = broker.ClientURL(), loadgen.ReqRep, rate, time.Second, "calibrate", 64
	res, err := loadgen.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 0 || res.Received != res.Sent || res.Sent != int64(rate) {
		t.Fatalf("sent %d, received %d, failed %d; want %d answered", res.Sent, res.Received, res.Failed, int(rate))
	}
	third := (freeze / 3).Microseconds()
	corrected := countAbove(res.Corrected.Distribution(), third)
	uncorrected := countAbove(res.Uncorrected.Distribution(), third)
	want := int64(rate * freeze.Seconds() / 2)
	t.Logf("samples over %d µs: corrected %d (want >= %d), uncorrected %d", third, corrected, want, uncorrected)
	if corrected < want {
		t.Errorf("corrected distribution: %d samples over a third of the freeze, want at least %d: the generator coordinated", corrected, want)
	}
	if uncorrected > 5 {
		t.Errorf("uncorrected distribution: %d samples over a third of the freeze, want a handful (<= 5)", uncorrected)
	}
	// The send lag shows that the generator fell behind its schedule during
	// the freeze, and by how much.
	if lag := res.SendLag.Max(); lag < third {
		t.Errorf("send lag max %d µs, want at least %d: the late sends must show", lag, third)
	}
	var report bytes.Buffer
	if err := res.WriteReport(&report); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Value\tPercentile\tTotalCount\t1/(1-Percentile)", "99.9999%", "max", "generator CPU"} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, report.String())
		}
	}
}

func countAbove(bars []hdrhistogram.Bar, micros int64) int64 {
	var n int64
	for _, b := range bars {
		if b.From > micros {
			n += b.Count
		}
	}
	return n
}
