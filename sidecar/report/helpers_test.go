package report_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"

	"github.com/weighstation/weighstation/sidecar/latency"
	"github.com/weighstation/weighstation/sidecar/report"
)

// newReporter makes a Reporter of src for pod "pod-uid", with a fast
// backoff and an interval so long that only the test builds reports
// (CollectNow).
func newReporter(t *testing.T, src report.Source, token string, configure ...func(*report.Options)) *report.Reporter {
	t.Helper()
	opts := report.Options{
		Source:         src,
		PodUID:         "pod-uid",
		TokenFile:      token,
		Interval:       time.Hour,
		InitialBackoff: time.Millisecond,
		MaxBackoff:     10 * time.Millisecond,
		Log:            testr.New(t),
	}
	for _, c := range configure {
		c(&opts)
	}
	r, err := report.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run runs r on conn until the test ends, and then checks that Run returns
// within 10 s of its context's end.
func run(t *testing.T, r *report.Reporter, conn grpc.ClientConnInterface) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context's end")
		}
	})
}

// histogramOf is the recorders' histogram of values.
func histogramOf(values ...time.Duration) *hdrhistogram.Histogram {
	h := hdrhistogram.New(latency.MinMicros, latency.MaxMicros, latency.SignificantDigits)
	for _, v := range values {
		if err := h.RecordValue(v.Microseconds()); err != nil {
			panic(err)
		}
	}
	return h
}

// checkHistogram checks that encoded holds exactly want's values, bucket by
// bucket; no values: encoded is empty.
func checkHistogram(t *testing.T, what string, encoded []byte, want ...time.Duration) {
	t.Helper()
	if len(want) == 0 {
		if len(encoded) != 0 {
			t.Errorf("%s: %d bytes, want none (no value in the interval)", what, len(encoded))
		}
		return
	}
	got, err := hdrhistogram.Decode(encoded)
	if err != nil {
		t.Fatalf("%s: decoding: %v", what, err)
	}
	w := histogramOf(want...)
	if got.TotalCount() != w.TotalCount() || !slices.Equal(got.Export().Counts, w.Export().Counts) {
		t.Errorf("%s: %d values (p50 %d µs, max %d µs), want %d (p50 %d µs, max %d µs), bucket by bucket",
			what, got.TotalCount(), got.ValueAtQuantile(50), got.Max(), w.TotalCount(), w.ValueAtQuantile(50), w.Max())
	}
}

func ms(n ...int) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, v := range n {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}
