package report_test

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"

	xdsv1 "github.com/weighstation/weighstation/api/xds/v1"
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

// histogramFrom is the HdrHistogram a report's bucket counts describe
// (nil: none), checking the form report.proto states.
func histogramFrom(t *testing.T, h *xdsv1.Histogram) *hdrhistogram.Histogram {
	t.Helper()
	if h == nil {
		return nil
	}
	s := hdrhistogram.New(h.GetLowestTrackableValue(), h.GetHighestTrackableValue(), int(h.GetSignificantDigits())).Export()
	if len(h.GetBuckets()) == 0 {
		t.Fatal("a histogram without buckets: want none")
	}
	i := -1
	for b := h.GetBuckets(); len(b) > 0; {
		d, k := binary.Uvarint(b)
		c, m := binary.Uvarint(b[k:])
		if k <= 0 || m <= 0 || d == 0 || c == 0 {
			t.Fatalf("after index %d: a malformed bucket", i)
		}
		b = b[k+m:]
		i += int(d)
		s.Counts[i] = int64(c)
	}
	return hdrhistogram.Import(s)
}

// checkHistogram checks that a report's histogram holds exactly want's
// values, bucket by bucket, at the recorders' geometry; no values: none.
func checkHistogram(t *testing.T, what string, h *xdsv1.Histogram, want ...time.Duration) {
	t.Helper()
	if len(want) == 0 {
		if h != nil {
			t.Errorf("%s: %d bytes of buckets, want none (no value in the interval)", what, len(h.GetBuckets()))
		}
		return
	}
	if h == nil {
		t.Fatalf("%s: no histogram, want %d values", what, len(want))
	}
	if h.GetLowestTrackableValue() != latency.MinMicros || h.GetHighestTrackableValue() != latency.MaxMicros || h.GetSignificantDigits() != latency.SignificantDigits {
		t.Errorf("%s: geometry %d..%d, %d digits; want the recorders'", what, h.GetLowestTrackableValue(), h.GetHighestTrackableValue(), h.GetSignificantDigits())
	}
	got := histogramFrom(t, h)
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
