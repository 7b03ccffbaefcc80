package latency_test

import (
	"testing"
	"time"

	"github.com/weighstation/weighstation/sidecar/latency"
)

func TestRecorderClampsAndCountsOutOfRange(t *testing.T) {
	r := latency.NewRecorder()
	for _, d := range []time.Duration{
		500 * time.Nanosecond, // below a microsecond: the floor, not an error
		time.Millisecond,
		time.Millisecond,
		-time.Second,           // clock skew
		-500 * time.Nanosecond, // skew too, however small (it truncated to 0, uncounted)
		2 * time.Minute,        // over 60 s
		59 * time.Second,       // at the edge, in range
	} {
		r.Record(d)
	}
	s := r.Snapshot()
	if s.Histogram.TotalCount() != 7 || s.Negative != 2 || s.TooLarge != 1 {
		t.Fatalf("count %d, negative %d, too large %d; want 7, 2, 1", s.Histogram.TotalCount(), s.Negative, s.TooLarge)
	}
	if max := s.Histogram.Max(); max < 59_900_000 || max > latency.MaxMicros+latency.MaxMicros/1000 {
		t.Fatalf("max %d µs, want the clamped 60 s", max)
	}
	if p50 := s.Histogram.ValueAtQuantile(50); p50 < 990 || p50 > 1010 {
		t.Fatalf("p50 %d µs, want about 1000", p50)
	}
}
